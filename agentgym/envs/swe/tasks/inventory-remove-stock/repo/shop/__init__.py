from shop.stock import Inventory

__all__ = ["Inventory"]
