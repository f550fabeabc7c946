"""In CI, a test that would skip for want of torch, transformers, ray or mcp fails instead.

CI installs every one of them (``.ci/test.sh``), so such a skip means the install broke and
the test silently stopped testing anything. ``AGENTGYM_REQUIRE_EXTRAS=1`` (set by CI) turns
``pytest.importorskip`` of these modules into a plain import: a missing one is an error.
"""

from __future__ import annotations

import importlib
import os
from types import ModuleType
from typing import Any

import pytest

REQUIRED = ("torch", "transformers", "ray", "mcp", "datasets", "pyarrow", "wandb",
            *(("vllm",) if os.environ.get("AGENTGYM_REQUIRE_VLLM") == "1" else ()))
"""Top-level packages whose absence must fail the run in CI. vllm is among them where CI
installed vLLM's CPU build (``AGENTGYM_REQUIRE_VLLM=1``: a processor with AVX2 or AVX-512)."""
ORIGINAL = pytest.importorskip
"""pytest's own importorskip, before :func:`install`."""


def strict_importorskip(importorskip: Any) -> Any:
    """Wrap ``pytest.importorskip`` so that the :data:`REQUIRED` modules cannot be skipped."""

    def wrapper(modname: str, *args: Any, **kwargs: Any) -> ModuleType:
        if modname.split(".")[0] in REQUIRED:
            try:
                return importlib.import_module(modname)
            except ImportError as exc:
                pytest.fail(f"AGENTGYM_REQUIRE_EXTRAS=1 but {modname!r} cannot be imported "
                            f"({exc}); install it: pip install -e '.[dev,train,tools,ray]'",
                            pytrace=False)
        return importorskip(modname, *args, **kwargs)

    return wrapper


def install() -> None:
    """Apply :func:`strict_importorskip` when ``AGENTGYM_REQUIRE_EXTRAS=1``."""
    if os.environ.get("AGENTGYM_REQUIRE_EXTRAS") == "1":
        pytest.importorskip = strict_importorskip(pytest.importorskip)
