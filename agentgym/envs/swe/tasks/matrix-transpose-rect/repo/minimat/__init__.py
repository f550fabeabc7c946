from minimat.ops import matmul, transpose

__all__ = ["matmul", "transpose"]
