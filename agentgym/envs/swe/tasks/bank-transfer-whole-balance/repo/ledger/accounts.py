"""Accounts holding whole cents."""


class InsufficientFunds(Exception):
    pass


class Account:
    def __init__(self, owner, balance=0):
        self.owner = owner
        self.balance = balance

    def deposit(self, amount):
        if amount <= 0:
            raise ValueError("deposit a positive amount")
        self.balance += amount

    def withdraw(self, amount):
        if amount <= 0:
            raise ValueError("withdraw a positive amount")
        if amount >= self.balance:
            raise InsufficientFunds(f"{self.owner} has {self.balance}, needs {amount}")
        self.balance -= amount


def transfer(source, target, amount):
    """Move ``amount`` from ``source`` to ``target``; nothing moves on failure."""
    source.withdraw(amount)
    target.deposit(amount)
