from ledger.accounts import Account, InsufficientFunds, transfer

__all__ = ["Account", "InsufficientFunds", "transfer"]
