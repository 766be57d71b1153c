"""Turn the raw dumps of Kueue's TAS test tables (written by dump_cases.go.txt) into the case
files gangscope's conformance tests read: per case the nodes, the bound pods' usage, the prior
TAS usage, the flavor, the pod sets and the outcome Kueue's test asserts, with the file, test
name and commit beside it. Cases that need what gangscope does not model (a non-default feature
gate, a node replacement, usage aggregated across flavors, a previous elastic assignment) are
kept with a ``skip`` reason, so the file says what was left out and why.

    python3 to_cases.py COMMIT DUMP_DIR OUT_DIR
"""

from __future__ import annotations

import json
import math
import sys
from decimal import Decimal
from pathlib import Path
from typing import Any

FILES = {
    "TestFindTopologyAssignments": "pkg/cache/scheduler/tas_cache_test.go",
    "TestFindTopologyAssignmentsMultiLayerReplacement": "pkg/cache/scheduler/tas_cache_test.go",
    "TestScheduleForTAS": "pkg/scheduler/scheduler_tas_test.go",
}
# Gates whose value in a case equals ff69552e's default (pkg/features/kube_features.go:645-870):
# a case that only restates a default is in scope.
DEFAULTS = {
    "TASProfileMixed": True, "TASMultiLayerTopology": True, "TASBalancedPlacement": False,
    "TASRespectNodeAffinityPreferred": False, "ElasticJobsViaWorkloadSlicesWithTAS": False,
    "ElasticJobsViaWorkloadSlices": True, "TASHandleOverlappingFlavors": True, "TASCacheNodeMatchResults": True,
    "TASCachingRemainingResources": True, "SchedulerLibraryIntegration": False,
}
_SUFFIX: dict[str, int | Decimal] = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
                                     "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60, "m": Decimal("0.001")}


def quantity(name: str, q: Any) -> int:
    """A resource.Quantity's JSON as Kueue's int64 (cpu in millicores, others rounded up)."""
    s = str(q)
    num = s.rstrip("kKMGTPEim")
    suf = s[len(num):]
    value = Decimal(num) * _SUFFIX[suf] if suf in _SUFFIX else Decimal(s)
    return math.ceil(value * 1000) if name == "cpu" else math.ceil(value)


def resource_list(rl: dict[str, Any] | None) -> dict[str, int]:
    return {k: quantity(k, v) for k, v in (rl or {}).items()}


def pod_requests(spec: dict[str, Any]) -> dict[str, int]:
    """k8s component-helpers PodRequests: the containers' sum, at least each init container, plus overhead."""
    out: dict[str, int] = {}
    for c in spec.get("containers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("requests")).items():
            out[k] = out.get(k, 0) + v
    for c in spec.get("initContainers") or []:
        for k, v in resource_list((c.get("resources") or {}).get("requests")).items():
            out[k] = max(out.get(k, 0), v)
    for k, v in resource_list(spec.get("overhead")).items():
        out[k] = out.get(k, 0) + v
    return out


def terminated(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")


def node(n: dict[str, Any]) -> dict[str, Any]:
    spec, status = n.get("spec") or {}, n.get("status") or {}
    ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
    return {"name": n["metadata"]["name"], "labels": n["metadata"].get("labels") or {},
            "allocatable": resource_list(status.get("allocatable")),
            "taints": [{"key": t["key"], "value": t.get("value", ""), "effect": t["effect"]} for t in spec.get("taints") or []],
            "ready": ready, "unschedulable": bool(spec.get("unschedulable"))}


def podset(ps: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"name": ps.get("podSetName", ""), "count": ps.get("count", 0), "requests": ps.get("requests") or {}}
    for src, dst in (("topologyRequest", "topologyRequest"), ("tolerations", "tolerations"),
                     ("nodeSelector", "nodeSelector"), ("nodeAffinity", "nodeAffinity"),
                     ("podSetGroupName", "podSetGroupName")):
        if ps.get(src) is not None:
            out[dst] = ps[src]
    return out


def want(ps: dict[str, Any]) -> dict[str, Any]:
    a = ps.get("wantAssignment")
    out: dict[str, Any] = {"reason": ps.get("wantReason", "")}
    if a:
        out["levels"] = a.get("Levels") or []
        out["domains"] = [[d.get("Values") or [], d.get("Count", 0)] for d in a.get("Domains") or []]
    return out


def skip_reason(c: dict[str, Any]) -> str:
    gates = {k: v for k, v in (c.get("featureGates") or {}).items() if DEFAULTS.get(k) != v}
    if gates:
        return "feature gates off their default: " + ", ".join(f"{k}={v}" for k, v in sorted(gates.items()))
    if c.get("workload"):
        return "node replacement for a Workload with unhealthyNodes (findReplacementAssignment)"
    if c.get("aggregatedDomainUsages") or c.get("priorFlavorUsage"):
        return "usage aggregated across overlapping flavors (TASHandleOverlappingFlavors)"
    if any(ps.get("previousAssignment") for ps in c.get("podSets") or []):
        return "a previous assignment of an elastic Workload slice"
    return ""


def convert(test: str, raw: list[dict[str, Any]], commit: str) -> dict[str, Any]:
    cases = []
    for c in raw:
        if "podSets" not in c:
            continue
        prior = [{"values": d.get("Values") or [], "requests": d.get("SinglePodRequests") or {}, "count": d.get("Count", 0)}
                 for d in c.get("priorOwnUsage") or []]
        case = {
            "name": c["name"],
            "levels": c.get("levels") or [],
            "nodeLabels": c.get("nodeLabels") or {},
            "nodes": [node(n) for n in c.get("nodes") or []],
            # The test feeds every pod to UpdateNonTASUsage (tas_cache_test.go, the loop after the
            # table), which drops terminated ones (tas_non_tas_pod_cache.go:46-57).
            "podUsage": [{"node": p["spec"]["nodeName"], "requests": pod_requests(p["spec"])}
                         for p in c.get("pods") or []
                         if (p.get("spec") or {}).get("nodeName") and not terminated(p)],
            "priorOwnUsage": prior,
            "podSets": [podset(ps) for ps in c["podSets"]],
            "want": {ps.get("podSetName", ""): want(ps) for ps in c["podSets"]},
        }
        reason = skip_reason(c)
        if reason:
            case["skip"] = reason
        cases.append(case)
    return {"source": {"repository": "kubernetes-sigs/kueue", "commit": commit, "file": FILES[test], "test": test},
            "cases": cases}


KUEUE_API = "kueue.x-k8s.io/v1beta2"
TOPOLOGY_PHRASES = ("doesn't allow to fit", "allows to fit only", "no topology domains at level")


def _key(obj: dict[str, Any]) -> str:
    return f"{obj['metadata'].get('namespace', '')}/{obj['metadata']['name']}"


def _waiting(wl: dict[str, Any]) -> bool:
    status = wl.get("status") or {}
    return not status.get("admission") and not any(
        c.get("type") == "QuotaReserved" and c.get("status") == "True" for c in status.get("conditions") or [])


def convert_schedule(raw: list[dict[str, Any]], queues: list[dict[str, Any]], commit: str) -> dict[str, Any]:
    """TestScheduleForTAS: one scheduling cycle over whole objects. For each Workload waiting at the
    start, what the cycle did: admitted with a topology assignment (``wantNewAssignments``), or an
    event with the placement's failure message. Only cases with one waiting Workload are in scope
    (with several, Kueue places them in one cycle with each other's usage assumed and one head per
    ClusterQueue, which a per-Workload fit does not model)."""
    cases = []
    for c in raw:
        workloads = c.get("workloads") or []
        waiting = [w for w in workloads if _waiting(w)]
        events = {(e.get("Key") or {}).get("Namespace", "") + "/" + (e.get("Key") or {}).get("Name", ""): e
                  for e in c.get("wantEvents") or [] if e.get("Reason") == "Pending"}
        new = c.get("wantNewAssignments") or {}
        want: dict[str, Any] = {}
        for w in waiting:
            key = _key(w)
            if key in new:
                psas = new[key].get("podSetAssignments") or []
                if any(a.get("topologyAssignment") for a in psas):  # else nothing TAS to compare
                    want[key] = {"admit": True, "podSetAssignments": psas}
            elif key in events and any(p in events[key].get("Message", "") for p in TOPOLOGY_PHRASES):
                want[key] = {"admit": False, "message": events[key]["Message"]}
        gates = {k: v for k, v in (c.get("featureGates") or {}).items() if DEFAULTS.get(k) != v}
        skip = ""
        if gates:
            skip = "feature gates off their default: " + ", ".join(f"{k}={v}" for k, v in sorted(gates.items()))
        elif c.get("resourceTransformations") or c.get("admissionChecks") or c.get("patchStatusErr"):
            skip = "resource transformations, admission checks or a failing status patch"
        elif any((q.get("spec") or {}).get("cohortName") or (q.get("spec") or {}).get("cohort") for q in c.get("clusterQueues") or []):
            skip = "a cohort (borrowing, preemption across queues)"
        elif any(((t.get("spec") or {}).get("levels") or [{}])[-1].get("nodeLabel") != "kubernetes.io/hostname"
                 for t in c.get("topologies") or []):
            skip = "a Topology whose lowest level is not the hostname (gangscope keeps usage per host)"
        elif len(waiting) == 1 and len((waiting[0].get("spec") or {}).get("podSets") or []) > 1 and any(
                sum(len(rg.get("flavors") or []) for rg in (q.get("spec") or {}).get("resourceGroups") or []) > 1
                for q in c.get("clusterQueues") or []):
            skip = "several pod sets in a ClusterQueue of several flavors (Kueue may give each its own)"
        elif any((w.get("status") or {}).get("unhealthyNodes") for w in workloads):
            skip = "a node replacement for another Workload in the same cycle"
        elif any(ps.get("minCount") is not None for w in waiting for ps in (w.get("spec") or {}).get("podSets") or []):
            skip = "partial admission (minCount), which the fit does not model"
        elif len(waiting) != 1:
            skip = f"{len(waiting)} waiting Workloads in one cycle"
        elif not want:
            skip = "the cycle left the Workload without a topology verdict (quota, preemption, a check)"
        objects = []
        for field_name, api_version, kind in (("nodes", "v1", "Node"), ("pods", "v1", "Pod"),
                                              ("topologies", KUEUE_API, "Topology"),
                                              ("resourceFlavors", KUEUE_API, "ResourceFlavor")):
            # the test's builders set no TypeMeta: added as the API server would return the objects
            objects += [{"apiVersion": api_version, "kind": kind, **o} for o in c.get(field_name) or []]
        objects += queues
        objects += [{"apiVersion": KUEUE_API, "kind": "Workload", **w} for w in workloads]
        case = {"name": c["name"],
                "objects": objects,
                "clusterQueues": {q["metadata"]["name"]: [f["name"] for rg in (q.get("spec") or {}).get("resourceGroups") or []
                                                          for f in rg.get("flavors") or []]
                                  for q in c.get("clusterQueues") or []},
                "want": want}
        if skip:
            case["skip"] = skip
        cases.append(case)
    return {"source": {"repository": "kubernetes-sigs/kueue", "commit": commit, "file": FILES["TestScheduleForTAS"],
                       "test": "TestScheduleForTAS"}, "cases": cases}


def main() -> None:
    commit, dump, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    for test in FILES:
        f = dump / f"{test}.json"
        if not f.exists():
            continue
        if test == "TestScheduleForTAS":
            queues = json.loads((dump / "TestScheduleForTAS.queues.json").read_text())[0]["queues"]  # the table's LocalQueues
            queues = [{"apiVersion": KUEUE_API, "kind": "LocalQueue", **q} for q in queues]
            data = convert_schedule(json.loads(f.read_text()), queues, commit)
        else:
            data = convert(test, json.loads(f.read_text()), commit)
        (out / f"{test}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        kept = sum(1 for c in data["cases"] if "skip" not in c)
        print(f"{test}: {len(data['cases'])} cases, {kept} in scope")


if __name__ == "__main__":
    main()
