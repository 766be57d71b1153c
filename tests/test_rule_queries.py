"""The inlining of recorded series (exporter/rule_queries.py): what each reference becomes, and
that the shipped rules file is the generated one."""

from __future__ import annotations

from pathlib import Path

import pytest

from exporter.rule_queries import Rules, for_workload

ROOT = Path(__file__).resolve().parents[1]


def rules(*rs: dict) -> Rules:
    return Rules([{"name": "g", "rules": list(rs)}], step="30s")


def test_a_record_of_several_rules_is_their_union_with_each_rules_labels() -> None:
    r = rules({"record": "a:x:rate", "expr": "rate(x_tx[5m])", "labels": {"direction": "transmit"}},
              {"record": "a:x:rate", "expr": "rate(x_rx[5m])", "labels": {"direction": "receive"}},
              {"record": "b:x:sum", "expr": "sum by (node) (a:x:rate)"})
    assert r.record("b:x:sum") == ('(sum by (node) ((label_replace(rate(x_tx[5m]), "direction", "transmit", "", "") or '
                                   'label_replace(rate(x_rx[5m]), "direction", "receive", "", ""))))')
    # a matcher on a rule's static label picks that rule
    assert r.inline('a:x:rate{direction="receive"}') == 'label_replace(rate(x_rx[5m]), "direction", "receive", "", "")'


def test_a_range_over_a_record_is_a_subquery_at_the_rules_interval() -> None:
    r = rules({"record": "a:y:sum", "expr": "sum(y)"})
    assert r.inline("avg_over_time(a:y:sum[1h] offset 15m)") == "avg_over_time(((sum(y)))[1h:30s] offset 15m)"
    assert r.inline('label_replace(y, "a:y:sum", "$1", "x", "(.+)")') == 'label_replace(y, "a:y:sum", "$1", "x", "(.+)")'


def test_what_cannot_be_inlined_is_refused() -> None:
    r = rules({"record": "a:s:max", "expr": "max(s) or a:s:max offset 1m"},
              {"record": "a:y:sum", "expr": "sum by (state) (y)"})
    with pytest.raises(ValueError, match="recorded from itself"):
        r.record("a:s:max")
    with pytest.raises(ValueError, match="a matcher on a label of the recorded series"):
        r.inline('a:y:sum{state="free"}')
    with pytest.raises(ValueError, match="offset without a range"):
        r.inline("a:y:sum offset 5m")
    with pytest.raises(ValueError, match="no recording rule records"):
        r.record("a:none:sum")


def test_for_workload_keeps_one_workloads_series() -> None:
    assert for_workload("x", "ml", 'a"b') == ('(x)\nand on (namespace, workload)\nlabel_replace(label_replace(vector(1), '
                                              '"namespace", "ml", "", ""), "workload", "a\\"b", "", "")')


def test_the_package_ships_the_generated_rules() -> None:
    shipped = (ROOT / "exporter" / "rules" / "gangscope-rules.yaml").read_text()
    assert shipped == (ROOT / "alerts" / "gangscope-rules.yaml").read_text()
    r = Rules.load()
    for name in ("namespace_workload:gangscope_job_scheduling_events:count",
                 "namespace_workload:gangscope_job_hardware_signals:count",
                 "namespace_workload:gangscope_interconnect_bytes:ratio",
                 "namespace_workload:gangscope_job_slowdown:ratio"):
        assert all(n not in r.record(name) for n in r.records), name  # only scraped series are left
