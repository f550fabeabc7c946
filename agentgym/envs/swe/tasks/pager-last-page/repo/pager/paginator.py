"""Split a sequence into numbered pages."""


class PageError(IndexError):
    """A page number outside 1..num_pages."""


class Paginator:
    def __init__(self, items, per_page):
        if per_page < 1:
            raise ValueError("per_page must be >= 1")
        self.items = list(items)
        self.per_page = per_page

    @property
    def num_pages(self):
        return len(self.items) // self.per_page

    def page(self, number):
        """Items on page ``number`` (from 1)."""
        if not 1 <= number <= self.num_pages:
            raise PageError(f"page {number} is outside 1..{self.num_pages}")
        start = (number - 1) * self.per_page
        return self.items[start:start + self.per_page]
