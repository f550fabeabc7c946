from humanize import format_duration


def test_seconds():
    assert format_duration(45) == "45s"


def test_minutes():
    assert format_duration(125) == "2m 5s"
