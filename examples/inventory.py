"""A small inventory: items with prices and quantities, and a few reports over them."""

from dataclasses import dataclass


@dataclass
class Item:
    name: str
    price: float
    quantity: int


def total_value(items):
    """Return the value of all items in stock."""
    total = 0.0
    for item in items:
        total += item.price * item.quantity
    return total


def cheapest(items):
    """Return the item with the lowest price, or None for an empty list."""
    if not items:
        return None
    return min(items, key=lambda item: item.price)


def restock(items, name, amount):
    """Add amount units to the item called name; return True if it was found."""
    for item in items:
        if item.name == name:
            item.quantity += amount
            return True
    return False


def report(items):
    lines = []
    for item in items:
        lines.append("%s: %d at %.2f" % (item.name, item.quantity, item.price))
    lines.append("total: %.2f" % total_value(items))
    return "\n".join(lines)


if __name__ == "__main__":
    stock = [Item("apple", 0.5, 10), Item("pear", 0.75, 4)]
    restock(stock, "pear", 6)
    print(report(stock))
