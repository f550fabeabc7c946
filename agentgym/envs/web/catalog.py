"""A product catalogue generated from a seed: categories, attributes, options, prices.

Every product has a product type (``jacket``) inside a department (``clothing``), two to
four attributes drawn from its department's pool (``waterproof``, ``fleece lined``), one or
two option kinds (``size``, ``color``) with the values it is sold in, a price, a rating and
a brand. The same ``(seed, size)`` always gives the same catalogue, so a task id names a
product for good; generation of 5,000 products takes a few tens of milliseconds.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from agentgym.errors import ConfigError

# department -> (product types, attribute pool, option kinds and their values)
SIZES = ("xs", "s", "m", "l", "xl", "xxl")
COLORS = ("black", "white", "red", "blue", "green", "grey", "navy", "pink", "yellow", "brown")
DEPARTMENTS: dict[str, tuple[tuple[str, ...], tuple[str, ...], dict[str, tuple[str, ...]]]] = {
    "clothing": (
        ("jacket", "t-shirt", "jeans", "hoodie", "dress", "sneakers", "raincoat", "socks"),
        ("waterproof", "breathable", "machine washable", "organic cotton", "slim fit",
         "lightweight", "fleece lined", "quick dry", "stretch", "wrinkle free"),
        {"size": SIZES, "color": COLORS},
    ),
    "home": (
        ("blanket", "pillow", "mug", "lamp", "curtain", "towel", "rug"),
        ("machine washable", "hypoallergenic", "blackout", "microwave safe", "dishwasher safe",
         "energy efficient", "handmade", "non slip", "extra soft", "eco friendly"),
        {"size": ("small", "medium", "large", "queen", "king"), "color": COLORS},
    ),
    "electronics": (
        ("headphones", "phone case", "charger", "keyboard", "mouse", "speaker", "webcam"),
        ("wireless", "noise cancelling", "fast charging", "bluetooth", "usb c", "rechargeable",
         "water resistant", "ergonomic", "backlit", "portable"),
        {"color": COLORS[:7]},
    ),
    "beauty": (
        ("shampoo", "face cream", "lipstick", "body lotion", "sunscreen", "conditioner"),
        ("paraben free", "vegan", "cruelty free", "fragrance free", "organic", "long lasting",
         "sensitive skin", "travel size", "moisturizing", "spf 50"),
        {"scent": ("lavender", "vanilla", "citrus", "coconut", "unscented", "rose"),
         "size": ("1 fl oz", "3.4 fl oz", "8 fl oz", "16 fl oz")},
    ),
    "grocery": (
        ("coffee", "green tea", "granola", "protein bar", "almond butter", "pasta", "olive oil"),
        ("gluten free", "organic", "non gmo", "sugar free", "keto friendly", "fair trade",
         "low sodium", "high protein", "kosher", "caffeine free"),
        {"flavor": ("original", "chocolate", "vanilla", "peanut", "berry", "honey"),
         "pack": ("pack of 1", "pack of 2", "pack of 6", "pack of 12")},
    ),
    "sports": (
        ("yoga mat", "water bottle", "backpack", "dumbbell", "tent", "cycling gloves"),
        ("non slip", "insulated", "bpa free", "lightweight", "waterproof", "foldable",
         "adjustable", "durable", "extra thick", "reflective"),
        {"color": COLORS, "size": ("small", "medium", "large")},
    ),
}
BRANDS = ("Acorn", "Bramble", "Cobalt", "Dune", "Ember", "Fjord", "Garnet", "Harbor", "Indigo",
          "Juniper", "Kestrel", "Lumen", "Meadow", "Nimbus", "Onyx", "Pioneer", "Quartz",
          "Redwood", "Summit", "Tundra", "Umber", "Vista", "Willow", "Yarrow", "Zephyr")
PRICE_RANGES = {"clothing": (9.0, 140.0), "home": (6.0, 160.0), "electronics": (8.0, 220.0),
                "beauty": (4.0, 60.0), "grocery": (3.0, 45.0), "sports": (7.0, 180.0)}


@dataclass(frozen=True)
class Product:
    """One product of the catalogue.

    Attributes:
        id: Stable id, ``P`` + five digits (its index in the catalogue).
        title: What result pages and the product page show.
        department: Top-level category (``clothing``).
        product_type: Leaf category (``jacket``).
        brand: Brand name.
        attributes: Features the product has (``waterproof``, ...).
        options: Option kind -> the values it is sold in (``{"size": ("s", "m")}``).
        price: Price in dollars.
        rating: Average rating, 1.0-5.0.
        description: A sentence of product copy.
    """

    id: str
    title: str
    department: str
    product_type: str
    brand: str
    attributes: tuple[str, ...]
    options: dict[str, tuple[str, ...]] = field(hash=False)
    price: float
    rating: float
    description: str

    @property
    def index(self) -> int:
        """Position in the catalogue."""
        return int(self.id[1:])

    def search_text(self) -> str:
        """The text the search index reads for this product."""
        values = " ".join(v for vs in self.options.values() for v in vs)
        return (f"{self.title} {self.product_type} {self.department} {' '.join(self.attributes)} "
                f"{values} {self.description}")


@dataclass(frozen=True)
class Catalog:
    """An immutable list of products with lookup by id."""

    seed: int
    products: tuple[Product, ...]

    def __len__(self) -> int:
        return len(self.products)

    def get(self, product_id: str) -> Product | None:
        """The product with this id, or None."""
        if len(product_id) != 6 or product_id[0] != "P" or not product_id[1:].isdigit():
            return None
        index = int(product_id[1:])
        return self.products[index] if index < len(self.products) else None


def _product(rng: np.random.Generator, index: int) -> Product:
    department = list(DEPARTMENTS)[int(rng.integers(len(DEPARTMENTS)))]
    types, pool, option_kinds = DEPARTMENTS[department]
    product_type = types[int(rng.integers(len(types)))]
    brand = BRANDS[int(rng.integers(len(BRANDS)))]
    attributes = tuple(sorted(str(a) for a in rng.choice(pool, size=int(rng.integers(2, 5)),
                                                        replace=False)))
    options: dict[str, tuple[str, ...]] = {}
    for kind, values in option_kinds.items():
        count = int(rng.integers(2, min(len(values), 5) + 1))
        picked = set(rng.choice(values, size=count, replace=False).tolist())
        options[kind] = tuple(v for v in values if v in picked)  # catalogue order (s < m < l)
    low, high = PRICE_RANGES[department]
    price = round(float(np.exp(rng.uniform(np.log(low), np.log(high)))), 2)
    rating = round(float(rng.uniform(2.5, 5.0)), 1)
    shown = list(attributes[: int(rng.integers(1, len(attributes) + 1))])
    title = f"{brand} {' '.join(shown).title()} {product_type.title()}"
    description = (f"A {', '.join(attributes)} {product_type} by {brand}, part of our "
                   f"{department} range.")
    return Product(f"P{index:05d}", title, department, product_type, brand, attributes,
                   options, price, rating, description)


@lru_cache(maxsize=4)
def generate_catalog(seed: int = 0, size: int = 5000) -> Catalog:
    """The catalogue for ``seed`` with ``size`` products (cached: it is immutable).

    Raises:
        ConfigError: ``size`` is below 50 or above 200,000, or ``seed`` is negative.
    """
    if not isinstance(size, int) or not 50 <= size <= 200_000:
        raise ConfigError(f"catalog_size must be an int in [50, 200000], got {size!r}")
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"catalog_seed must be a non-negative int, got {seed!r}")
    rng = np.random.default_rng([seed, 7919])
    return Catalog(seed, tuple(_product(rng, i) for i in range(size)))
