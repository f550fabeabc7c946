from nested import flatten


def test_numbers():
    assert flatten([1, [2, [3, (4, 5)]], []]) == [1, 2, 3, 4, 5]


def test_flat_already():
    assert flatten([1, 2]) == [1, 2]
