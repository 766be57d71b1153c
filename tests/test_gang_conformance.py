"""The schedulers' own test tables as the conformance suite of the gang judgement.

tests/conformance/gangs/*.yaml hold, per upstream test case, the objects the controllers write
for it (a PodGroup, or a 1.35 native Workload, and the pods), the state upstream asserts, the
upstream file, test name and commit, and the stage gangscope gives. Each case runs through the
real parsers and :func:`exporter.cluster.gang_state.evaluate` (no store, no index) and must give
that stage; the stage must also be one that agrees with what upstream asserts (:data:`AGREES`),
unless the case says why gangscope's word differs by design (``differs``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cluster import podgroups as pg
from exporter.cluster.gang_state import children_members, evaluate, pod_members
from exporter.cluster.pods import parse_pod
from exporter.fields import parse_time

CASES_DIR = Path(__file__).parent / "conformance" / "gangs"
CASES = [c for path in sorted(CASES_DIR.glob("*.yaml")) for c in yaml.safe_load(path.read_text())]

NOT_PLACED = frozenset({"not_admitted", "queued", "placing", "assembling", "stuck", "partially_bound", "empty"})
PLACED = frozenset({"starting", "assembled"})
# What each upstream assertion means for the gang, as gangscope's stages.
AGREES: dict[tuple[str, str, Any], frozenset[str]] = {
    ("scheduler-plugins", "phase", "Running"): frozenset({"assembled"}),
    ("scheduler-plugins", "phase", "Failed"): frozenset({"failed"}),
    ("scheduler-plugins", "phase", "Finished"): frozenset({"finished"}),
    ("scheduler-plugins", "phase", "Scheduling"): NOT_PLACED,
    ("scheduler-plugins", "phase", "Pending"): NOT_PLACED,
    ("scheduler-plugins", "prefilter", "Success"): frozenset({"assembling"}),  # its pods may go on
    ("scheduler-plugins", "prefilter", "Unschedulable"): NOT_PLACED | {"unknown"},  # held (an unknown gate: unknown)
    ("scheduler-plugins", "permit", "Wait"): NOT_PLACED,
    ("scheduler-plugins", "permit", "Success"): PLACED,
    ("scheduler-plugins", "postfilter", "keep"): NOT_PLACED | PLACED,  # its assigned pods stay
    ("scheduler-plugins", "postfilter", "reject"): NOT_PLACED,
    ("volcano", "phase", "Running"): PLACED,
    ("volcano", "phase", "Completed"): frozenset({"finished"}),
    ("volcano", "phase", "Pending"): NOT_PLACED,
    ("volcano", "phase", "Unknown"): frozenset({"partially_bound"}),
    ("volcano", "satisfied", True): PLACED,
    ("volcano", "satisfied", False): NOT_PLACED,
    ("KAI-Scheduler", "evicted", True): frozenset({"partially_bound", "stuck"}),
    ("KAI-Scheduler", "evicted", False): NOT_PLACED | PLACED,
    ("kubernetes", "preenqueue", "UnschedulableAndUnresolvable"): NOT_PLACED,
    ("kubernetes", "preenqueue", "Success"): frozenset({"assembling"}),  # its pods go on to be scheduled
    ("kubernetes", "permit", "Wait"): NOT_PLACED,
    ("kubernetes", "permit", "Success"): PLACED,
    ("kubernetes", "placement", "Success"): PLACED,  # the group's placement is feasible: its pods bind
    ("kubernetes", "placement", "Unschedulable"): NOT_PLACED,
}


def agreeing(case: dict[str, Any]) -> frozenset[str]:
    repo = case["upstream"]["repo"].split("/")[1]
    key, value = next(iter(case["asserted"].items()))
    if repo == "kubernetes":
        value = value.split(":")[0]  # the status code, without the plugin's message
    return AGREES[(repo, key, value)]


def judge(case: dict[str, Any]) -> Any:
    records = []
    for obj in case["objects"]:
        if obj["kind"] != "Pod":
            source = pg.source_of(obj)
            assert source is not None
            records += pg.PARSERS[source](source, obj)
    [rec] = [r for r in records if r.name == case.get("podgroup", r.name)]
    pods = [parse_pod(o, ("nvidia.com/gpu",)) for o in case["objects"] if o["kind"] == "Pod"]
    now = parse_time(case["at"])
    assert now is not None
    return _evaluate(rec, records, pods, now, float(case.get("kai_grace_seconds", 60)))


def _evaluate(rec: pg.PodGroupRecord, records: list[pg.PodGroupRecord], pods: list[Any], now: float, grace: float) -> Any:
    """A group judged from its pods, a CompositePodGroup from its child groups judged first (as
    the gang index does)."""
    assert rec.errors == ()
    if rec.composite:
        kids = [_evaluate(r, records, pods, now, grace) for r in records
                if r.parent == rec.name and r.namespace == rec.namespace]
        members = children_members(rec, kids)
    else:
        members = pod_members(rec, [p for p in pods if p.gang is not None and p.gang[:2] == (rec.api, rec.name)])
    return evaluate(rec, None, None, now, 600.0, members, None, kai_grace=grace)


def test_at_least_fifty_cases_from_every_scheduler() -> None:
    repos = {c["upstream"]["repo"] for c in CASES}
    assert len(CASES) >= 50
    assert repos == {"kubernetes-sigs/scheduler-plugins", "volcano-sh/volcano", "NVIDIA/KAI-Scheduler",
                     "kubernetes/kubernetes"}
    for c in CASES:
        assert set(c["upstream"]) == {"repo", "commit", "file", "test"} and len(c["upstream"]["commit"]) == 40


@pytest.mark.parametrize("case", CASES, ids=lambda c: f'{c["upstream"]["repo"].split("/")[1]}:{c["upstream"]["test"]}')
def test_upstream_case(case: dict[str, Any]) -> None:
    gang = judge(case)
    want = case["gangscope"]
    assert (gang.stage, gang.stuck) == (want["stage"], want["stuck"])
    if "differs" not in case:
        assert gang.stage in agreeing(case), f"{gang.stage} does not say what upstream asserts: {case['asserted']}"
    else:
        assert gang.stage not in agreeing(case), "a case marked as differing agrees: drop its note"
    if case["upstream"]["repo"] == "NVIDIA/KAI-Scheduler":
        assert gang.stuck is case["asserted"]["evicted"]  # KAI evicts exactly the gangs gangscope calls stuck
