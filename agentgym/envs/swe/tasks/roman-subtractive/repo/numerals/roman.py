"""Roman numerals for 1..3999."""

_VALUES = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]
_DIGITS = {"I": 1, "V": 5, "X": 10, "L": 50, "C": 100, "D": 500, "M": 1000}


def to_roman(n):
    if not 0 < n < 4000:
        raise ValueError(f"{n} is outside 1..3999")
    out = []
    for value, letters in _VALUES:
        count, n = divmod(n, value)
        out.append(letters * count)
    return "".join(out)


def from_roman(text):
    total = 0
    for i, ch in enumerate(text):
        value = _DIGITS[ch]
        if i + 1 < len(text) and _DIGITS[text[i + 1]] > value:
            total -= value
        else:
            total += value
    return total
