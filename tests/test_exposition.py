"""Exposition: exact text in both formats, escaping, per-owner replacement, the series cap."""

from __future__ import annotations

import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_om
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.exposition import (Exposition, Family, escape_label_value, format_value, label_pairs, topology_pairs,
                                 with_labels)

G = Family("gangscope_test_gauge", "gauge", "A gauge.", ("a",))
C = Family("gangscope_test_events_total", "counter", "A counter.", ("a",))
I = Family("gangscope_test_info", "info", "An info series.", ("a",))
N = Family("gangscope_test_plain", "gauge", "A gauge without labels.")


def test_exact_text_and_openmetrics() -> None:
    e = Exposition()
    e.register(G, C, I)
    e.set("o1", {G: [G.sample(["x"], 1.5)], C: [C.sample(["x"], 3)], I: [I.sample(["x"], 1)]})
    text = e.render(False).decode()
    assert "# HELP gangscope_test_events_total A counter.\n# TYPE gangscope_test_events_total counter\n" \
           'gangscope_test_events_total{a="x"} 3\n' in text
    assert "# TYPE gangscope_test_info gauge\n" in text
    om = e.render(True).decode()
    assert "# TYPE gangscope_test_events counter\n" in om and 'gangscope_test_events_total{a="x"} 3\n' in om
    assert "# TYPE gangscope_test info\n" in om
    assert om.endswith("# EOF\n")
    fams = {f.name: f for f in parse_om(om)}
    assert fams["gangscope_test_events"].samples[0].value == 3
    assert fams["gangscope_test"].type == "info"
    tfams = {f.name: f for f in parse_text(text)}
    assert tfams["gangscope_test_gauge"].samples[0].value == 1.5


@pytest.mark.parametrize("raw", ['quote"d', "back\\slash", "new\nline", "tab\tand\x01ctl", "unicodé ☃ 日本"])
def test_label_values_round_trip(raw: str) -> None:
    e = Exposition()
    e.register(G)
    e.set("o", {G: [G.sample([raw], 1)]})
    for parser, om in ((parse_om, True), (parse_text, False)):
        fam = next(f for f in parser(e.render(om).decode()) if f.name == "gangscope_test_gauge")
        assert fam.samples[0].labels["a"] == raw


def test_owner_replacement_and_delete() -> None:
    e = Exposition()
    e.register(G, C)
    e.set("o1", {G: [G.sample(["1"], 1)], C: [C.sample(["1"], 1)]})
    e.set("o2", {G: [G.sample(["2"], 2)]})
    e.set("o1", {G: [G.sample(["1"], 5)]})  # o1 no longer exports C
    text = e.render(False).decode()
    assert 'gangscope_test_gauge{a="1"} 5\n' in text
    assert "gangscope_test_events_total{" not in text
    e.delete("o2")
    assert 'a="2"' not in e.render(False).decode()
    assert e.owners() == {"o1"}


def test_series_cap_drops_and_counts() -> None:
    e = Exposition(max_series_per_family=3)
    e.register(G)
    e.set("o1", {G: [G.sample([str(i)], i) for i in range(2)]})
    e.set("o2", {G: [G.sample([str(i)], i) for i in range(2, 4)]})  # would make 4 > 3
    text = e.render(False).decode()
    assert text.count("gangscope_test_gauge{") == 2
    assert 'gangscope_exposition_dropped_series_total{family="gangscope_test_gauge"} 2\n' in text
    e.delete("o1")
    e.set("o2", {G: [G.sample([str(i)], i) for i in range(2, 4)]})
    assert e.render(False).decode().count("gangscope_test_gauge{") == 2


def test_owners_of_one_shape_share_their_counts_and_keep_their_own_totals() -> None:
    """Owners with equal series counts share one counts dict; replacing one owner's lines (with
    other counts, or none) must leave the others' accounting exact."""
    e = Exposition(max_series_per_family=5)
    e.register(G, C)
    for o in ("a", "b", "c"):
        e.set(o, {G: [G.sample([o], 1)], C: [C.sample([o], 1)]})
    assert e._owned["a"][1] is e._owned["b"][1] is e._owned["c"][1]
    e.set("a", {G: [G.sample(["a"], 1), G.sample(["a2"], 2)]})  # a: 2 gauge lines, no counter
    assert e._owned["b"][1] == {G.name: 1, C.name: 1}
    assert (e.series_count(G.name), e.series_count(C.name)) == (4, 2)
    e.delete("b")
    assert (e.series_count(G.name), e.series_count(C.name)) == (3, 1)
    e.set("d", {G: [G.sample([str(i)], i) for i in range(3)]})  # 3 + 3 > 5: dropped, counted
    assert e.series_count(G.name) == 3
    assert 'gangscope_exposition_dropped_series_total{family="gangscope_test_gauge"} 3\n' in e.render(False).decode()


def test_conflicting_registration_and_bad_families() -> None:
    e = Exposition()
    e.register(G)
    with pytest.raises(ValueError):
        e.register(Family("gangscope_test_gauge", "gauge", "Other help."))
    with pytest.raises(ValueError):
        Family("gangscope_bad", "counter", "no suffix")
    with pytest.raises(KeyError):
        e.set("o", {C: [C.sample(["x"], 1)]})


def test_a_family_renders_only_its_declared_labels() -> None:
    """The declaration is the source: values by position or by name, topology labels appended
    only where declared, and every fast path (head, tail, line, lines) gives the same text."""
    f = Family("gangscope_test_pods", "gauge", "Pods.", ("namespace", "workload", "podset"), topology=True)
    topo = topology_pairs((("rack", "r1"), ("host", 'h"1')))
    want = 'gangscope_test_pods{namespace="ns",workload="w",podset="main",rack="r1",host="h\\"1"} 3\n'
    assert f.sample(["ns", "w", "main"], 3, topo) == want
    assert f.sample({"podset": "main", "workload": "w", "namespace": "ns"}, 3, (("rack", "r1"), ("host", 'h"1'))) == want
    lead = label_pairs(("namespace", "workload"), ("ns", "w"))
    assert f.line(lead, 3, ["main"], topo).decode() == want
    assert f.lines(lead.plus(("podset",), ("main",)), [f.tail(3, (), 3, topo), f.tail(3, (), 4, topo)]).decode() == (
        want + want.replace("} 3", "} 4"))
    for bad in (lambda: f.sample(["ns", "w"], 1), lambda: f.sample({"namespace": "ns", "workload": "w", "pod": "p"}, 1),
                lambda: f.head(label_pairs(("workload",), ("w",))), lambda: f.tail(2, ("main", "extra"), 1),
                lambda: G.sample(["x"], 1, topo), lambda: Family("gangscope_twice", "gauge", "h", ("a", "a"))):
        with pytest.raises(ValueError):
            bad()
    assert G.sample(["x"], 1, ()) == 'gangscope_test_gauge{a="x"} 1\n', "empty topology labels are allowed anywhere"
    assert N.line(label_pairs((), ()), 2) == b"gangscope_test_plain{} 2\n"


def test_format_value() -> None:
    assert format_value(3) == "3"
    assert format_value(2.0) == "2"
    assert format_value(0.25) == "0.25"
    assert format_value(float("nan")) == "NaN"
    assert format_value(float("-inf")) == "-Inf"
    assert format_value(1764500000.5) == "1764500000.5"
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'


def test_series_cap_per_owner_drops_only_the_oversized_owner() -> None:
    e = Exposition(max_series_per_family=100, max_series_per_owner=3)
    e.register(G, C)
    e.set("small", {G: [G.sample([str(i)], i) for i in range(3)]})
    e.set("huge", {G: [G.sample([f"h{i}"], i) for i in range(4)], C: [C.sample(["h"], 1)]})
    text = e.render(False).decode()
    assert text.count("gangscope_test_gauge{") == 3 and 'a="h' not in text.split("gangscope_test_events")[0]
    assert 'gangscope_test_events_total{a="h"} 1\n' in text, "its other families stay"
    assert 'gangscope_exposition_dropped_series_total{family="gangscope_test_gauge"} 4\n' in text


def test_family_filter_and_constant_labels() -> None:
    e = Exposition(exported=lambda name: name != C.name, const_labels=[("cluster", 'a"b')])
    e.register(G, C, N)
    e.set("o", {G: [G.sample(["1"], 1)], N: [N.sample([], 2)], C: [C.sample(["1"], 1)]})
    text = e.render(False).decode()
    assert C.name not in text, "a filtered family is neither stored nor described"
    assert 'gangscope_test_gauge{cluster="a\\"b",a="1"} 1\n' in text
    assert 'gangscope_test_plain{cluster="a\\"b"} 2\n' in text
    assert with_labels(b'# HELP x y\nx{} 1\nx 2\n', b'c="1"') == b'# HELP x y\nx{c="1"} 1\nx{c="1"} 2\n'


def test_an_unchanged_owner_leaves_its_blocks_as_they_were() -> None:
    """An event that changes nothing exported (a resourceVersion bump) must not invalidate the
    gzip pieces the server keeps per block (their version is what it compares)."""
    g = Family("x_gauge", "gauge", "help", ("a",))
    h = Family("y_gauge", "gauge", "help", ("a",))
    expo = Exposition()
    expo.register(g, h)
    expo.set(("o",), {g: [g.sample(["1"], 1)], h: [h.sample(["1"], 2)]})
    versions = [b.version for b in expo.render_blocks(False) if not isinstance(b, bytes)]
    expo.set(("o",), {g: [g.sample(["1"], 1)], h: [h.sample(["1"], 2)]})
    assert [b.version for b in expo.render_blocks(False) if not isinstance(b, bytes)] == versions
    expo.set(("o",), {g: [g.sample(["1"], 1)], h: [h.sample(["1"], 3)]})
    after = [b.version for b in expo.render_blocks(False) if not isinstance(b, bytes)]
    assert after[0] == versions[0] and after[1] == versions[1] + 1  # only the changed family's block
    assert 'y_gauge{a="1"} 3' in expo.render(False).decode()
