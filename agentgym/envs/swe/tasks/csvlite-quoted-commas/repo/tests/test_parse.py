from csvlite import parse_line, parse_text


def test_plain():
    assert parse_line("a,b,c\n") == ["a", "b", "c"]


def test_empty_fields():
    assert parse_line("a,,c") == ["a", "", "c"]


def test_text():
    assert parse_text("x,y\n\n1,2\n") == [["x", "y"], ["1", "2"]]
