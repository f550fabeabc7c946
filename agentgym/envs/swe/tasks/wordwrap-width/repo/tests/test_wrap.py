from textwrap2 import fill, wrap


def test_fits():
    assert wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"]


def test_long_word():
    assert wrap("abcdefghij xy", 4) == ["abcdefghij", "xy"]


def test_fill():
    assert fill("", 5) == ""
