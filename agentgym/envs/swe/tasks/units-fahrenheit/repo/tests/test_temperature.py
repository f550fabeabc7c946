from units import celsius_to_fahrenheit


def test_boiling():
    assert celsius_to_fahrenheit(100) == 212


def test_freezing():
    assert celsius_to_fahrenheit(0) == 32
