import pytest

from rpn import evaluate


def test_add_mul():
    assert evaluate("2 3 + 4 *") == 20


def test_underflow():
    with pytest.raises(ValueError):
        evaluate("1 +")
