"""CI cannot silently skip the tests that need torch, transformers, ray or mcp."""

from __future__ import annotations

import sys

import pytest
from required_imports import ORIGINAL, strict_importorskip


def test_a_missing_required_module_fails_instead_of_skipping(monkeypatch):
    monkeypatch.setitem(sys.modules, "mcp", None)  # as if mcp were not installed
    with pytest.raises(pytest.skip.Exception):
        ORIGINAL("mcp")  # plain pytest would skip (outside CI that is right)
    strict = strict_importorskip(ORIGINAL)
    with pytest.raises(pytest.fail.Exception, match="AGENTGYM_REQUIRE_EXTRAS=1 but 'mcp'"):
        strict("mcp")


def test_other_modules_still_skip(monkeypatch):
    optional = "an_optional_package"  # in no REQUIRED list, whatever CI installed
    monkeypatch.setitem(sys.modules, optional, None)
    with pytest.raises(pytest.skip.Exception):
        strict_importorskip(ORIGINAL)(optional)
    assert strict_importorskip(ORIGINAL)("json") is sys.modules["json"]
