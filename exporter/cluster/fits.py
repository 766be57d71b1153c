"""The waiting Workloads' fits and the fragmentation count: records kept, verdicts rendered.

For each Workload waiting for admission whose pod sets ask for a topology, this keeps what its
fit depends on (the pod sets as :class:`.tas_fit.FitPodSet`, its ClusterQueue, Kueue's last
topological failure) and, when the cluster or the Workload changed, asks
:func:`.workload_fit.workload_verdict` and :func:`.workload_fit.against_kueue` again. Pod sets
that ask the same in the same queue get the same answer (one placement per distinct shape and
state of the cluster: the benchmark cluster's 2,000 waiting Workloads have a few dozen shapes).

Series: ``gangscope_workload_fit`` (2 per waiting Workload with a verdict: scope ``domain`` and
``cluster``; none while the verdict is unknown) and ``gangscope_fragmentation_blocked_workloads``
(one per ClusterQueue and level with a blocked Workload). A Workload counts as blocked by
fragmentation only when Kueue's own reason is topological (:func:`.workload_fit.is_topological`),
never while it waits for quota.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exposition import Exposition, Family
from .tas_fit import FitFlavor, FitPodSet, FlavorSnapshot
from .workload_fit import Verdict, against_kueue, fit_evidence, fit_text, is_topological, workload_verdict
from .workload_state import in_queue

if TYPE_CHECKING:
    from .workloads import PodSet, Workload

WorkloadKey = tuple[str, str]

WORKLOAD_FIT = Family(
    "gangscope_workload_fit", "gauge",
    "Whether Kueue's topology placement, computed by gangscope for the waiting Workload's own ClusterQueue's flavors "
    "with every resource it requests, would place it now (1) or not (0): as requested (scope domain), or with its levels "
    "dropped (scope cluster). Absent while gangscope cannot know (see the README's capacity section).",
    ("namespace", "workload", "scope"),
)
FRAGMENTATION_BLOCKED = Family(
    "gangscope_fragmentation_blocked_workloads", "gauge",
    "Waiting Workloads whose Kueue reason is a topology placement failure, with a required level that the cluster's "
    "free capacity could hold with the level dropped but no single domain of that level can.",
    ("cluster_queue", "level"),
)
FAMILIES = (WORKLOAD_FIT, FRAGMENTATION_BLOCKED)
_BLOCKED_OWNER = ("capacity_fragmentation",)


def fit_podset(ps: PodSet, implied: bool) -> FitPodSet | None:
    """The pod set as the placement reads it; None when it takes no topology room (no request,
    and the queue is not TAS-only) or no pods."""
    tr = ps.topology
    if ps.count <= 0 or (tr is None and not implied):
        return None
    if tr is not None and not (tr.mode or tr.slices):
        return None  # a request naming nothing Kueue places by (only index labels, say)
    return FitPodSet(
        ps.name, ps.count, ps.requests,
        required=tr.required if tr else "", preferred=tr.preferred if tr else "",
        unconstrained=tr.unconstrained if tr else False, slices=tr.slices if tr else (), group=tr.group if tr else "",
        implied=tr is None, tolerations=ps.tolerations, node_selector=ps.node_selector, affinity=ps.affinity)


def _shape(ps: FitPodSet) -> tuple[Any, ...]:
    """What a pod set's placement depends on, hashable (its maps as sorted items)."""
    return (ps.name, ps.count, tuple(sorted(ps.requests.items())), ps.required, ps.preferred, ps.unconstrained, ps.slices,
            ps.group, ps.implied, ps.tolerations, tuple(sorted(ps.node_selector.items())), ps.affinity)


@dataclass(frozen=True, slots=True)
class FitReport:
    verdict: Verdict
    text: str
    evidence: dict[str, Any]


@dataclass(slots=True)
class _Waiting:
    cluster_queue: str
    podsets: tuple[PodSet, ...]
    unknown: str  # what is not modelled for it ("" when it can be evaluated)
    kueue_failed_at: float | None  # lastTransitionTime of a topological QuotaReserved=False
    topological: bool
    verdict: Verdict | None = None


def _kueue_failure(wl: Workload) -> tuple[bool, float | None]:
    qr = wl.conditions.get("QuotaReserved")
    if qr is None or qr.status != "False" or not is_topological(qr.reason, qr.message):
        return False, None
    # without a time, no change can be known to be later than Kueue's attempt
    return True, qr.last_transition_seconds if qr.last_transition_seconds is not None else float("inf")


class Fits:
    """The fits of the waiting Workloads of one collector (see module doc). The owner
    (:class:`.capacity.Capacity`) feeds it Workloads (:meth:`note`) and, at each flush, the state
    of the cluster (:meth:`evaluate`)."""

    def __init__(self, exposition: Exposition, alias: Callable[[str], str | None]) -> None:
        self.exposition = exposition
        exposition.register(*FAMILIES)
        self._alias = alias
        self._waiting: dict[WorkloadKey, _Waiting] = {}
        self._dirty: set[WorkloadKey] = set()
        self._blocked_dirty = False

    def note(self, key: WorkloadKey, wl: Workload | None) -> None:
        """A Workload was put or deleted: keep it while it waits with a topology request."""
        entry = None
        # Every Workload in its queue: one without a topology request is placed by TAS too when its
        # ClusterQueue has only TAS flavors (isTASImplied, tas_flavorassigner.go:241-249).
        if wl is not None and in_queue(wl.state) and wl.podsets:
            unknown = ""
            if wl.unhealthy_nodes:
                unknown = "it has unhealthy nodes, for which Kueue looks for a replacement"
            elif any(ps.min_count is not None and ps.min_count < ps.count for ps in wl.podsets):
                unknown = "Kueue may admit fewer pods (minCount, partial admission), which is not modelled"
            elif wl.replaces_slice:
                unknown = "it replaces a slice of an elastic Workload"
            topological, failed_at = _kueue_failure(wl)
            entry = _Waiting(wl.cluster_queue, tuple(wl.podsets), unknown, failed_at, topological)
        old = self._waiting.pop(key, None)
        if entry is not None:
            self._waiting[key] = entry
            self._dirty.add(key)
        elif old is not None:
            self.exposition.delete(("capacity_workload_fit", *key))
            self._blocked_dirty |= bool(old.verdict is not None and old.verdict.blocked_level and old.topological)

    def queue_changed(self, cluster_queue: str) -> None:
        """A ClusterQueue came, went or changed its flavors: its waiting Workloads' verdicts are
        asked again (a queue that arrives after its Workloads, in a dump or live, gives them a fit)."""
        self._dirty.update(k for k, w in self._waiting.items() if w.cluster_queue == cluster_queue)

    def forget_all(self) -> None:
        """This collector no longer sees every Workload (a shard): no fit at all."""
        for key in self._waiting:
            self.exposition.delete(("capacity_workload_fit", *key))
            self._waiting[key].verdict = None
        self.exposition.delete(_BLOCKED_OWNER)

    def evaluate(self, cluster_changed: bool, queue_flavors: Callable[[str], tuple[str, ...] | None],
                 flavors: Mapping[str, FitFlavor], snapshot: Callable[[FitFlavor], FlavorSnapshot],
                 nodes_known: bool = True) -> None:
        """Verdicts for the Workloads that changed, or all when the cluster did; render them.
        ``nodes_known``: some Node is known. With none (a dump without Nodes, a Nodes source not
        listed or forbidden) every fit is unknown, never "does not fit": no Node is no evidence."""
        keys = list(self._waiting) if cluster_changed else [k for k in self._dirty if k in self._waiting]
        self._dirty.clear()
        memo: dict[Any, Verdict] = {}
        for key in keys:
            w = self._waiting[key]
            verdict = (self._verdict(w, queue_flavors, flavors, snapshot, memo) if nodes_known else
                       Verdict(False, why="no Node is known (a dump without Nodes, or Nodes not readable)"))
            if verdict != w.verdict:
                was_blocked = w.verdict is not None and bool(w.verdict.blocked_level) and w.topological
                w.verdict = verdict
                self._blocked_dirty |= was_blocked != (bool(verdict.blocked_level) and w.topological)
                self._render(key, verdict)
        if self._blocked_dirty:
            self._blocked_dirty = False
            self._render_blocked()

    @property
    def pending(self) -> bool:
        """Workloads noted since the last evaluation, or a fragmentation count to render."""
        return bool(self._dirty) or self._blocked_dirty

    def report(self, key: WorkloadKey) -> FitReport | None:
        """explain's view of one Workload's fit (None: it is not waiting with a topology request)."""
        w = self._waiting.get(key)
        if w is None or w.verdict is None or (not w.verdict.known and all(ps.topology is None for ps in w.podsets)):
            return None  # nothing topological to say of a Workload without a topology request
        return FitReport(w.verdict, fit_text(w.verdict, w.kueue_failed_at), fit_evidence(w.verdict))

    def _verdict(self, w: _Waiting, queue_flavors: Callable[[str], tuple[str, ...] | None],
                 flavors: Mapping[str, FitFlavor], snapshot: Callable[[FitFlavor], FlavorSnapshot],
                 memo: dict[Any, Verdict]) -> Verdict:
        if w.unknown:
            return Verdict(False, why=w.unknown)
        qf = queue_flavors(w.cluster_queue) if w.cluster_queue else None
        implied = qf is not None and bool(qf) and all(f in flavors for f in qf)
        podsets = tuple(p for p in (fit_podset(ps, implied) for ps in w.podsets) if p is not None)
        if not podsets:
            return Verdict(False, why="no pod set asks for a topology Kueue places by")
        shape = (qf, tuple(_shape(p) for p in podsets))
        verdict = memo.get(shape)
        if verdict is None:
            verdict = memo[shape] = workload_verdict(podsets, qf, flavors, snapshot)
        return against_kueue(verdict, w.kueue_failed_at)

    def _render(self, key: WorkloadKey, v: Verdict) -> None:
        owner = ("capacity_workload_fit", *key)
        if not v.known:
            self.exposition.delete(owner)
            return
        self.exposition.set(owner, {WORKLOAD_FIT: [WORKLOAD_FIT.sample((key[0], key[1], "domain"), int(v.domain)),
                                                   WORKLOAD_FIT.sample((key[0], key[1], "cluster"), int(v.cluster))]})

    def _render_blocked(self) -> None:
        counts: dict[tuple[str, str], int] = {}
        for w in self._waiting.values():
            v = w.verdict
            if v is not None and v.blocked_level and w.topological:
                k = (w.cluster_queue, self._alias(v.blocked_level) or v.blocked_level)
                counts[k] = counts.get(k, 0) + 1
        self.exposition.set(_BLOCKED_OWNER, {FRAGMENTATION_BLOCKED: [
            FRAGMENTATION_BLOCKED.sample(k, n) for k, n in sorted(counts.items())]})
