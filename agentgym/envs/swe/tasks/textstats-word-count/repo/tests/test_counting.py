from textstats import average_word_length, word_count


def test_simple_sentence():
    assert word_count("the quick brown fox") == 4


def test_empty():
    assert word_count("") == 0
    assert average_word_length("") == 0.0


def test_average():
    assert average_word_length("ab abcd") == 3.0
