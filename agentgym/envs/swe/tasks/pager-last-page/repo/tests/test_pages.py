import pytest

from pager import PageError, Paginator


def test_exact_pages():
    p = Paginator(range(20), 10)
    assert p.num_pages == 2
    assert p.page(2) == list(range(10, 20))


def test_bad_page():
    with pytest.raises(PageError):
        Paginator(range(5), 5).page(2)


def test_empty():
    assert Paginator([], 3).num_pages == 0
