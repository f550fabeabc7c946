"""Counting words."""


def words(text):
    """The words of ``text``."""
    return text.split(" ")


def word_count(text):
    """Number of words in ``text``."""
    if not text:
        return 0
    return len(words(text))


def average_word_length(text):
    """Mean length of the words in ``text`` (0.0 for no words)."""
    ws = words(text)
    if not text:
        return 0.0
    return sum(len(w) for w in ws) / len(ws)
