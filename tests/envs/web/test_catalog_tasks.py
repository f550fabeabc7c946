"""Catalogue, search, tasks and the WebShop reward (no server, no browser)."""

from __future__ import annotations

import pytest

from agentgym import ConfigError
from agentgym.envs.web import generate_catalog, item_reward, make_task, order_reward
from agentgym.envs.web.search import search_index
from agentgym.envs.web.tasks import goal_ids

CATALOG = (0, 1000)  # the catalogue tests/envs/web/conftest.py serves


def test_catalog_is_deterministic_and_varied() -> None:
    a, b = generate_catalog(*CATALOG), generate_catalog(3, 1000)
    assert len(a) == 1000 and a.products[:5] != b.products[:5]
    assert generate_catalog.__wrapped__(*CATALOG) == a  # rebuilt, not the cached object
    assert len({p.product_type for p in a.products}) > 30
    for p in a.products[:50]:
        assert 2 <= len(p.attributes) <= 4 and p.options and p.price > 0
        assert a.get(p.id) is p
    assert a.get("P99999") is None and a.get("nonsense") is None
    with pytest.raises(ConfigError, match="catalog_size"):
        generate_catalog(0, 10)


def test_search_ranks_the_titled_product_first() -> None:
    index = search_index(*CATALOG)
    hits = 0
    for p in index.catalog.products[:40]:
        found = index.search(p.title)
        assert p.id in found
        hits += found.index(p.id) < 10
    assert hits >= 38  # same-titled products may share the first page
    assert index.search("the of and") == [] and index.search("zzzxq") == []
    jackets = index.search("waterproof jacket", limit=10)
    assert all("jacket" in index.catalog.get(i).search_text() for i in jackets[:3])


def test_splits_have_disjoint_goals_and_seeded_tasks() -> None:
    catalog = generate_catalog(*CATALOG)
    train, test = set(goal_ids(catalog, "train")), set(goal_ids(catalog, "test"))
    assert train and test and not train & test and len(train | test) == len(catalog)
    assert make_task(catalog, "train", 4) == make_task(catalog, "train", 4)
    assert make_task(catalog, "train", 4) != make_task(catalog, "train", 5)
    assert {make_task(catalog, "test", s).goal_id for s in range(30)} <= test
    task = make_task(catalog, "test", 0)
    assert task.product_type in task.instruction and f"{task.price_limit:.2f}" in task.instruction
    with pytest.raises(ConfigError, match="split"):
        goal_ids(catalog, "dev")


def test_reward_follows_webshop_scoring() -> None:
    catalog = generate_catalog(*CATALOG)
    task = make_task(catalog, "train", 11)
    goal = catalog.get(task.goal_id)
    assert item_reward(task, goal, task.options) == 1.0
    total = len(task.attributes) + len(task.options) + 1
    kind = next(iter(task.options))
    wrong = {**task.options, kind: next(v for v in goal.options[kind] if v != task.options[kind])}
    assert item_reward(task, goal, wrong) == pytest.approx((total - 1) / total)
    other = next(p for p in catalog.products if p.department != task.department)
    assert item_reward(task, other, {}) <= 0.1
    cousin = next(p for p in catalog.products
                  if p.department == task.department and p.product_type != task.product_type)
    assert item_reward(task, cousin, {}) <= 0.5
    both = order_reward(task, [(goal, task.options), (goal, wrong)])
    assert both == pytest.approx((1 + (total - 1) / total) / 2)
    assert order_reward(task, []) == 0.0
