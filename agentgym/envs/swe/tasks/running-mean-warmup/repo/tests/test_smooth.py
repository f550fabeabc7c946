import pytest

from smooth import moving_average


def test_window_one():
    assert moving_average([1, 5, 3], 1) == [1.0, 5.0, 3.0]


def test_bad_window():
    with pytest.raises(ValueError):
        moving_average([1], 0)
