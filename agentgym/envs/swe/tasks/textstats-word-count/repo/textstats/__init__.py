"""Small text statistics."""
from textstats.counting import average_word_length, word_count

__all__ = ["average_word_length", "word_count"]
