from searching import contains, find_index


def test_found_early():
    assert find_index([1, 3, 5, 7], 1) == 0
    assert find_index([1, 3, 5, 7], 3) == 1


def test_absent():
    assert find_index([1, 3, 5, 7], 4) == -1
    assert not contains([], 1)
