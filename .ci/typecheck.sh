#!/usr/bin/env bash
# pyright in basic mode (settings: [tool.pyright] in pyproject.toml) on agentgym/, trainers/,
# sandboxes/ and envs/. Those folders install as agentgym, agentgym.trainers,
# agentgym.sandboxes and agentgym.envs (setuptools package-dir), a mapping pyright cannot see
# through the editable-install hook, so it checks a tree of links laid out as the installed
# package. Paths print as in the repo.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
tree=$(mktemp -d)
trap 'rm -rf "$tree"' EXIT
link() {  # every source file under $1, linked into $tree/$2
    (cd "$1" && find . -name '*.py' -not -path '*/__pycache__/*') | while read -r f; do
        mkdir -p "$tree/$2/$(dirname "$f")"
        ln -s "$root/$1/$f" "$tree/$2/$f"
    done
}
link agentgym agentgym
link trainers agentgym/trainers
link sandboxes agentgym/sandboxes
link envs agentgym/envs
cp pyproject.toml "$tree/"
cd "$tree"
pyright "$@" | sed -e "s#$tree/agentgym/trainers/#trainers/#g" \
    -e "s#$tree/agentgym/sandboxes/#sandboxes/#g" -e "s#$tree/agentgym/envs/#envs/#g" \
    -e "s#$tree/agentgym/#agentgym/#g"
