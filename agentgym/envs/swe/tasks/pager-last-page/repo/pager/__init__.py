from pager.paginator import PageError, Paginator

__all__ = ["PageError", "Paginator"]
