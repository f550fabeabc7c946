from seqtools import unique, unique_by


def test_no_duplicates():
    assert sorted(unique([3, 1, 3, 2, 1])) == [1, 2, 3]


def test_unique_by():
    assert unique_by(["apple", "avocado", "banana"], key=lambda s: s[0]) == ["apple", "banana"]
