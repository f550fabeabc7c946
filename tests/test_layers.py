"""Imports point one way (docs/architecture.md), and no module imports another's private name.

Read from the source with ``ast``, so a lazy import inside a function counts too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "agentgym"
# agentgym/cli.py is the composition root: the one module that reaches every layer.
COMPOSITION_ROOT = PACKAGE / "cli.py"
# The four layers of docs/architecture.md: core <- sandboxes <- envs, core <- trainers.
FORBIDDEN = {
    "agentgym": ("agentgym.trainers", "agentgym.envs", "agentgym.sandboxes"),
    "trainers": ("agentgym.envs", "agentgym.sandboxes"),
    "sandboxes": ("agentgym.trainers", "agentgym.envs"),
    "envs": ("agentgym.trainers",),
}
UPPER = ("trainers", "sandboxes", "envs")  # subpackages of agentgym/ that are layers of their own
# The core's own subpackages; a new subpackage must be placed in a layer here or in UPPER.
CORE_SUBPACKAGES = {"engines", "evaluation", "policies"}


def imported_modules(path: Path) -> list[tuple[int, str, tuple[str, ...]]]:
    """Every ``import`` in ``path``: line, module and the names taken from it."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, ()) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, tuple(a.name for a in node.names)))
    return found


def sources(layer: str) -> list[Path]:
    """The layer's modules: ``agentgym/<layer>/`` for an upper layer, the rest for the core."""
    if layer in UPPER:
        return sorted((PACKAGE / layer).rglob("*.py"))
    upper = tuple(PACKAGE / name for name in UPPER)
    return sorted(p for p in PACKAGE.rglob("*.py")
                  if p != COMPOSITION_ROOT and not any(p.is_relative_to(u) for u in upper))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_lower_layers_never_import_upper_ones(package):
    upward = [f"{path.relative_to(ROOT)}:{line} imports {module}"
              for path in sources(package) for line, module, _ in imported_modules(path)
              if module.startswith(FORBIDDEN[package])]
    assert upward == [], "imports must point down (docs/architecture.md):\n" + "\n".join(upward)


def test_no_module_imports_a_private_name_of_another():
    private = [f"{path.relative_to(ROOT)}:{line} takes {name} from {module}"
               for layer in FORBIDDEN
               for path in sources(layer)
               for line, module, names in imported_modules(path)
               if module.startswith("agentgym")
               for name in names if name.startswith("_") and not name.startswith("__")]
    assert private == [], "\n".join(private)


def test_every_layer_is_checked():
    """A package the check forgot (beside agentgym/, or a new subpackage) would go unguarded."""
    beside = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert beside - {"tests", "benchmarks", "examples"} == {"agentgym"}
    subpackages = {p.parent.name for p in PACKAGE.glob("*/__init__.py")}
    assert subpackages == set(UPPER) | CORE_SUBPACKAGES
    assert set(UPPER) | {"agentgym"} == set(FORBIDDEN)
    every = {p for layer in FORBIDDEN for p in sources(layer)} | {COMPOSITION_ROOT}
    assert every == set(PACKAGE.rglob("*.py"))


def test_the_check_sees_a_lazy_upward_import(tmp_path):
    """The scan reads imports inside functions, where upward imports used to hide."""
    module = tmp_path / "lazy.py"
    module.write_text("def plot():\n    from agentgym.trainers.metrics import read_metrics\n")
    assert imported_modules(module) == [(2, "agentgym.trainers.metrics", ("read_metrics",))]
