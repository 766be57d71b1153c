"""Whether a waiting Workload's topology request fits now, for its own ClusterQueue's flavors,
and what to say when that differs from Kueue's last word: pure functions of records.

The placement itself is :mod:`.tas_fit` (Kueue's algorithm, ported). This module decides which
flavors it runs in and reads the result:

* the flavors are the Workload's ClusterQueue's, in the order of its ``spec.resourceGroups``
  (kueue ff69552e pkg/scheduler/flavorassigner/flavorassigner.go:1088-1095 tries them in turn),
  keeping those whose Topology has every level the pod sets name
  (tas_flavorassigner.go:175-217 ``checkPodSetAndFlavorMatchForTAS``, ``HasLevel``); a queue gangscope
  does not know gives no verdict, never a guess;
* pod sets without a topology request are placed only when every flavor of the queue is a TAS
  flavor (``isTASImplied``, tas_flavorassigner.go:241-249), else they take no topology room;
* ``domain`` is Kueue's own question (every pod set placed as requested, in one flavor, in turn
  with assumed usage); ``cluster`` asks the same with each level dropped (unconstrained): a
  ``required`` request that fails in ``domain`` but passes in ``cluster`` is fragmentation;
* not modelled, so no verdict: a Workload with ``unhealthyNodes`` (Kueue looks for a replacement,
  tas_flavor_snapshot.go:607-640), a replacement slice of an elastic Workload
  (``kueue.x-k8s.io/workload-slice-replacement-for``), pod sets that fit no single flavor while the
  queue has several (Kueue may give each its own flavor), a queue with no TAS flavor known, a
  flavor whose Topology's lowest level is not the hostname (its usage is kept per domain).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from ..topology import HOSTNAME_LABEL
from .tas_fit import FitFlavor, FitPodSet, FlavorSnapshot, PodSetPlacement

# The failure messages of Kueue's placement (tas_flavor_snapshot.go:1342 "no topology domains at
# level", :2006-2011 notFitMessage, :2037 multiLayerNotFitMessage): a legacy ``Pending`` reason
# carrying one of them is the typed ``TopologyPlacementFailed``.
TOPOLOGY_PHRASES = ("doesn't allow to fit", "allows to fit only", "no topology domains at level")
PLACEMENT_REASON = "TopologyPlacementFailed"


def is_topological(reason: str, message: str) -> bool:
    """Whether Kueue's ``QuotaReserved=False`` reason says the topology request did not fit."""
    return reason == PLACEMENT_REASON or (reason == "Pending" and any(p in message for p in TOPOLOGY_PHRASES))


@dataclass(frozen=True, slots=True)
class Verdict:
    """The fit of one Workload. ``known`` False: no claim (``why`` says what is not modelled)."""

    known: bool
    domain: bool = False  # placed as requested (Kueue's own answer)
    cluster: bool = False  # placed with every level dropped
    flavor: str = ""  # the flavor it was placed in, else the first one tried
    blocked_level: str = ""  # the required level that fragmentation blocks ("" when not fragmented)
    placements: tuple[tuple[str, PodSetPlacement], ...] = ()  # per pod set, in that flavor
    why: str = ""
    disagrees: bool = False  # the model places it, Kueue's last attempt did not


def relaxed(ps: FitPodSet) -> FitPodSet:
    """The pod set with its level dropped: anywhere in the flavor will do."""
    return replace(ps, required="", preferred="", unconstrained=True, slices=(), group="")


def workload_verdict(podsets: Sequence[FitPodSet], queue_flavors: Sequence[str] | None,
                     flavors: Mapping[str, FitFlavor], snapshot: Callable[[FitFlavor], FlavorSnapshot]) -> Verdict:
    """The verdict for these pod sets (``implied`` set as the queue makes it) in the queue's flavors.

    ``snapshot`` gives each flavor's free capacity (the caller builds one per flavor and state of
    the cluster and shares it between Workloads: :meth:`FlavorSnapshot.place` leaves it as it was).
    """
    if queue_flavors is None:
        return Verdict(False, why="its ClusterQueue is not known")
    tas = [flavors[f] for f in queue_flavors if f in flavors]
    if not tas:
        return Verdict(False, why="no TAS flavor of its ClusterQueue is known")
    if any(f.levels[-1] != HOSTNAME_LABEL for f in tas):
        # Kueue keeps such a flavor's usage per lowest domain (tas_flavor.go:283-306); gangscope
        # keeps the admitted Workloads' usage per host only.
        return Verdict(False, why="a flavor of its ClusterQueue has a Topology whose lowest level is not the hostname")
    tried: list[tuple[FitFlavor, dict[str, PodSetPlacement]]] = []
    for flavor in tas:
        snap = snapshot(flavor)
        if not all(snap.has_level(ps) for ps in podsets):
            continue  # "Flavor %q does not contain the requested level" (tas_flavorassigner.go:207-210)
        result = snap.place(podsets)
        tried.append((flavor, result))
        if all(ps.name in result and not result[ps.name].reason for ps in podsets):
            return Verdict(True, True, True, flavor.name, "", tuple((ps.name, result[ps.name]) for ps in podsets))
    if not tried:
        return Verdict(False, why="no flavor of its ClusterQueue has the requested levels")
    if len(podsets) > 1 and len(tried) > 1:
        return Verdict(False, why="its pod sets may be given different flavors, which is not modelled")
    flavor, result = tried[0]
    loose = [relaxed(ps) for ps in podsets]
    cluster = False
    for f, _ in tried:
        loose_result = snapshot(f).place(loose)
        if all(ps.name in loose_result and not loose_result[ps.name].reason for ps in loose):
            cluster = True
            break
    blocked = ""
    if cluster:
        blocked = next((ps.required for ps in podsets if ps.required and result.get(ps.name, PodSetPlacement()).reason), "")
    return Verdict(True, False, cluster, flavor.name, blocked, tuple((ps.name, result.get(ps.name, PodSetPlacement()))
                                                                     for ps in podsets))


def against_kueue(verdict: Verdict, kueue_failed_at: float | None) -> Verdict:
    """Never say the opposite of Kueue: when Kueue's last attempt (its ``QuotaReserved=False``
    condition, topological, failing since ``kueue_failed_at``) found no placement and the model
    finds one, the fit is unknown. Kueue tries again as soon as capacity of the ClusterQueue or its
    cohort is freed: deleting or finishing an admitted Workload requeues the inadmissible ones
    (kueue v0.19.2 pkg/controller/core/workload_controller.go, ``Delete`` and the finish path, via
    pkg/cache/queue/manager.go ``QueueAssociatedInadmissibleWorkloadsAfter``), so a difference that
    lasts is something gangscope does not see (pods it does not watch, a node replacement, a gate).
    A judgement of the objects alone: the same in a dump, in explain's own LIST and in a collector
    that has watched for hours (which once trusted the model after seeing capacity freed, and so
    answered otherwise than explain on the same objects)."""
    if not verdict.known or not verdict.domain or kueue_failed_at is None:
        return verdict
    return Verdict(False, flavor=verdict.flavor, placements=verdict.placements, disagrees=True,
                   why="Kueue's last attempt found no placement where gangscope's model finds one")


def _ts(t: float | None) -> str:
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ") if t is not None else "?"


def _placed(p: PodSetPlacement) -> str:
    pods = sum(n for _, n in p.domains)
    where = p.levels[0].rsplit("/", 1)[-1] if p.levels else "domain"
    return f"{pods} pods on {len(p.domains)} {where}{'s' if len(p.domains) != 1 else ''}"


def fit_text(v: Verdict, kueue_failed_at: float | None) -> str:
    """explain's sentence for a verdict, beside Kueue's own message (never its opposite without saying why)."""
    if not v.known:
        if v.disagrees:
            return (f"gangscope's model of Kueue's placement would place it now (flavor {v.flavor}), but Kueue's last "
                    f"attempt (failing since {_ts(kueue_failed_at)}) found no placement. Kueue tries again as soon as "
                    "capacity is freed, so if this lasts Kueue counts something gangscope does not see (pods outside "
                    "gangscope's watch, for one); fit unknown")
        return f"fit unknown: {v.why}"
    if v.domain:
        return f"gangscope's model places it now in flavor {v.flavor}: " + "; ".join(
            f"{name} {_placed(p)}" for name, p in v.placements)
    reasons = "; ".join(f"{name}: {p.reason}" for name, p in v.placements if p.reason)
    if v.cluster:
        return f"no single domain fits ({reasons}), but the flavor {v.flavor} would hold it with the level dropped: fragmented"
    return f"does not fit now in flavor {v.flavor}: {reasons}"


def fit_evidence(v: Verdict) -> dict[str, Any]:
    """explain's JSON for a verdict."""
    return {
        "known": v.known, "fits_as_requested": v.domain if v.known else None, "fits_with_levels_dropped": v.cluster if v.known else None,
        "flavor": v.flavor or None, "fragmented_level": v.blocked_level or None, "unknown_because": v.why or None,
        "kueue_disagrees": v.disagrees,
        "podsets": [{"podset": name, "levels": list(p.levels), "domains": [{"values": list(d), "pods": n} for d, n in p.domains],
                     "reason": p.reason or None} for name, p in v.placements],
    }
