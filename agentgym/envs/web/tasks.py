"""Shopping tasks drawn from the catalogue, and WebShop's reward for a purchase.

A task names a product type, one or two attributes, one value per option kind and a price
bound, all read off one goal product ("a red waterproof jacket in size m, under $60"); any
product that matches them all earns full reward, not only the goal.

Reward of a bought item (Yao et al. 2022, WebShop, eq. 1)::

    r = r_type * (|U_att ∩ Y_att| + |U_opt ∩ Y_opt| + 1[y_price <= u_price])
                 / (|U_att| + |U_opt| + 1)

U are the task's attributes and (kind, value) options, Y the bought product's attributes
and the options chosen when it was put in the cart. Deviations from the paper: r_type is
1.0 for the task's product type, 0.5 for another type of the same department and 0.1
otherwise (WebShop matches titles and categories by text overlap; our catalogue has exact
types), and an order of several items scores the mean of its items, so buying extra items
never helps. Success is r = 1.0. An episode that ends without an order scores 0.0.

Splits: test tasks take their goal from every fifth product, train tasks from the others,
so no test goal is ever seen in training; within a split the seed picks the task.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from agentgym.errors import ConfigError

from .catalog import Catalog, Product

SPLITS = ("train", "test")
TEST_EVERY = 5


@dataclass(frozen=True)
class Task:
    """One shopping task.

    Attributes:
        id: ``webshop-{split}-{seed}``.
        instruction: What the shopper is asked to buy.
        goal_id: The product the task was read from (one of possibly several answers).
        product_type: Required product type.
        department: The type's department.
        attributes: Required attributes.
        options: Required option values, by kind.
        price_limit: Highest acceptable price in dollars.
    """

    id: str
    instruction: str
    goal_id: str
    product_type: str
    department: str
    attributes: tuple[str, ...]
    options: Mapping[str, str]
    price_limit: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready form (for reset infos and trajectories)."""
        return {"id": self.id, "instruction": self.instruction, "goal_id": self.goal_id,
                "product_type": self.product_type, "attributes": list(self.attributes),
                "options": dict(self.options), "price_limit": self.price_limit}


def goal_ids(catalog: Catalog, split: str) -> list[str]:
    """Ids of the products tasks of ``split`` are read from."""
    if split not in SPLITS:
        raise ConfigError(f"split must be one of {SPLITS}, got {split!r}")
    test = split == "test"
    return [p.id for p in catalog.products if (p.index % TEST_EVERY == 0) == test]


def make_task(catalog: Catalog, split: str, seed: int) -> Task:
    """The task of ``split`` for ``seed`` (deterministic)."""
    goals = goal_ids(catalog, split)
    rng = np.random.default_rng([seed, SPLITS.index(split), 104729])
    goal = catalog.get(goals[int(rng.integers(len(goals)))])
    assert goal is not None
    count = int(rng.integers(1, min(2, len(goal.attributes)) + 1))
    attributes = tuple(sorted(str(a) for a in rng.choice(goal.attributes, size=count,
                                                         replace=False)))
    options = {kind: str(values[int(rng.integers(len(values)))])
               for kind, values in goal.options.items()}
    price_limit = float(math.ceil(goal.price * float(rng.uniform(1.1, 1.6))))
    return Task(f"webshop-{split}-{seed}", _instruction(goal, attributes, options, price_limit),
                goal.id, goal.product_type, goal.department, attributes, options, price_limit)


def _instruction(goal: Product, attributes: Sequence[str], options: Mapping[str, str],
                 price_limit: float) -> str:
    parts = [value if kind == "pack" else f"{kind} {value}" for kind, value in options.items()]
    with_options = f" with {', '.join(parts)}" if parts else ""
    wanted = f"{' and '.join(attributes)} {goal.product_type}"
    article = "an" if wanted[0] in "aeiou" else "a"
    return (f"I am looking for {article} {wanted}{with_options}, "
            f"and price lower than {price_limit:.2f} dollars.")


def type_reward(task: Task, product: Product) -> float:
    """r_type: 1.0 same product type, 0.5 same department, 0.1 otherwise."""
    if product.product_type == task.product_type:
        return 1.0
    return 0.5 if product.department == task.department else 0.1


def item_reward(task: Task, product: Product, chosen: Mapping[str, str]) -> float:
    """WebShop's reward for buying ``product`` with options ``chosen`` (see module doc)."""
    hits = sum(a in product.attributes for a in task.attributes)
    hits += sum(chosen.get(kind) == value for kind, value in task.options.items())
    hits += product.price <= task.price_limit
    total = len(task.attributes) + len(task.options) + 1
    return type_reward(task, product) * hits / total


def order_reward(task: Task, items: Sequence[tuple[Product, Mapping[str, str]]]) -> float:
    """Mean item reward of an order; 0.0 for an empty one."""
    if not items:
        return 0.0
    return float(sum(item_reward(task, p, o) for p, o in items) / len(items))
