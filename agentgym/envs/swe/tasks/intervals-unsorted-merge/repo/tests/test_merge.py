from spans import merge_intervals, total_length


def test_sorted_overlap():
    assert merge_intervals([(1, 3), (2, 6), (8, 9)]) == [(1, 6), (8, 9)]


def test_touching():
    assert merge_intervals([(1, 2), (2, 4)]) == [(1, 4)]


def test_length():
    assert total_length([(0, 2), (1, 5)]) == 5
