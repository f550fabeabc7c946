from casing import camel_to_snake, snake_to_camel


def test_simple_camel():
    assert camel_to_snake("userName") == "user_name"
    assert camel_to_snake("UserAccountId") == "user_account_id"


def test_back():
    assert snake_to_camel("user_account_id", upper_first=True) == "UserAccountId"
