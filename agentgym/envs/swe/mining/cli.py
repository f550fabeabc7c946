"""``agentgym swe ...``: mine tasks from real packages and build their images.

- ``agentgym swe mine NAME[==VER] ...``: mine each package from its recipe in
  ``agentgym/envs/swe/real/packages.json`` (seed, budget, caps) and write its instances to
  ``--out/<package>.jsonl`` and the mining report (yield per strategy, time) to
  ``--out/reports/<package>.json``. The default ``--out`` is the shipped folder, so mining a
  shipped package again reproduces its file (``git diff`` shows any change).
- ``agentgym swe build-images [NAME ...]``: build the package images the mined tasks run in
  (the env also builds a missing one on first use).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Annotated, Any

import typer

from agentgym.envs.swe.mining.recipe import REAL_DIR, PackageRecipe, load_recipes
from agentgym.files import atomic_write

app = typer.Typer(help="SWE tasks from real packages: mine them, build their images.",
                  no_args_is_help=True)


def write_instances(path: Path, instances: list[dict[str, Any]]) -> None:
    """One instance a line, keys sorted, so equal mining runs give equal bytes."""
    atomic_write(path, "".join(json.dumps(i, sort_keys=True, ensure_ascii=False) + "\n"
                               for i in instances))


async def mine_to(recipe: PackageRecipe, out: Path, *, rewrite_url: str | None = None,
                  rewrite_model: str | None = None, log: Any = print) -> Path:
    """Mine one package into ``out/<slug>.jsonl`` (and its report); returns the file."""
    from agentgym.sandboxes.engine import client, engine_lease

    with engine_lease() as url:  # starts the private engine when none runs
        return await _mine_in(recipe, out, url, client(url), rewrite_url, rewrite_model, log)


async def _mine_in(recipe: PackageRecipe, out: Path, url: str, c: Any, rewrite_url: str | None,
                   rewrite_model: str | None, log: Any) -> Path:
    from agentgym.envs.swe.mining.issue import rewrite_issue
    from agentgym.envs.swe.mining.mine import changed_lines, mine_package
    from agentgym.sandboxes.docker import DockerConfig, DockerSandbox

    @contextlib.asynccontextmanager
    async def sandbox(image: str) -> AsyncIterator[DockerSandbox]:
        # The repository is in the image: no tmpfs over /testbed, the image's (root) user.
        config = DockerConfig(image=image, base_url=url, read_only_root=False, user=None,
                              tmpfs={"/tmp": 512}, memory_mb=2048)
        async with DockerSandbox(config) as box:
            yield box

    try:
        instances, report = await mine_package(recipe, client=c, sandbox=sandbox, log=log)
    finally:
        c.close()
    instances = drop_recorded(recipe, instances, log)
    if rewrite_url and rewrite_model:
        kept = 0
        for inst in instances:
            changed = changed_lines(*_sides(inst["setup_patch"]))
            original = inst["problem_statement"]
            inst["problem_statement"] = await rewrite_issue(
                original, base_url=rewrite_url, model=rewrite_model, changed=changed,
                keep=inst["FAIL_TO_PASS"][:1])
            kept += inst["problem_statement"] != original
        log(f"{recipe.name}=={recipe.version}: {rewrite_model} reworded {kept} of "
            f"{len(instances)} issues (the others were empty, quoted the changed code or "
            "lost the first failing test's id, and keep the written text)")
    path = out / f"{recipe.slug}.jsonl"
    write_instances(path, instances)
    reports = out / "reports"
    reports.mkdir(parents=True, exist_ok=True)
    atomic_write(reports / f"{recipe.slug}.json",
                 json.dumps(report.to_dict(), indent=1, sort_keys=True) + "\n")
    return path


def drop_recorded(recipe: PackageRecipe, instances: list[dict[str, Any]], log: Any = print
                  ) -> list[dict[str, Any]]:
    """``instances`` without those the recipe records as dropped (see ``PackageRecipe``)."""
    found = {i["instance_id"] for i in instances}
    for instance_id, reason in sorted(recipe.dropped.items()):
        log(f"{recipe.spec}: dropped {instance_id}: {reason}" if instance_id in found else
            f"{recipe.spec}: the recipe drops {instance_id}, which this run did not mine")
    return [i for i in instances if i["instance_id"] not in recipe.dropped]


def _sides(patch: str) -> tuple[str, str]:
    """The removed and added text of a diff (enough to find its changed lines)."""
    lines = patch.splitlines()
    old = "\n".join(x[1:] for x in lines if x.startswith("-") and not x.startswith("---"))
    new = "\n".join(x[1:] for x in lines if x.startswith("+") and not x.startswith("+++"))
    return old, new


@app.command()
def mine(
    packages: Annotated[list[str], typer.Argument(
        help="NAME or NAME==VERSION, each with a recipe in packages.json.")],
    out: Annotated[Path, typer.Option(help="Output folder.")] = REAL_DIR,
    recipes: Annotated[Path, typer.Option(help="Recipe file.")] = REAL_DIR / "packages.json",
    rewrite_url: Annotated[str | None, typer.Option(
        help="Reword each issue with this OpenAI-compatible server (…/v1).")] = None,
    rewrite_model: Annotated[str | None, typer.Option(help="Model for --rewrite-url.")] = None,
) -> None:
    """Mine bug-fix tasks from real packages (run it under `nice -n 10` on a shared machine)."""
    book = load_recipes(recipes)
    chosen = [book.get(p) for p in packages]  # every name checked before any work starts
    for recipe in chosen:
        path = asyncio.run(mine_to(recipe, out, rewrite_url=rewrite_url,
                                   rewrite_model=rewrite_model, log=typer.echo))
        typer.echo(f"wrote {path}")


@app.command("build-images")
def build_images(
    packages: Annotated[list[str] | None, typer.Argument(
        help="Package names (default: every recipe).")] = None,
    recipes: Annotated[Path, typer.Option(help="Recipe file.")] = REAL_DIR / "packages.json",
) -> None:
    """Build the images the mined tasks run in (sdists downloaded and hash-checked)."""
    from agentgym.envs.swe.mining.recipe import ensure_package_images

    book = load_recipes(recipes)
    chosen = [book.get(p) for p in packages] if packages else list(book.recipes.values())
    for name in ensure_package_images(chosen, log=typer.echo):
        typer.echo(f"ready: {name}")
