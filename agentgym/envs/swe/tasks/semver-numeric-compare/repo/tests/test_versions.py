import pytest

from semverlite import Version, latest


def test_parse_and_print():
    assert str(Version.parse("v1.2.3")) == "1.2.3"


def test_order_same_width():
    assert Version.parse("1.2.3") < Version.parse("1.3.0")
    assert latest(["0.1.0", "2.0.0", "1.5.5"]) == "2.0.0"


def test_bad():
    with pytest.raises(ValueError):
        Version.parse("1.2")
