"""exporter.cluster.multimap: the collector's indexes, a lone value bare, tuples while small, sets past SMALL."""

from __future__ import annotations

from exporter.cluster.multimap import MultiMap


def test_add_discard_and_of_through_the_small_and_large_forms() -> None:
    m = MultiMap()
    assert m.of("k") == ()
    m.add("k", 1)
    m.add("k", 1)  # already there: kept once
    assert m.of("k") == (1,)
    for v in range(2, MultiMap.SMALL + 1):
        m.add("k", v)
    assert isinstance(m.of("k"), tuple) and sorted(m.of("k")) == list(range(1, MultiMap.SMALL + 1))
    m.add("k", 99)  # past SMALL: a set
    assert m.of("k").__class__ is set and set(m.of("k")) == {*range(1, MultiMap.SMALL + 1), 99}
    for v in [*range(1, MultiMap.SMALL + 1), 99]:
        m.discard("k", v)
    assert "k" not in m and m.of("k") == ()


def test_discard_of_an_absent_value_or_key_changes_nothing() -> None:
    m = MultiMap()
    m.add("k", ("ns", "a"))
    m.add("k", ("ns", "b"))
    m.discard("k", ("ns", "c"))
    m.discard("other", ("ns", "a"))
    assert m.of("k") == (("ns", "a"), ("ns", "b"))
    m.discard("k", ("ns", "a"))
    assert m.of("k") == (("ns", "b"),)
    held = m.of("k")
    m.add("k", ("ns", "d"))  # a caller's earlier view is not changed under it
    assert held == (("ns", "b"),)


def test_a_lone_value_that_is_a_tuple_is_not_taken_for_several() -> None:
    """Index values are mostly keys, tuples themselves: one is held bare, and read back as one."""
    m = MultiMap()
    m.add("k", ("ns", "a"))
    assert dict.get(m, "k") == ("ns", "a")  # held bare: no 1-tuple around it
    assert m.of("k") == (("ns", "a"),)
    m.discard("k", "ns")  # an element of the lone value is not a value
    m.discard("k", ("ns",))
    assert m.of("k") == (("ns", "a"),)
    m.add("k", ("ns", "b"))
    m.discard("k", ("ns", "a"))
    assert m.of("k") == (("ns", "b"),) and dict.get(m, "k") == ("ns", "b")
    m.discard("k", ("ns", "b"))
    assert "k" not in m
