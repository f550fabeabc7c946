import pytest

from ledger import Account, InsufficientFunds, transfer


def test_deposit_withdraw():
    a = Account("ann", 50)
    a.deposit(25)
    a.withdraw(30)
    assert a.balance == 45


def test_overdraft_refused():
    a, b = Account("ann", 10), Account("bob")
    with pytest.raises(InsufficientFunds):
        transfer(a, b, 11)
    assert (a.balance, b.balance) == (10, 0)
