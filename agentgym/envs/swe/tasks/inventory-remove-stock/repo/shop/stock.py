"""Item counts."""


class Inventory:
    def __init__(self):
        self._counts = {}

    def add(self, name, n=1):
        if n < 1:
            raise ValueError("add at least one item")
        self._counts[name] = self._counts.get(name, 0) + n

    def remove(self, name, n=1):
        self._counts[name] = self._counts.get(name, 0) - n

    def count(self, name):
        return self._counts.get(name, 0)

    def items(self):
        return sorted(self._counts)
