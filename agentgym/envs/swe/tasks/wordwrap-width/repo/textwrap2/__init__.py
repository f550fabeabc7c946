from textwrap2.wrap import fill, wrap

__all__ = ["fill", "wrap"]
