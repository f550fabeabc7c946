from slugs import slugify


def test_lowercase():
    assert slugify("Django") == "django"


def test_spaces():
    assert slugify("release notes 2") == "release-notes-2"
