"""Kueue's own TAS test tables, as data, against gangscope's port of the placement.

``tests/fixtures/kueue-tas-cases/*.json`` hold the cases of Kueue's tables at the commit each
file names, converted by ``scripts/kueue-tas-cases/convert`` from the tables themselves:

* ``TestFindTopologyAssignments`` (``pkg/cache/scheduler/tas_cache_test.go``): the nodes, the
  bound pods, the prior TAS usage, the flavor's levels and node labels, the pod sets and the
  assignment or failure message the test asserts; each case runs
  :func:`exporter.cluster.tas_fit.place` and must give exactly that outcome;
* ``TestScheduleForTAS`` (``pkg/scheduler/scheduler_tas_test.go``): whole objects (Nodes, Pods,
  Topologies, ResourceFlavors, LocalQueues, Workloads) and ClusterQueues, and what one scheduling
  cycle did with the waiting Workload: admitted with a topology assignment, or rejected with the
  placement's message; each case goes through the collector's own store (parse, capacity, fits),
  whose fit must say the same (and name the same hosts, or the same message).

Cases needing what gangscope does not model carry a ``skip`` reason in the file; they are
counted, never silently dropped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from exporter.cluster.tas_fit import (FitFlavor, FitNode, FitPodSet, PodSetPlacement, SelectorRequirement,
                                      SelectorTerm, place)
from exporter.taints import Taint, Toleration

CASES_DIR = Path(__file__).parent / "fixtures" / "kueue-tas-cases"


def _load(schedule: bool = False) -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    out = []
    for f in sorted(CASES_DIR.glob("*.json")):
        if (f.stem == "TestScheduleForTAS") != schedule:
            continue
        data = json.loads(f.read_text())
        for c in data["cases"]:
            out.append((f"{data['source']['test']}/{c['name']}", data["source"], c))
    return out


CASES = _load()
IN_SCOPE = [(n, s, c) for n, s, c in CASES if "skip" not in c]
SCHEDULE = _load(schedule=True)
SCHEDULE_IN_SCOPE = [(n, s, c) for n, s, c in SCHEDULE if "skip" not in c]


def _terms(raw: list[dict[str, Any]]) -> tuple[SelectorTerm, ...]:
    def reqs(items: list[dict[str, Any]] | None) -> tuple[SelectorRequirement, ...]:
        return tuple(SelectorRequirement(r["key"], r["operator"], tuple(r.get("values") or ())) for r in items or ())
    return tuple(SelectorTerm(reqs(t.get("matchExpressions")), reqs(t.get("matchFields"))) for t in raw)


def podset(ps: dict[str, Any]) -> FitPodSet:
    tr = ps.get("topologyRequest")
    slices: tuple[tuple[str, int], ...] = ()
    if tr is not None:
        if tr.get("podsetSliceRequiredTopologyConstraints"):
            slices = tuple((c.get("topology", ""), c.get("size", 0)) for c in tr["podsetSliceRequiredTopologyConstraints"])
        elif tr.get("podSetSliceRequiredTopology") is not None:
            slices = ((tr["podSetSliceRequiredTopology"], tr.get("podSetSliceSize") or 0),)
    affinity = None
    na = ps.get("nodeAffinity") or {}
    if na.get("requiredDuringSchedulingIgnoredDuringExecution") is not None:
        affinity = _terms(na["requiredDuringSchedulingIgnoredDuringExecution"].get("nodeSelectorTerms") or [])
    return FitPodSet(
        ps["name"], ps["count"], ps["requests"],
        required=(tr or {}).get("required") or "", preferred=(tr or {}).get("preferred") or "",
        unconstrained=bool((tr or {}).get("unconstrained")), slices=slices, group=ps.get("podSetGroupName") or "",
        implied=tr is None,
        tolerations=tuple(Toleration(t.get("key", ""), t.get("operator", ""), t.get("value", ""), t.get("effect", ""))
                          for t in ps.get("tolerations") or ()),
        node_selector=ps.get("nodeSelector") or {}, affinity=affinity)


def run_case(c: dict[str, Any]) -> dict[str, PodSetPlacement]:
    flavor = FitFlavor("tas", "default", tuple(c["levels"]), c["nodeLabels"])
    nodes = [FitNode(n["name"], n["labels"], n["allocatable"], tuple(Taint(t["key"], t["value"], t["effect"]) for t in n["taints"]),
                     n["ready"], n["unschedulable"]) for n in c["nodes"]]
    usage: dict[str, dict[str, int]] = {}
    for p in c["podUsage"]:  # summed requests and a pods unit per pod (tas_non_tas_pod_cache.go:112-119)
        u = usage.setdefault(p["node"], {})
        for k, v in p["requests"].items():
            u[k] = u.get(k, 0) + v
        u["pods"] = u.get("pods", 0) + 1
    tas_usage: dict[str, dict[str, int]] = {}
    for d in c["priorOwnUsage"]:
        did = ",".join(d["values"])
        u = tas_usage.setdefault(did, {})
        for k, v in d["requests"].items():
            u[k] = u.get(k, 0) + v * d["count"]
        u["pods"] = u.get("pods", 0) + d["count"]
    return place(flavor, nodes, [podset(ps) for ps in c["podSets"]], usage, tas_usage)


def expected(c: dict[str, Any]) -> dict[str, PodSetPlacement]:
    out = {}
    for name, w in c["want"].items():
        out[name] = PodSetPlacement(tuple(w.get("levels") or ()), tuple((tuple(v), n) for v, n in w.get("domains") or ()),
                                    w["reason"])
    return out


def test_the_tables_are_there_and_big_enough() -> None:
    assert len(IN_SCOPE) >= 60, f"{len(IN_SCOPE)} in-scope cases of {len(CASES)}"
    for _, source, _ in CASES + SCHEDULE:
        assert source["repository"] == "kubernetes-sigs/kueue" and len(source["commit"]) == 40


@pytest.mark.parametrize(("name", "source", "case"), IN_SCOPE, ids=[n for n, _, _ in IN_SCOPE])
def test_kueue_case(name: str, source: dict[str, Any], case: dict[str, Any]) -> None:
    got = run_case(case)
    want = expected(case)
    # Kueue's result holds the pod sets up to the failing group (tas_flavor_snapshot.go:656-660);
    # its test lists them all, with the empty result for those never tried.
    for ps in want:
        got.setdefault(ps, PodSetPlacement())
    assert got == want, f"{source['file']} {source['test']} {case['name']!r} at {source['commit'][:10]}"


@pytest.mark.parametrize(("name", "source", "case"), SCHEDULE_IN_SCOPE, ids=[n for n, _, _ in SCHEDULE_IN_SCOPE])
def test_kueue_schedule_case(name: str, source: dict[str, Any], case: dict[str, Any]) -> None:
    from types import SimpleNamespace

    from exporter import loader
    from exporter.cluster.collector import build_collector
    from exporter.exposition import Exposition
    from exporter.topology import iter_domains

    expo = Exposition()
    store, handlers, _ = build_collector(expo)
    store.cluster_queues = {cq: SimpleNamespace(flavor_names=tuple(f)) for cq, f in case["clusterQueues"].items()}
    loader.feed(expo, handlers, [("case", o) for o in case["objects"]], "test")
    where = f"{source['file']} {source['test']} {case['name']!r} at {source['commit'][:10]}"
    for key, want in case["want"].items():
        ns, wl_name = key.split("/", 1)
        wl = store.workload(ns, wl_name)
        report = store.capacity.workload_fit(wl)
        assert report is not None and report.verdict.known, (where, key, report)
        v = report.verdict
        assert v.domain == want["admit"], (where, key, report.text)
        if want["admit"]:
            got = {name: sorted((tuple(d), n) for d, n in p.domains) for name, p in v.placements}
            written = {a["name"]: sorted((tuple(d.values), d.count) for d in iter_domains(a["topologyAssignment"]))
                       for a in want["podSetAssignments"] if a.get("topologyAssignment")}
            assert {k: got[k] for k in written} == written, where
        else:
            failed = next((n, p.reason) for n, p in v.placements if p.reason)
            assert want["message"] == f"couldn't assign flavors to pod set {failed[0]}: {failed[1]}", where
