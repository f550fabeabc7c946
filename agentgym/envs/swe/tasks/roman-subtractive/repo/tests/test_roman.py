import pytest

from numerals import from_roman, to_roman


def test_simple():
    assert to_roman(3) == "III"
    assert to_roman(2023) == "MMXXIII"


def test_parse():
    assert from_roman("MCMXCIV") == 1994


def test_range():
    with pytest.raises(ValueError):
        to_roman(0)
