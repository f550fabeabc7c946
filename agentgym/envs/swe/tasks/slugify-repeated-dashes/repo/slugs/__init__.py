from slugs.core import slugify

__all__ = ["slugify"]
