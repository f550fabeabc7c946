from minimat import matmul, transpose


def test_square_transpose():
    assert transpose([[1, 2], [3, 4]]) == [[1, 3], [2, 4]]


def test_square_matmul():
    assert matmul([[1, 2], [3, 4]], [[5, 6], [7, 8]]) == [[19, 22], [43, 50]]
