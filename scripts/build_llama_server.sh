#!/usr/bin/env bash
# Builds llama.cpp's llama-server for the llama.cpp backend (agentgym/policies/llamacpp.py) from
# the llama.cpp source that the llama-cpp-python package vendors on PyPI, for this machine's CPU,
# into ~/.cache/agentgym/llama.cpp/bin (or $AGENTGYM_CACHE/llama.cpp/bin). Needs cmake and a C++
# compiler (Debian/Ubuntu: apt-get install cmake g++); about five minutes on two cores.
set -euo pipefail
version=0.3.36
root="${AGENTGYM_CACHE:-$HOME/.cache/agentgym}/llama.cpp"
if [ -x "$root/bin/llama-server" ] && [ "$(cat "$root/VERSION" 2>/dev/null)" = "$version" ]; then
    echo "llama-server $version is built: $root/bin/llama-server"
    exit 0
fi
for tool in cmake c++; do
    command -v "$tool" >/dev/null || { echo "building llama-server needs $tool (Debian/Ubuntu: apt-get install cmake g++)" >&2; exit 1; }
done
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$work"
tar xzf "$work/llama_cpp_python-$version.tar.gz" -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
# One static binary (no shared libraries to find at run time), for this CPU's instructions.
log="$work/build.log"
if ! { cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=ON -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DLLAMA_BUILD_EXAMPLES=OFF &&
       cmake --build "$work/build" --target llama-server -j "$(nproc)"; } >"$log" 2>&1; then
    tail -40 "$log" >&2
    echo "building llama-server failed (the lines above are the end of its log)" >&2
    exit 1
fi
mkdir -p "$root/bin"
install -m 755 "$work/build/bin/llama-server" "$root/bin/llama-server"
echo "$version" >"$root/VERSION"
echo "built $root/bin/llama-server"
