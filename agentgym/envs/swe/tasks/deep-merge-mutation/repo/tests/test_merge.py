from settings import deep_merge


def test_nested_update():
    merged = deep_merge({"a": {"x": 1, "y": 2}, "b": 1}, {"a": {"y": 3}})
    assert merged == {"a": {"x": 1, "y": 3}, "b": 1}


def test_replace_non_dict():
    assert deep_merge({"a": {"x": 1}}, {"a": 5}) == {"a": 5}
