from cachelib import LRUCache


def test_capacity():
    c = LRUCache(2)
    for k in "abc":
        c.put(k, k)
    assert len(c) == 2
    assert c.get("a") is None


def test_update_refreshes():
    c = LRUCache(2)
    c.put("a", 1)
    c.put("b", 2)
    c.put("a", 10)
    c.put("c", 3)
    assert c.get("a") == 10 and c.get("b") is None
