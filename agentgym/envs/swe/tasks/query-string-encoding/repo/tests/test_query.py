from webq import build_query, parse_query


def test_simple():
    assert build_query({"a": "1", "b": "x"}) == "a=1&b=x"


def test_parse():
    assert parse_query("a=1&b=hello+world&c=%26") == {"a": "1", "b": "hello world", "c": "&"}
