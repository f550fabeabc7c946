"""Matrices as lists of rows."""


def transpose(m):
    n = len(m)
    return [[m[i][j] for i in range(n)] for j in range(n)]


def matmul(a, b):
    cols = transpose(b)
    return [[sum(x * y for x, y in zip(row, col)) for col in cols] for row in a]
