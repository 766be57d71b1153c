"""``gangscope explain NAMESPACE/NAME``: why is this job pending, or slow? One layer at a time.

A distributed job passes four layers (ARCHITECTURE.md): admission (Kueue quota), placement
(topology assignment, node health), assembly (the gang binds all minMember pods) and
interconnect (NVLink/PCIe throughput). Users ask "why is it pending?" and mostly cannot tell an
admission problem from an assembly one; this walks the layers in order and stops at the first
that holds the job back, naming it with its evidence (the Kueue message, the PodGroup phase and
since when, the unhealthy node, the throughput drop).

The diagnosis is computed from the same records the collector keeps (the Workload store and the
gang index), so the three ways to get it agree: live (list what the job needs once through the
kube client: its namespace, and the nodes it was placed on), offline on a dump
(``--from-file``), and the collector's ``/debug/explain`` endpoint (:func:`explain_route`).
The JSON schema is documented in ``docs/explain.md``.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import textwrap
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
import yaml
import structlog

from .cluster.gang_state import PLACEMENT_GATES, workload_members
from .cluster import job_state, node_loss
from .cluster.holding import DELAYED_TOPOLOGY, holding_layer
from .cluster.volcano_queues import queue_verdict
from .cluster.workload_fit import is_topological
from .cluster.workload_state import WAITING_STAGES, in_queue
from .config import add_kube, add_logging
from .rule_queries import Rules
from .training_layer import Windows, training_layer
from .training_layer import add_arguments as training_arguments

if TYPE_CHECKING:
    from .cluster.fits import FitReport
    from .cluster.gang_state import Gang
    from .cluster.gangs import GangIndex
    from .cluster.jobs import JobIndex, JobView
    from .cluster.pods import Pod
    from .cluster.clusterqueues import ClusterQueue, QueuePosition
    from .cluster.store import ClusterStore
    from .cluster.workloads import AdmissionCheck, Assignment, Condition, Workload
    from .cluster.workloads import Path as DomainPath

log = structlog.get_logger(__name__)

SCHEMA = "gangscope.explain/v1"
LAYERS = ("admission", "placement", "assembly", "interconnect", "job", "training")
CLUSTER_LAYERS = ("admission", "placement", "assembly")  # decided by exporter.cluster.holding
TOPOLOGY_ANNOTATIONS = (
    ("required", "kueue.x-k8s.io/podset-required-topology"),
    ("preferred", "kueue.x-k8s.io/podset-preferred-topology"),
    ("unconstrained", "kueue.x-k8s.io/podset-unconstrained-topology"),
    ("slice_required", "kueue.x-k8s.io/podset-slice-required-topology"),
)


class UnknownTarget(LookupError):
    """NAME is neither a Workload, nor a Workload's owner, nor a PodGroup in NAMESPACE."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    from .cluster.collector import add_collector_arguments

    p.add_argument("target", metavar="NAMESPACE/NAME", help="a Kueue Workload, its owner job, or a PodGroup")
    p.add_argument("--from-file", type=Path, default=None, metavar="PATH",
                   help="explain from a kubectl get -o yaml|json dump instead of the live cluster")
    p.add_argument("--output", choices=("text", "json"), default="text", help="text for a terminal (default) or JSON")
    p.add_argument("--prometheus", default=None, metavar="URL",
                   help="Prometheus base URL: compare the job's NVLink/PCIe throughput now with its first hour")
    training_arguments(p)
    p.add_argument("--sync-timeout", type=float, default=30.0,
                   help="live: seconds to wait for the first list of every served resource (default 30)")
    add_collector_arguments(p)
    add_kube(p)
    add_logging(p, "warning")


# ---- the diagnosis ---------------------------------------------------------------------------

def _ts(seconds: float | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{(seconds % 3600) // 60:02d}m"
    return f"{seconds // 86400}d{(seconds % 86400) // 3600}h"


def _cond(c: Condition | None) -> dict[str, Any] | None:
    if c is None:
        return None
    return {"status": c.status, "reason": c.reason, "message": c.message, "since": _ts(c.last_transition_seconds)}


def _check(c: AdmissionCheck) -> dict[str, Any]:
    return {"name": c.name, "state": c.state, "message": c.message, "since": _ts(c.last_transition_seconds),
            "retry_count": c.retry_count, "requeue_after_seconds": c.requeue_after_seconds,
            "next_retry": _ts(c.next_retry_seconds)}


def _position(p: QueuePosition | None) -> dict[str, Any] | None:
    if p is None:
        return None
    return {"cluster_queue": p.cluster_queue, "position_in_cluster_queue": p.position, "listed": p.listed,
            "complete": p.complete, "local_queue": p.local_queue, "position_in_local_queue": p.local_position,
            "polled_at": _ts(p.polled_at)}


def _layer(name: str, status: str, summary: str, evidence: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"name": name, "status": status, "summary": summary, "evidence": evidence or {}}


def resolve(store: ClusterStore, gangs: GangIndex, namespace: str, name: str) -> tuple[str, Workload | None, list[Gang]]:
    """(how NAME was found, the Workload or None, its gangs); raises :class:`UnknownTarget`."""
    wl = store.workload(namespace, name)
    how = "workload"
    if wl is None:
        owned = store.workloads_by_owner_name(namespace, name)
        if owned:
            wl, how = owned[0], "owner"
    if wl is not None:
        return how, wl, gangs.gangs_of(wl.key)
    found = gangs.find_podgroups(namespace, name)
    if not found:
        raise UnknownTarget(f"{namespace}/{name}: no Kueue Workload, owner job of a Workload, or PodGroup of that name")
    owner = found[0].workload
    return "podgroup", owner, (gangs.gangs_of(owner.key) if owner is not None else found)


_WAITING = {
    "capacity": "waiting for capacity",
    "configuration": "cannot be admitted as configured (this will not clear by itself)",
    "preemption": "waiting for preempted workloads to release their quota",
    "policy": "held by policy",
    "evaluation": "waiting to be evaluated",
    "backoff": "in backoff after an eviction",
}


def _position_text(p: QueuePosition | None) -> str:
    if p is None:
        return ""
    of = f"{p.listed}" if p.complete else f"at least {p.listed}"
    return f"; position {p.position + 1} of {of} in {p.cluster_queue} ({p.local_position + 1} in queue {p.local_queue})"


def admission_layer(wl: Workload | None, position: QueuePosition | None = None,
                    fit: FitReport | None = None, queue: ClusterQueue | None = None,
                    cohorts: Sequence[str] = ()) -> dict[str, Any]:
    if wl is None or wl.state is None:
        return _layer("admission", "unknown", "no Kueue Workload joined to this PodGroup (not admitted by Kueue)")
    conds = wl.conditions
    qr, adm, ev = _cond(conds.get("QuotaReserved")), _cond(conds.get("Admitted")), _cond(conds.get("Evicted"))
    state = wl.state
    pending, check = state.pending, state.blocking_check
    evidence = {
        "stage": state.stage, "local_queue": wl.queue_name, "cluster_queue": wl.cluster_queue or None,
        "priority_class": wl.priority_class or None, "quota_reserved": qr, "admitted": adm, "evicted": ev,
        "pods_ready": _cond(conds.get("PodsReady")),
        "pending_reason": {"reason": pending.reason, "category": pending.category, "message": pending.message}
        if pending is not None else None,
        "requeue": {"count": wl.requeue_count, "at": wl.requeue_at or None} if wl.requeue_count is not None or wl.requeue_at else None,
        "evictions": [{"reason": r, "underlying_cause": u, "count": n} for (r, u), n in sorted(wl.evictions.items())],
        "failed_nodes": list(wl.failed_nodes),
        "admission_checks": [_check(c) for c in wl.admission_checks],
        "blocking_check": check.name if check is not None else None,
        "queue_position": _position(position),
        "cluster_queue_state": {
            "active": queue.active, "reason": queue.active_reason or None, "message": queue.active_message or None,
            "stop_policy": queue.stop_policy, "flavors": list(queue.flavor_names), "cohort": queue.cohort or None,
            "cohort_tree": list(cohorts),
        } if queue is not None else None,
    }
    cq = wl.cluster_queue or "?"
    stage = state.stage
    if stage == "finished":
        fin = _cond(conds.get("Finished")) or {}
        return _layer("admission", "ok", f"finished ({fin.get('reason') or 'done'}) {fin.get('since') or ''}".rstrip(), evidence)
    if stage == "deactivated":
        why = f" ({ev['reason']}: {ev['message']})" if ev and ev["status"] == "True" else ""
        return _layer("admission", "blocking", f"deactivated (spec.active is false){why}: Kueue will not admit it", evidence)
    if stage == "evicting" and not (ev and ev["reason"] == "NodeFailures"):
        return _layer("admission", "blocking", f"being evicted ({ev['reason'] if ev else '?'}): {ev['message'] if ev else ''}".rstrip(": "), evidence)
    if stage in WAITING_STAGES and pending is not None and not is_topological(pending.reason, pending.message):
        summary = f"{stage} in {cq} (queue {wl.queue_name}): {_WAITING[pending.category]}"
        if pending.reason:
            summary += f" ({pending.reason})"
        if pending.message:
            summary += f": {pending.message}"
        if stage == "backoff":
            summary += f"; back in the queue at {_ts(state.backoff_until)}"
        if wl.requeue_count:
            summary += f"; requeued {wl.requeue_count}x" + (f", next retry {wl.requeue_at}" if wl.requeue_at else "")
        if check is not None:
            summary += "; " + _check_text(check)
        summary += _eviction_text(wl, pending.message)
        summary += _queue_text(wl, queue, pending.message)
        summary += _position_text(position)
        if pending.category == "capacity" and fit is not None and fit.verdict.known:  # would the topology take it, once quota allows?
            summary += ". Topology now: " + fit.text
        return _layer("admission", "blocking", summary, evidence)
    if pending is not None and is_topological(pending.reason, pending.message):
        return _layer("admission", "ok", f"quota available in {cq} (queue {wl.queue_name}), but no topology domain fits: "
                      "see placement", evidence)
    if stage == "admission_checks" and not (pending is not None and pending.reason == DELAYED_TOPOLOGY):
        summary = f"quota reserved in {cq}, admission pending"
        summary += ": " + (_check_text(check) if check is not None else (adm or {}).get("message") or "checks not ready")
        return _layer("admission", "blocking", summary, evidence)
    if stage == "admission_checks":  # Admitted=False PendingDelayedTopologyRequests: quota held, not admitted yet
        since = (qr or {}).get("since")
        return _layer("admission", "ok", f"quota reserved in {cq} (queue {wl.queue_name})" + (f" at {since}" if since else "")
                      + "; admission waits for its delayed topology assignment: see placement", evidence)
    since = (adm or qr or {}).get("since")
    return _layer("admission", "ok", f"admitted to {cq} (queue {wl.queue_name})" + (f" at {since}" if since else ""), evidence)


def cohort_tree(store: ClusterStore, queue: ClusterQueue | None) -> list[str]:
    """The queue's cohort and its parents up to the root, from the Cohort objects (a cohort
    without an object ends the chain; Kueue rejects cycles, this guards against a stale one)."""
    out: list[str] = []
    name = queue.cohort if queue is not None else ""
    while name and name not in out:
        out.append(name)
        cohort = store.cohorts.get(name)
        name = cohort.parent if cohort is not None else ""
    return out


def _queue_text(wl: Workload, queue: ClusterQueue | None, pending_message: str) -> str:
    """Why the Workload's ClusterQueue admits nothing, from its Active condition (Kueue's own
    words, pkg/cache/scheduler/clusterqueue.go:311-366), where it is not active."""
    if queue is not None:
        if queue.active:
            return ""
        why = queue.active_reason or "no Active condition yet"
        return f"; ClusterQueue {queue.name} is not active ({why}" + (f": {queue.active_message})" if queue.active_message else ")")
    if pending_message.startswith("ClusterQueue ") and pending_message.endswith(" is inactive"):
        return "; whether the ClusterQueue is stopped or misconfigured is unknown (ClusterQueues not read)"
    return ""


def _eviction_text(wl: Workload, pending_message: str) -> str:
    """"; evicted before ..." for a Workload back in the queue after an eviction (its Evicted
    condition is still True: Kueue resets it when it reserves quota again, pkg/workload/workload.go:941),
    naming the failed nodes of a NodeFailures eviction (exporter.cluster.evictions)."""
    ev = wl.conditions.get("Evicted")
    if ev is None or ev.status != "True":
        return ""
    text = f"; evicted before ({ev.reason}"
    if ev.reason == "NodeFailures" and wl.failed_nodes:
        text += f", failed node{'s' if len(wl.failed_nodes) > 1 else ''} {', '.join(wl.failed_nodes)}"
    text += f" at {ev.last_transition})" if ev.last_transition else ")"
    if ev.message and ev.message != pending_message:
        text += f": {ev.message}"
    return text


def _check_text(c: AdmissionCheck) -> str:
    text = f"admission check {c.name} is {c.state}"
    if c.message:
        text += f" ({c.message})"
    if c.retry_count:
        text += f", retried {c.retry_count}x"
    if c.next_retry_seconds is not None:
        text += f", next retry {_ts(c.next_retry_seconds)}"
    return text


def _by_level(placed: Sequence[tuple[tuple[tuple[str, str], ...], int]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for path, pods in placed:
        for alias, value in path:
            level = out.setdefault(alias, {})
            level[value] = level.get(value, 0) + pods
    return out


def placement_layer(wl: Workload | None, fit: FitReport | None = None,
                    placement: Callable[[Assignment], Sequence[tuple[DomainPath, int]]] | None = None,
                    gated: Sequence[str] = ()) -> dict[str, Any]:
    """``gated``: the Workload's live pods (or gangs) still held by Kueue's topology gate."""
    if wl is None or wl.state is None:
        return _layer("placement", "unknown", "no Kueue Workload: no topology assignment to show")
    requests = []
    for ps in wl.podsets:
        req = _request(ps.topology) if ps.topology is not None else {}
        if not req:  # a dump whose Workloads predate spec.podSets[].topologyRequest: the annotations
            req = {k: ps.annotations[a] for k, a in TOPOLOGY_ANNOTATIONS if ps.annotations.get(a)}
        if req:
            requests.append({"podset": ps.name, **req})
    assignments = []
    unresolved = []
    # the store's placement (``ClusterStore.placement``: a finished or deactivated Workload's is
    # made when asked), else the record's own
    placed = {id(a): (placement(a) if placement is not None else a.placed) for a in wl.last_assignments}
    for a in wl.last_assignments:
        topo = a.topology
        assignments.append({
            "podset": a.name, "flavors": a.flavors,
            "topology": {"flavor": topo.flavor, "name": topo.topology or None, "problem": topo.problem or None}
            if topo is not None else None,
            "domains": [{"path": dict(path), "pods": pods} for path, pods in placed[id(a)]],
            "by_level": _by_level(placed[id(a)]),
        })
        if topo is not None and topo.problem and a.domains:
            unresolved.append(f"{a.name}: flavor {topo.flavor or '?'} {_UNRESOLVED[topo.problem](topo.topology)}")
    unhealthy: list[dict[str, Any]] = [{"node": n, "path": dict(p)} for n, p in zip(wl.unhealthy_nodes, wl.unhealthy_paths)]
    evidence = {"topology_request": requests, "assignment_current": wl.admitted and bool(wl.assignments),
                "assignments": assignments, "unhealthy_nodes": unhealthy,
                "fit": fit.evidence if fit is not None else None}
    qr, adm, ev = (_cond(wl.conditions.get(t)) for t in ("QuotaReserved", "Admitted", "Evicted"))
    if qr and qr["status"] == "False" and is_topological(qr["reason"], qr["message"]):
        # Kueue's word first; gangscope's model beside it, with why they may differ (fit_text).
        summary = f"Kueue: no topology placement: {qr['message']}"
        if fit is not None:
            summary += f". {fit.text}"
        return _layer("placement", "blocking", summary, evidence)
    if adm and adm["status"] == "False" and adm["reason"] == DELAYED_TOPOLOGY:
        return _layer("placement", "blocking", f"topology assignment delayed: {adm['message']}", evidence)
    if wl.stage == "evicting" and ev and ev["reason"] == "NodeFailures":
        return _layer("placement", "blocking", f"evicted for node failures: {ev['message']}", evidence)
    if unhealthy:
        nodes = ", ".join(u["node"] for u in unhealthy)
        return _layer("placement", "blocking", f"unhealthy node(s) in the assignment: {nodes}; Kueue is looking for a replacement", evidence)
    if gated and wl.stage in ("assembling", "running", "recovering"):
        evidence["topology_gated"] = list(gated)
        shown = ", ".join(gated[:4]) + (f" and {len(gated) - 4} more" if len(gated) > 4 else "")
        return _layer("placement", "blocking", f"admitted, but Kueue's topology gate ({PLACEMENT_GATES[0]}) still holds "
                      f"{shown}: Kueue's TAS ungater lifts it once each pod has its topology domain, so the pods wait "
                      "for placement, not for the gang scheduler", evidence)
    if not any(a.domains for a in wl.last_assignments):
        return _layer("placement", "ok", "no topology assignment (TAS not used for this Workload)", evidence)
    counts = []
    total = sum(pods for a in wl.last_assignments for _, pods in placed[id(a)])
    for alias, values in _by_level([x for a in wl.last_assignments for x in placed[id(a)]]).items():
        n = len([v for v in values if v])
        if n:
            counts.append(f"{n} {alias}{'s' if n != 1 else ''}")
    where = "current" if evidence["assignment_current"] else "last"
    summary = f"{total} pods on {', '.join(counts) or 'unlabelled nodes'} ({where} assignment)"
    if unresolved:
        summary += "; upper levels unknown: " + "; ".join(unresolved)
    return _layer("placement", "ok", summary, evidence)


def _request(tr: Any) -> dict[str, Any]:
    """``spec.podSets[].topologyRequest`` as explain's JSON (node label keys, as Kueue names them)."""
    out: dict[str, Any] = {}
    if tr.required:
        out["required"] = tr.required
    if tr.preferred:
        out["preferred"] = tr.preferred
    if tr.unconstrained:
        out["unconstrained"] = "true"
    if tr.slices:
        out["slice_required"] = tr.slices[0][0]
        out["slice_size"] = tr.slices[0][1]
    return out


_UNRESOLVED = {
    "flavor_missing": lambda topology: "is not a known ResourceFlavor (and several Topologies exist)",
    "no_topology_name": lambda topology: "sets no spec.topologyName",
    "topology_missing": lambda topology: f"names Topology {topology}, which does not exist",
}


def _members_text(g: Gang) -> str:
    """``3/4 running`` with the evidence it comes from, or the phase's word."""
    rec, m = g.podgroup, g.members
    if rec.composite or rec.min_member is None:  # a composite's children are told by assembly_layer
        return ""
    if m is not None and m.evidence == "pods":
        text = f"{(m.running or 0) + (m.succeeded or 0)}/{rec.min_member} running"
        extra = [f"{v} {k}" for k, v in (("bound, not started", m.bound), ("pending", m.pending), ("gated", m.gated),
                                         ("terminating", m.terminating), ("failed", m.failed), ("unknown", m.unknown))
                 if v]
        text += f" (live pods{': ' + ', '.join(extra) if extra else ''})"
        if m.waiting:
            text += "; waiting to start: " + ", ".join(f"{n} {reason}" for reason, n in m.waiting)
        if m.gates:
            text += "; scheduling gates: " + ", ".join(f"{gate} on {n}" for gate, n in m.gates)
        if m.disrupted:
            text += "; DisruptionTarget: " + ", ".join(f"{n} {reason}" for reason, n in m.disrupted)
        if m.unknown_what:
            text += "; not understood: " + ", ".join(m.unknown_what)
        if m.gpus_unknown:
            text += f"; {m.gpus_unknown} placed pods hold GPUs through DRA claims or KAI gpu-memory: how many is unknown"
        return text
    if m is not None and m.evidence == "counters":
        return f"{(m.running or 0) + (m.succeeded or 0)}/{rec.min_member} running (PodGroup status)"
    return f"?/{rec.min_member} running"


# What the phase that still says "assembled" means, in each API's own words (kubernetes 10b39a39
# scheduling/v1beta1/types.go:722-750; volcano ed72c7c8 staging/src/volcano.sh/apis/pkg/apis/
# scheduling/v1beta1/types.go:47; scheduler-plugins 903da7df apis/scheduling/v1alpha1/types.go:94).
_LAG_NOTE = {
    "native": "it reflects the first scheduling decision only",
    "volcano": "Volcano: minMember pods have been in running phase, as of its last scheduling session",
    "coscheduling": "Coscheduling: the minMember pods of the pod group are in running phase, as of the "
                    "controller's last reconcile",
}


def _phase_lags(g: Gang) -> str:
    """A note when the PodGroup's own phase says otherwise than the evidence gangscope trusts."""
    rec = g.podgroup
    if rec.phase is None or g.members is None or g.members.evidence == "phase":
        return ""
    if rec.api in ("native", "kai") and rec.phase == "Pending":
        return ""  # no status written at all (a 1.37 CompositePodGroup's stays empty): nothing lags
    said = rec.gang_state
    if said in ("waiting", "partial") and g.stage in ("assembled", "finished", "starting"):
        return f"; its phase still says {rec.phase}"
    if said == "assembled" and g.stage in ("assembling", "stuck", "partially_bound"):
        return f"; its status still says {rec.phase} ({_LAG_NOTE[rec.api]})"
    return ""


def _missing(named: list[str], layer: dict[str, Any]) -> dict[str, Any]:
    """A layer's summary with the PodGroups its pods name that gangscope does not see."""
    if named:
        layer["summary"] += (f"; its pods name PodGroup {', '.join(named)}, which gangscope does not see "
                             "(deleted, or not watched)")
    return layer


def assembly_layer(wl: Workload | None, gangs: Sequence[Gang], now: float, index: GangIndex | None = None) -> dict[str, Any]:
    evidence: dict[str, Any] = {"podgroups": [g.as_dict() for g in gangs]}
    for key in ("wait_start", "deadline"):
        for d in evidence["podgroups"]:
            d[key] = _ts(d[key])
    for d in evidence["podgroups"]:
        d["podgroup"]["phase_since"] = _ts(d["podgroup"]["phase_since"])
    texts = {g.podgroup.key: _members_text(g) for g in gangs}
    if index is not None:
        for g in gangs:
            if g.podgroup.composite:
                kids = index.children(g)
                need = g.podgroup.min_member if g.podgroup.min_member is not None else len(kids)
                done = sum(1 for k in kids if k.stage in ("assembled", "finished"))
                texts[g.podgroup.key] = f"{done}/{need} child groups assembled (" + ", ".join(
                    f"{k.podgroup.name} {k.stage}" for k in kids) + ")"
    pods = index.workload_pods(wl) if index is not None and wl is not None else []
    if pods:
        counts = workload_members(pods)
        evidence["pods"] = {"total": counts.members, "bound": counts.bound, "running": counts.running,
                            "ready": counts.ready, "pending": counts.pending, "gated": counts.gated,
                            "terminating": counts.terminating, "succeeded": counts.succeeded,
                            "failed": counts.failed, "placed_gpus": counts.placed_gpus}
    if not gangs:
        named = sorted({f"{p.gang[1]} ({p.gang[0]})" for p in pods if p.gang is not None})
        if named:  # bad input, or a group deleted under its pods: named, never judged
            evidence["missing_podgroups"] = named
        need = sum(ps.count for ps in wl.podsets) if wl is not None else 0
        if wl is not None and wl.stage == "recovering":
            return _missing(named, _not_ready(wl, pods, evidence, ", and no PodGroup is joined"))
        if wl is not None and wl.stage == "assembling":
            ready = wl.conditions.get("PodsReady")
            if ready is None and pods:
                c = evidence["pods"]
                return _missing(named, _layer("assembly", "blocking", f"admitted, {c['running'] + c['succeeded']}/{need} pods running "
                              f"(live pods: {c['bound']} bound, {c['pending']} pending), and no PodGroup is joined: "
                              "check the pending pods' events", evidence))
            since = f" since {_ts(ready.last_transition_seconds)}" if ready is not None and ready.last_transition_seconds else ""
            return _missing(named, _layer("assembly", "blocking", f"admitted but pods not ready (Kueue's PodsReady is False, "
                          f"{ready.reason if ready else '?'}{since}), and no PodGroup is joined "
                          "(no gang scheduler, or its PodGroups are not watched): check the pods' events", evidence))
        if wl is not None and wl.stage == "running" and "PodsReady" not in wl.conditions:
            seen = f"; its live pods: {evidence['pods']['running']}/{need} running" if pods else \
                ", so nothing says the pods are not running"
            return _missing(named, _layer("assembly", "ok", "no PodGroup joined; Kueue writes no PodsReady here (waitForPodsReady "
                          "is off)" + seen, evidence))
        return _missing(named, _layer("assembly", "ok" if wl is not None and wl.stage in ("running", "finished") else "unknown",
                      "no PodGroup joined to this Workload", evidence))
    worst = None
    order = ("failed", "partially_bound", "stuck", "unknown", "starting", "assembling", "placing", "queued", "not_admitted")
    for g in gangs:
        if g.stage in order and (worst is None or order.index(g.stage) < order.index(worst.stage)):
            worst = g
    if worst is None:
        names = ", ".join(f"{g.podgroup.name} {g.stage}" + (f" ({texts[g.podgroup.key]}{_phase_lags(g)})"
                                                             if texts[g.podgroup.key] else "") for g in gangs)
        if wl is not None and wl.stage in ("recovering", "assembling"):
            return _not_ready(wl, pods, evidence, f"; the gang scheduler's word: {names}")
        if wl is not None and "PodsReady" not in wl.conditions and wl.stage == "running":
            names += " (Kueue writes no PodsReady here: waitForPodsReady is off)"
        return _layer("assembly", "ok", names, evidence)
    rec = worst.podgroup
    kind = "CompositePodGroup" if rec.composite else "PodGroup"
    parts = [f"{kind} {rec.name} ({rec.api})"]
    if rec.phase is not None:
        since = ""
        if rec.phase_since is not None and rec.since_source != "observed":
            since = f" since {_ts(rec.phase_since)} ({_duration(now - rec.phase_since)})"
        elif rec.phase_since is not None and now - rec.phase_since >= 1:  # no API timestamp: when gangscope saw it
            since = f" (seen since {_ts(rec.phase_since)}, {_duration(now - rec.phase_since)})"
        parts.append(f"{rec.phase}{since}")
    if texts[rec.key]:
        parts.append(texts[rec.key] + _phase_lags(worst))
    if rec.parent:
        parts.append(f"in CompositePodGroup {rec.parent}")
    if worst.stage == "unknown" and rec.not_modelled:
        parts.append(f"not modelled: {rec.not_modelled}")
    queue: dict[str, Any] | None = None
    if worst.stage == "queued":  # Volcano creates the pods once the group is enqueued
        label, queue = queue_verdict(rec, index.volcano_queues if index is not None else None)
    else:
        label = {"failed": "gang failed", "partially_bound": "partially bound: some pods hold resources, the rest cannot be placed",
                 "stuck": "stuck assembling", "assembling": "assembling", "not_admitted": "waiting for admission",
                 "starting": "placed, not started: all members are bound, some containers have not started (a node or "
                             "image matter, not the gang scheduler's)",
                 "placing": "waiting for placement: Kueue's topology gate holds the pods until TAS assigns them",
                 "unknown": "not judged: gangscope does not understand what decides this gang"}[worst.stage]
    if queue is not None:
        evidence["queue"] = queue
    summary = f"{label}: " + ", ".join(parts)
    if worst.deadline is not None:
        verb = "passed" if worst.stuck else "ends"
        summary += f"; timeout {int(worst.timeout)}s {verb} {_ts(worst.deadline)}"
    if worst.idle_gpus:
        summary += f"; {worst.idle_gpus:g} GPUs idle"
    if rec.unschedulable:
        summary += "; scheduler: " + "; ".join(f"{u.reason}: {u.message}" if u.message else u.reason
                                               for u in rec.unschedulable)
    elif rec.message:
        summary += f"; scheduler: {rec.message}"
    status = "unknown" if worst.stage in ("not_admitted", "unknown") else "blocking"
    return _layer("assembly", status, summary, evidence)


def _not_ready(wl: Workload, pods: Sequence[Pod], evidence: dict[str, Any], tail: str) -> dict[str, Any]:
    """Kueue's ``PodsReady=False`` on an admitted Workload (stage ``assembling``: not all pods have
    started; ``recovering``: a pod failed after the start, kueue pkg/controller/jobframework/
    reconciler.go:1905-1922), with the live pods that are not ready."""
    ready = wl.conditions.get("PodsReady")
    since = f" since {_ts(ready.last_transition_seconds)}" if ready is not None and ready.last_transition_seconds else ""
    said = f"Kueue's PodsReady is False ({ready.reason if ready is not None else '?'}{since})"
    lead = ("recovering: a pod failed after the job started and Kueue waits for it to be ready again" if wl.stage == "recovering"
            else "admitted but not all pods are ready")
    not_ready = [p for p in pods if p.phase not in ("Succeeded",) and not p.ready and not p.terminating]
    if not_ready:
        shown = ", ".join(f"{p.name} ({p.waiting or p.phase or 'not ready'}{' on ' + p.node if p.node else ''})"
                          for p in sorted(not_ready, key=lambda p: p.name)[:4])
        more = f" and {len(not_ready) - 4} more" if len(not_ready) > 4 else ""
        evidence["not_ready_pods"] = [{"pod": p.name, "node": p.node or None, "phase": p.phase, "waiting": p.waiting or None}
                                      for p in not_ready]
        said += f"; not ready: {shown}{more}"
    return _layer("assembly", "blocking", f"{lead} ({said}){tail}", evidence)


# explain's job-layer problems, worst first
JOB_PROBLEMS = ("failed", "restarting", "progress_stale", "groups_not_ready")


def job_layer(wl: Workload | None, store: ClusterStore, jobs: JobIndex | None, now: float) -> dict[str, Any]:
    """The job controller around the gang: a JobSet restarting, a TrainJob whose progress stands
    still, LeaderWorkerSet groups its controller calls ready that their pods are not."""
    views = jobs.jobs_of(wl) if jobs is not None and wl is not None else []
    evidence: dict[str, Any] = {"jobs": [_job_dict(v) for v in views], "problem": None}
    if not views:
        owner = wl.owner if wl is not None else None
        if owner is not None and owner.kind in ("JobSet", "TrainJob", "LeaderWorkerSet"):
            # its owner is one of the kinds this layer reads, but not among the objects: not "none"
            return _layer("job", "unknown", f"its {owner.kind} {owner.name} is not known (not in the dump, or not watched)",
                          evidence)
        return _layer("job", "ok", "no JobSet, TrainJob or LeaderWorkerSet owns this Workload", evidence)
    problems: list[str] = []
    kinds: list[str] = []
    fine: list[str] = []
    depth = store.eviction_depth
    domains = sorted({path[depth - 1][1] for a in wl.last_assignments for path, _ in store.placement(wl, a)
                      if len(path) >= depth and path[depth - 1][1]}) if wl is not None else []
    where = f" in {', '.join(domains)}" if domains else ""
    stale_after = jobs.stale_after if jobs is not None else 0
    for v in views:
        rec = v.record
        restarting = job_state.restarting(rec)
        failed = next((c for c in rec.conditions if c.type == "Failed" and c.status == "True"), None)
        if failed is not None:
            kinds.append("failed")
            problems.append(f"{rec.kind} {rec.name} failed ({failed.reason}): {failed.message}".rstrip(": "))
        elif restarting is not None:
            kinds.append("restarting")
            problems.append(f"{rec.kind} {rec.name} restarting ({rec.restarts or 0} restarts{where}; "
                            f"{restarting.reason}: {restarting.message})".replace("; : )", ")"))
        elif (stale := job_state.progress_stale_since(rec, now, stale_after)) is not None:
            last = f", last report {_ts(rec.progress_updated)}" \
                if rec.progress_updated is not None and rec.progress_updated != stale else ""
            kinds.append("progress_stale")
            problems.append(f"{rec.kind} {rec.name} progress stale for {_duration(now - stale)} "
                            f"({job_state.progress_text(rec)} since {_ts(stale)}{last})")
        elif v.groups is not None and v.groups.not_ready and (rec.ready_replicas or 0) > v.groups.ready:
            lagging = ", ".join(f"group {g} {ok}/{size}" for g, ok, size in v.groups.partial[:4])
            kinds.append("groups_not_ready")
            problems.append(f"{rec.kind} {rec.name}: {v.groups.ready} of {rec.replicas} groups ready from their pods, "
                            f"its controller reports {rec.ready_replicas} ({lagging} pods ready)")
        else:
            bits = []
            if rec.restarts:
                bits.append(f"{rec.restarts} restarts{where}")
            if rec.progress is not None:
                bits.append(f"{rec.progress:.0%} done")
            if v.groups is not None:
                bits.append(f"{v.groups.ready}/{rec.replicas} groups ready")
            fine.append(f"{rec.kind} {rec.name}" + (f" ({', '.join(bits)})" if bits else ""))
    if problems:
        # the worst first, whichever job says it: a TrainJob's progress stands still because its
        # JobSet restarts, so the restart is the news and the stale progress its consequence
        ranked = sorted(zip(kinds, problems), key=lambda kp: JOB_PROBLEMS.index(kp[0]))
        evidence["problem"] = ranked[0][0]
        return _layer("job", "blocking", "; ".join(p for _, p in ranked), evidence)
    return _layer("job", "ok", "; ".join(fine), evidence)


def _job_dict(v: JobView) -> dict[str, Any]:
    rec = v.record
    return {
        "kind": rec.kind, "name": rec.name, "workloads": v.workloads, "running": rec.running,
        "conditions": [{"type": c.type, "status": c.status, "reason": c.reason, "message": c.message,
                        "since": _ts(c.last_transition)} for c in rec.conditions],
        "restarts": rec.restarts, "restarts_toward_max": rec.restarts_toward_max,
        "child_jobs": [{"name": c.name, "ready": c.ready, "active": c.active, "succeeded": c.succeeded,
                        "failed": c.failed, "suspended": c.suspended, "restarts": c.restarts} for c in rec.children],
        "progress": rec.progress, "progress_updated": _ts(rec.progress_updated),
        "progress_changed": _ts(rec.progress_changed), "estimated_remaining_seconds": rec.remaining_seconds,
        "groups": None if v.groups is None else {"ready": v.groups.ready, "not_ready": v.groups.not_ready,
                                                  "desired": rec.replicas, "reported_ready": rec.ready_replicas},
    }


def running_since(wl: Workload) -> float | None:
    """When the job started running: PodsReady turning True, or, where Kueue writes no PodsReady
    (no waitForPodsReady), the admission."""
    ready = wl.conditions.get("PodsReady")
    if ready is not None:
        return ready.last_transition_seconds if ready.status == "True" else None
    admitted = wl.conditions.get("Admitted")
    return admitted.last_transition_seconds if admitted is not None and admitted.status == "True" else None


def lost_node_layer(lost: Sequence[node_loss.LostNode]) -> dict[str, Any]:
    """The hardware verdict on nodes the job lost (exporter.cluster.node_loss): each node, its
    domains and the job's pods on it; the job holds those GPUs and cannot train until Kubernetes
    replaces the pods (or the node comes back)."""
    parts = []
    for n in lost:
        where = ", ".join(f"{level} {value}" for level, value in n.path if value != n.node)
        pods = ", ".join(n.pods[:4]) + (f" and {len(n.pods) - 4} more" if len(n.pods) > 4 else "")
        parts.append(f"node {n.node}{f' ({where})' if where else ''} is {n.why}, with pod{'s' if len(n.pods) > 1 else ''} {pods}")
    evidence = {"problem": "node_lost",
                "lost_nodes": [{"node": n.node, "why": n.why, "path": dict(n.path), "pods": list(n.pods)} for n in lost]}
    return _layer("interconnect", "blocking", "; ".join(parts) + ": hardware; the gang cannot train until its pods there "
                  "are replaced or the node returns", evidence)


async def interconnect_layer(wl: Workload | None, prometheus: str | None, now: float, rules: Rules | None = None) -> dict[str, Any]:
    """The job's NVLink/PCIe throughput now against its baseline, and its lagging GPUs
    (exporter.interconnect); without ``--prometheus``, the queries to run by hand."""
    from . import interconnect

    if wl is None:
        return _layer("interconnect", "unknown", "no Kueue Workload: GPU series are joined by workload name")
    start = running_since(wl)
    evidence: dict[str, Any] = {"prometheus": prometheus, "running_since": _ts(start)}
    if prometheus is None:
        evidence["queries"] = interconnect.printed_queries(wl.namespace, wl.name, start, now)
        return _layer("interconnect", "unknown",
                      "not checked: run with --prometheus URL, or run the queries below in Prometheus", evidence)
    try:
        gpus = round(sum(ps.count * ps.gpus_per_pod for ps in wl.podsets)) or None
        status, summary, found = await interconnect.assess(prometheus, wl.namespace, wl.name, start, now, gpus=gpus, rules=rules)
    except interconnect.PrometheusError as exc:  # say so, keep the rest of the diagnosis
        evidence.update(error=str(exc), failed_query=exc.query)
        return _layer("interconnect", "unknown", f"Prometheus query failed: {exc}", evidence)
    evidence.update(found)
    return _layer("interconnect", status, summary, evidence)


async def diagnose(store: ClusterStore, gangs: GangIndex, namespace: str, name: str, *,
                   prometheus: str | None = None, now: float | None = None,
                   rules: Rules | None = None) -> dict[str, Any]:
    """The explain document (schema in docs/explain.md); raises :class:`UnknownTarget`."""
    now = time.time() if now is None else now
    how, wl, wl_gangs = resolve(store, gangs, namespace, name)
    position = store.queue_positions.get(wl.key) if wl is not None else None
    finished = wl is not None and wl.stage == "finished"
    fits = store.capacity.workload_fit(wl) if wl is not None and in_queue(wl.state) else None
    gated = topology_gated(wl, wl_gangs, gangs)
    holding = holding_layer(wl, [g.stage for g in wl_gangs], bool(gated))
    layers: list[dict[str, Any]] = []
    blocked: dict[str, Any] | None = None
    for layer_name in LAYERS:
        # a degraded interconnect does not keep the training layer from saying whether the job slowed down, and why
        slow_too = layer_name == "training" and blocked is not None and blocked["name"] == "interconnect"
        if (blocked is not None and not slow_too) or (finished and layers):
            why = "job finished" if finished else f"not checked: {blocked['name'] if blocked else ''} holds the job back"
            layers.append(_layer(layer_name, "not_reached", why))
            continue
        if layer_name == "admission":
            queue = store.cluster_queues.get(wl.cluster_queue) if wl is not None else None
            layer = admission_layer(wl, position, fits, queue, cohort_tree(store, queue))
        elif layer_name == "placement":
            layer = placement_layer(wl, fits, (lambda a: store.placement(wl, a)) if wl is not None else None, gated)
        elif layer_name == "assembly":
            layer = assembly_layer(wl, wl_gangs, now, gangs)
        elif layer_name == "interconnect":
            lost = node_loss.lost_nodes(gangs.workload_pods(wl), store.capacity.node_health) if wl is not None else []
            layer = lost_node_layer(lost) if lost else await interconnect_layer(wl, prometheus, now, rules)
        elif layer_name == "training":
            layer = await _training(wl, prometheus, now, rules)
        else:
            layer = job_layer(wl, store, gangs.jobs, now)
        if layer_name in CLUSTER_LAYERS and (layer["status"] == "blocking") != (layer_name == holding):
            # the judgement (exporter.cluster.holding) decides; a layer's text that says otherwise is a bug of ours
            log.warning("explain_layer_disagrees", layer=layer_name, status=layer["status"], holding=holding,
                        workload=f"{namespace}/{name}")
            layer["status"] = "blocking" if layer_name == holding else ("ok" if layer["status"] == "blocking" else layer["status"])
        layers.append(layer)
        if layer["status"] == "blocking" and (blocked is None or slow_too):
            blocked = layer
    if finished:
        verdict = {"status": "finished", "layer": None, "summary": layers[0]["summary"]}
    elif blocked is not None:
        problem = blocked["evidence"].get("problem")
        slow = (blocked["name"] in ("interconnect", "training") and problem != "node_lost") or problem == "progress_stale"
        verdict = {"status": "slow" if slow else "held", "layer": blocked["name"], "summary": blocked["summary"]}
    elif failed := [l for l in layers if l["evidence"].get("error")]:
        # a Prometheus that was asked and did not answer: no healthy verdict that was not computed
        verdict = {"status": "unknown", "layer": None, "summary": "admitted, placed and assembled; "
                   + "; ".join(f"{l['name']} {l['summary']}" for l in failed)}
    elif all(l["status"] == "ok" for l in layers):
        verdict = {"status": "running", "layer": None, "summary": "every layer is healthy"}
    elif all(l["status"] == "ok" for l in layers if l["name"] not in ("interconnect", "training")):
        verdict = {"status": "running", "layer": None,
                   "summary": "admitted, placed and assembled; " + "; ".join(
                       f"{l['name']} {l['summary']}" for l in layers if l["name"] in ("training", "interconnect") and l["status"] != "ok")}
    else:
        verdict = {"status": "unknown", "layer": None,
                   "summary": "nothing found holding the job back; some layers could not be checked"}
    owner = wl.owner if wl is not None else None
    return {
        "schema": SCHEMA,
        "generated_at": _ts(now),
        "target": {"namespace": namespace, "name": name, "resolved_as": how},
        "workload": None if wl is None else {
            "namespace": wl.namespace, "name": wl.name, "stage": wl.stage,
            "owner_kind": owner.kind if owner else None, "owner_name": owner.name if owner else None,
        },
        "verdict": verdict,
        "layers": layers,
    }


def topology_gated(wl: Workload | None, wl_gangs: Sequence[Gang], index: GangIndex) -> list[str]:
    """The gangs in stage ``placing`` (their pods carry Kueue's topology gate), else, where no
    PodGroup is joined, the Workload's live pods that carry it."""
    placing = [f"PodGroup {g.podgroup.name}" for g in wl_gangs if g.stage == "placing"]
    if placing or wl is None or wl_gangs:
        return placing
    return [f"pod {p.name}" for p in sorted(index.workload_pods(wl), key=lambda p: p.name)
            if any(gate in PLACEMENT_GATES for gate in p.gates)]


async def _training(wl: Workload | None, prometheus: str | None, now: float, rules: Rules | None) -> dict[str, Any]:
    """The training layer (exporter.training_layer) of a Workload: its own throughput against its
    previous hour, and whether a slowdown is scheduling, hardware or the job itself."""
    if wl is None:
        return {"name": "training", "status": "unknown", "summary": "no Kueue Workload: throughput is joined by workload name",
                "evidence": {}}
    return await training_layer(wl.namespace, wl.name, wl.stage == "running", prometheus, now, rules)


# ---- rendering ---------------------------------------------------------------------------------

_COLOURS = {"ok": "32", "blocking": "31;1", "unknown": "33", "not_reached": "2"}


def render_text(doc: dict[str, Any], colour: bool, columns: int = 100) -> str:
    """Short and aligned: a header, the verdict, one row per layer, summaries wrapped to ``columns``."""
    def paint(text: str, code: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if colour else text

    wl = doc["workload"]
    head = f"{doc['target']['namespace']}/{doc['target']['name']}"
    if wl is not None:
        owner = f", {wl['owner_kind']} {wl['owner_name']}" if wl["owner_kind"] else ""
        head += f"  (Workload {wl['name']}{owner}; stage {wl['stage']})"
    v = doc["verdict"]
    verdict = {"held": f"held at {str(v['layer']).upper()}", "slow": f"running but SLOW ({v['layer']})",
               "running": "running", "finished": "finished", "unknown": "nothing found holding it back"}[v["status"]]
    lines = [head, f"verdict: {paint(verdict, '31;1' if v['status'] in ('held', 'slow') else '32')}", ""]
    width = max(len(n) for n in LAYERS) + 2
    swidth = max(len(s) for s in _COLOURS) + 2
    indent = " " * (2 + width + swidth)
    wrap = max(40, columns - len(indent))
    for layer in doc["layers"]:
        status = layer["status"].replace("_", " ")
        pad = " " * (swidth - len(status))
        summary = wrap_prose(layer["summary"], wrap)
        lines.append(f"  {layer['name']:<{width}}{paint(status.upper() if layer['status'] == 'blocking' else status, _COLOURS[layer['status']])}{pad}{summary[0]}")
        lines.extend(indent + rest for rest in summary[1:])
        if layer["name"] == "interconnect":
            from .interconnect import shown_queries

            queries = shown_queries(layer["evidence"])
            for what, query in queries:  # one line each, never wrapped: they are pasted (# starts a PromQL comment)
                lines.extend(["", f"# {what}: bytes/s per GPU" if what != "the refused query" else f"# {what}", query])
            if queries:
                lines.append("")
        if layer["status"] == "blocking" and layer["name"] == "placement":
            for a in layer["evidence"].get("assignments", []):
                for alias, values in a["by_level"].items():
                    shown = ", ".join(f"{k or '?'}:{n}" for k, n in list(values.items())[:8])
                    more = f" (+{len(values) - 8} more)" if len(values) > 8 else ""
                    lines.append(f"{indent}{a['podset']} {alias}: {shown}{more}")
    return "\n".join(lines) + "\n"


def wrap_prose(text: str, width: int) -> list[str]:
    """``text`` wrapped at spaces only: a word longer than the line (a metric name, a URL, a
    selector) overflows rather than being cut, so that it can still be copied."""
    return textwrap.wrap(text, width, break_on_hyphens=False, break_long_words=False) or [""]


# ---- the command ---------------------------------------------------------------------------------

def _build(args: argparse.Namespace) -> tuple[ClusterStore, GangIndex, dict[str, Any]]:
    from .cluster.collector import collector_from_args
    from .exposition import Exposition

    store, handlers, gangs = collector_from_args(Exposition(), args)
    return store, gangs, handlers


# Hostnames per node LIST: a label selector of a few thousand characters stays well within what
# API servers and proxies accept in a URL.
NODE_SELECTOR_CHUNK = 100
NODE_GETS_AT_ONCE = 16


async def _load_live(args: argparse.Namespace, store: ClusterStore, gangs: GangIndex, handlers: dict[str, Any],
                     namespace: str, name: str) -> None:
    """Read what the diagnosis of one job needs, and only that, so that a user whose RBAC covers
    one namespace can use it: the namespace's Workloads, LocalQueues and PodGroups (every API),
    the cluster's few Topologies and ResourceFlavors (down when forbidden, like any source), then
    the Nodes the Workload's assignment and unhealthy list name (for the block and rack of each
    host; without the right to read Nodes the placement shows hosts only), every Node and Workload
    for a waiting Workload with a topology request (its fit, :func:`_load_capacity`), and Kueue's
    visibility API for a pending Workload's queue position (left out when not served or forbidden)."""
    from .cluster.queue_positions import DEFAULT_LIMIT, fetch_local_positions, fetch_positions
    from .kube.client import ApiError, Forbidden, KubeClient
    from .kube.discovery import served_version
    from .cluster.collector import source_specs
    from .kube.resources import NODES, QUEUE_POSITIONS

    client = await KubeClient.create(args.kubeconfig, args.context, args.insecure_skip_tls_verify)
    client.reachability.quiet = True  # an unreachable API server is the command's one error line (run)
    try:
        await _list_once(args, client, source_specs(args, handlers, namespace=namespace, exclude=(NODES.source,)))
        try:
            _, wl, _ = resolve(store, gangs, namespace, name)
        except UnknownTarget:
            return
        if wl is None:
            return
        await _load_nodes(client, wl, handlers[NODES.source], sorted({p.node for p in gangs.workload_pods(wl) if p.bound}))
        if in_queue(wl.state) and any(ps.topology is not None for ps in wl.podsets):
            await _load_capacity(args, client, store, handlers)
            _, wl, _ = resolve(store, gangs, namespace, name)  # the Workload as the cluster-wide list has it
            if wl is None:
                return
        if not wl.cluster_queue or wl.state is None or wl.state.pending is None:
            return
        try:  # optional: not served or forbidden leaves the position out
            version = await served_version(client, QUEUE_POSITIONS)
            found = await fetch_positions(client, version, wl.cluster_queue, DEFAULT_LIMIT, time.time()) if version else None
        except Forbidden:  # a user with rights in the namespace only: its LocalQueue's endpoint
            try:
                found = await fetch_local_positions(client, version, wl.namespace, wl.queue_name, wl.cluster_queue,
                                                    DEFAULT_LIMIT, time.time()) if version else None
            except ApiError:
                return
        except ApiError:
            return
        if found is not None and wl.key in found[0]:
            store.queue_positions[wl.key] = found[0][wl.key]
    finally:
        await client.close()


async def _list_once(args: argparse.Namespace, client: Any, specs: list[Any]) -> Any:
    """List the sources of ``specs`` into their handlers once (no watch kept); the SourceSet,
    whose health says which could not be read."""
    from .exposition import Exposition
    from .kube.sources import SourceSet

    sources = SourceSet(client, specs, Exposition(), discovery_interval=args.discovery_interval)
    await sources.start()
    try:
        async with asyncio.timeout(args.sync_timeout):
            while not sources.ready()[0]:
                # A connection that fails as such (refused: nothing listens; no such host; a
                # certificate refused) is the answer: the sources' retries until --sync-timeout
                # would only print the same line 30 s later. A slow server connects, and waits.
                if client.reachability.failing:
                    raise RuntimeError(client.reachability.failing)
                await asyncio.sleep(0.02)
    except TimeoutError:  # say why, once: an unreachable API server reads the same for every source
        raise RuntimeError(client.reachability.failing or
                           f"not within --sync-timeout {args.sync_timeout:g}s: {sources.ready()[1]}") from None
    finally:
        await sources.stop()
    return sources


async def _load_capacity(args: argparse.Namespace, client: Any, store: ClusterStore, handlers: dict[str, Any]) -> None:
    """Every Node and every Workload of the cluster, for the placement layer's fit of a waiting
    Workload with a topology request: free GPUs per domain are the Nodes' capacity minus every
    Workload's usage (exporter.cluster.capacity). A user who may not list them cluster-wide gets
    the layer without the numbers, and a note saying why."""
    from .cluster.collector import source_specs
    from .kube.resources import NODES, WORKLOADS

    specs = [spec for spec in source_specs(args, handlers) if spec.resource.source in (NODES.source, WORKLOADS.source)]
    sources = await _list_once(args, client, specs)
    down = [name for name, state in sources.sources.items() if not state.health.up]
    if down:
        store.capacity.set_shards(0, 1, every_namespace=False)  # some usage unseen: no fit rather than a wrong one
        print(f"gangscope explain: {' and '.join(down)} not readable cluster-wide; the placement layer cannot say "
              "whether the job fits the free GPUs", file=sys.stderr)


async def _load_nodes(client: Any, wl: Workload, handler: Any, pod_nodes: Sequence[str] = ()) -> None:
    """The Nodes of ``wl``'s assignments (by their ``kubernetes.io/hostname`` label, the value
    Kueue stores) and of its unhealthy list (by name, as Kueue stores them), metadata only; the
    Nodes its bound pods run on (``pod_nodes``) whole, for their Ready condition and taints
    (exporter.cluster.node_loss): what the dump of the offline mode gives for them."""
    from .kube.client import ApiError
    from .kube.informer import PARTIAL_LIST_ACCEPT
    from .topology import HOSTNAME_LABEL

    hosts = sorted({d.values[a.levels.index(HOSTNAME_LABEL)] for a in wl.last_assignments
                    if HOSTNAME_LABEL in a.levels for d in a.domains} - {""})
    queries = [{"labelSelector": f"{HOSTNAME_LABEL} in ({','.join(hosts[i:i + NODE_SELECTOR_CHUNK])})"}
               for i in range(0, len(hosts), NODE_SELECTOR_CHUNK)]
    queries += [{"fieldSelector": f"metadata.name={n}"} for n in sorted(set(wl.unhealthy_nodes))]
    nodes: dict[str, Any] = {}

    def keep(page: dict[str, Any]) -> None:
        for obj in page.get("items") or []:  # "items": null when none matches
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            if isinstance(meta, dict) and isinstance(meta.get("name"), str):
                nodes[meta["name"]] = obj  # a whole object read later replaces a metadata-only one

    try:
        for query in queries:
            keep(await client.get_json("/api/v1/nodes", query, accept=PARTIAL_LIST_ACCEPT))
    except ApiError as exc:  # forbidden (a namespace-scoped user) or unreachable: hosts only
        print(f"gangscope explain: nodes not read ({exc}); placement shows hosts without their topology",
              file=sys.stderr)
        return
    try:
        for i in range(0, len(pod_nodes), NODE_GETS_AT_ONCE):  # a field selector names one node
            for page in await asyncio.gather(*(client.get_json("/api/v1/nodes", {"fieldSelector": f"metadata.name={name}"})
                                               for name in pod_nodes[i:i + NODE_GETS_AT_ONCE])):
                keep(page)
    except ApiError as exc:  # metadata may be listed where whole objects are not: no node health then
        print(f"gangscope explain: the job's nodes not read whole ({exc}); lost nodes are not checked", file=sys.stderr)
    handler.replace(list(nodes.values()))


def run(args: argparse.Namespace) -> int:
    from .logs import start_logging

    start_logging("explain", args, args.log_level)
    namespace, sep, name = args.target.partition("/")
    if not sep or not namespace or not name:
        print(f"gangscope explain: want NAMESPACE/NAME, got {args.target!r}", file=sys.stderr)
        return 2
    store, gangs, handlers = _build(args)
    unread = ""
    # A dump or a namespace holds much besides the job asked about: by default (warning) its
    # unreadable documents, ignored kinds and objects that do not parse are not this question's
    # business (a dump's are counted for the case that the job is not found); --log-level info
    # prints each. What stops the answer (an unreachable API server) is the command's error.
    quiet = args.log_level in ("warning", "error")
    from .logs import setup_logging

    if args.from_file is not None:
        from .loader import feed, load_reporting

        loaded = load_reporting(args.from_file, "gangscope explain", quiet=quiet)
        if loaded is None:
            return 1
        if quiet:
            setup_logging("error")
        try:
            fed = feed(store.exposition, handlers, loaded.objects, "gangscope explain", quiet=quiet)
        finally:
            if quiet:
                setup_logging(args.log_level)
        skipped = len(loaded.problems) + fed.parse_errors
        if skipped:
            unread = f" ({skipped} object(s) of the dump could not be read; --log-level info lists them)"
    else:
        if quiet:
            setup_logging("error")
        try:
            asyncio.run(_load_live(args, store, gangs, handlers, namespace, name))
        except Exception as exc:
            print(f"gangscope explain: cannot read the cluster: {exc}", file=sys.stderr)
            return 1
        finally:
            if quiet:
                setup_logging(args.log_level)
    try:
        rules = Rules.load(args.rules)
        Windows.of(rules)
    except (OSError, ValueError, KeyError, TypeError, yaml.YAMLError) as exc:
        print(f"gangscope explain: --rules {' '.join(map(str, args.rules))}: not gangscope's Prometheus rules "
              f"({type(exc).__name__}: {exc})", file=sys.stderr)
        return 2
    try:
        doc = asyncio.run(diagnose(store, gangs, namespace, name, prometheus=args.prometheus,
                                   rules=rules))
    except UnknownTarget as exc:
        print(f"gangscope explain: {exc}{unread}", file=sys.stderr)
        return 1
    if args.output == "json":
        sys.stdout.buffer.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        tty = sys.stdout.isatty()
        sys.stdout.write(render_text(doc, colour=tty, columns=shutil.get_terminal_size().columns if tty else 100))
    sys.stdout.flush()
    errors = sorted({l["evidence"]["error"] for l in doc["layers"] if l["evidence"].get("error")})
    for error in errors:  # what was asked for could not be checked: say it once, exit non-zero
        print(f"gangscope explain: {error}", file=sys.stderr)
    return 1 if errors else 0


EXPLAIN_ROUTE = "/debug/explain?namespace=NAMESPACE&name=NAME"


def explain_route(store: ClusterStore, gangs: GangIndex, prometheus: str | None = None) -> Any:
    """``GET /debug/explain?namespace=&name=`` for the collector: the same JSON as the command,
    indented for a browser (``Accept: text/html``) or with ``&pretty``, compact otherwise.

    It reveals a namespace's Workloads (Kueue's messages, nodes, queues, owners), so with
    ``--metrics-auth`` the caller must also be allowed to ``get`` Workloads in that namespace
    (a SubjectAccessReview, as ``kubectl get workloads -n NAMESPACE`` would need)."""
    from aiohttp import web

    from .auth import Attributes, authorize

    async def handler(request: web.Request) -> web.Response:
        namespace, name = request.query.get("namespace", ""), request.query.get("name", "")
        if not namespace or not name:
            return web.json_response({"error": "namespace and name query parameters are required"}, status=400)
        refused = await authorize(request, Attributes("get", group="kueue.x-k8s.io", resource="workloads", namespace=namespace))
        if refused is not None:
            return refused
        try:
            doc = await diagnose(store, gangs, namespace, name, prometheus=prometheus)
        except UnknownTarget as exc:
            return web.json_response({"error": str(exc)}, status=404)
        pretty = "pretty" in request.query or "text/html" in request.headers.get("Accept", "")
        body = orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n" if pretty else orjson.dumps(doc)
        return web.Response(body=body, content_type="application/json")

    return web.get("/debug/explain", handler)
