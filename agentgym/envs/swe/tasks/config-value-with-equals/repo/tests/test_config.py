import pytest

from kvconf import loads


def test_basic():
    assert loads("a = 1\n# note\n\nb=two") == {"a": "1", "b": "two"}


def test_missing_equals():
    with pytest.raises(ValueError):
        loads("just a line")
