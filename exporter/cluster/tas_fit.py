"""Kueue's topology-aware placement, computed as Kueue computes it: typed records in, verdict out.

A port of Kueue's TAS placement (``kubernetes-sigs/kueue`` at ``ff69552e``,
``pkg/cache/scheduler/tas_flavor_snapshot.go`` unless another file is named) with the feature
gates at their defaults of that commit (``pkg/features/kube_features.go:645-870``):
``TASProfileMixed`` on (unconstrained requests fill the least free domains first),
``TASMultiLayerTopology`` on (inner slice layers), ``TASBalancedPlacement``,
``TASRespectNodeAffinityPreferred``, ``ElasticJobsViaWorkloadSlicesWithTAS`` and
``SchedulerLibraryIntegration`` off. Nothing here reads a store or the clock: the caller gives
the nodes, the usage on them, one flavor's levels, labels and tolerations, and the pod sets, and
gets each pod set's assignment or Kueue's own failure message back. ``tests/
test_tas_fit_kueue_cases.py`` drives it with the cases of Kueue's ``TestFindTopologyAssignments``.

What Kueue does that this module does not model (a caller must answer "unknown" there): a node
replacement for a Workload with ``unhealthyNodes`` (``findReplacementAssignment``, :686-733), the
elastic-slice path behind its off-by-default gate (tas_elastic_workloads.go), non-default gates,
pod-set updates from admission checks (:923-928), and quota (the flavor assigner's part).
"""

from __future__ import annotations

import math
from functools import cmp_to_key
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..taints import SCHEDULING_EFFECTS, Taint, Toleration
from ..topology import HOSTNAME_LABEL

Requests = Mapping[str, int]  # resource name -> Kueue's int64 value (cpu in millicores, the rest in units)
DomainValues = tuple[str, ...]

PODS = "pods"
MAX_INT32 = 2**31 - 1


def resource_value(name: str, quantity: float) -> int:
    """A quantity as Kueue's int64 (pkg/resources/requests.go:146-151): cpu in millicores, every
    other resource in whole units, both rounded up as ``Quantity.MilliValue``/``Value`` do."""
    return math.ceil(quantity * 1000) if name == "cpu" else math.ceil(quantity)


@dataclass(frozen=True, slots=True)
class SelectorRequirement:
    """One ``matchExpressions``/``matchFields`` entry of a node selector term."""

    key: str
    operator: str  # In, NotIn, Exists, DoesNotExist, Gt, Lt
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        """k8s.io/apimachinery labels.Requirement.Matches (selector.go:217-265)."""
        op, has = self.operator, self.key in labels
        if op == "In":
            return has and labels[self.key] in self.values
        if op == "NotIn":
            return not has or labels[self.key] not in self.values
        if op == "Exists":
            return has
        if op == "DoesNotExist":
            return not has
        if op in ("Gt", "Lt") and has and len(self.values) == 1:
            try:
                have, want = int(labels[self.key]), int(self.values[0])
            except ValueError:
                return False
            return have > want if op == "Gt" else have < want
        return False


@dataclass(frozen=True, slots=True)
class SelectorTerm:
    """``nodeSelectorTerms[]``: its expressions (on labels) and fields (``metadata.name``) all hold."""

    expressions: tuple[SelectorRequirement, ...] = ()
    fields: tuple[SelectorRequirement, ...] = ()

    def matches(self, name: str, labels: Mapping[str, str]) -> bool:
        # component-helpers nodeaffinity.nodeSelectorTerm.match: an empty term matches nothing
        # (nodeaffinity.go:209-227).
        if not self.expressions and not self.fields:
            return False
        return (all(r.matches(labels) for r in self.expressions)
                and all(r.matches({"metadata.name": name}) for r in self.fields))


@dataclass(frozen=True, slots=True)
class FitNode:
    """What Kueue's node cache keeps of a Node (tas_nodes_cache.go:121-140) and its readiness."""

    name: str
    labels: Mapping[str, str]
    allocatable: Requests
    taints: tuple[Taint, ...] = ()
    ready: bool = True
    unschedulable: bool = False
    ready_reported: bool = True  # a Ready condition was read (exporter.cluster.node_loss judges only those)


@dataclass(frozen=True, slots=True)
class FitFlavor:
    """A TAS ResourceFlavor: its Topology's levels (top first), node labels and tolerations."""

    name: str
    topology: str
    levels: tuple[str, ...]
    node_labels: Mapping[str, str] = field(default_factory=dict)
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class FitPodSet:
    """One pod set as the placement reads it (tas_flavor_snapshot.go:380-391, :886-1000).

    ``requests`` are one pod's effective requests (``resources.NewRequestsFromPodSpec``: the
    larger of the containers' sum and each init container, plus overhead). No topology request
    at all (``implied``) is a pod set of a TAS-only ClusterQueue (tas_flavorassigner.go:241-243).
    ``slices`` are the slice layers outermost first, (level key, pods per slice).
    """

    name: str
    count: int
    requests: Requests
    required: str = ""
    preferred: str = ""
    unconstrained: bool = False
    slices: tuple[tuple[str, int], ...] = ()
    group: str = ""
    implied: bool = False
    tolerations: tuple[Toleration, ...] = ()
    node_selector: Mapping[str, str] = field(default_factory=dict)
    affinity: tuple[SelectorTerm, ...] | None = None  # requiredDuringScheduling terms (ORed)


@dataclass(frozen=True, slots=True)
class PodSetPlacement:
    """Kueue's answer for one pod set: the assignment (levels and (values, pods) per domain) or
    the failure message it writes (``reason``)."""

    levels: tuple[str, ...] = ()
    domains: tuple[tuple[DomainValues, int], ...] = ()
    reason: str = ""


class _Domain:
    __slots__ = ("id", "values", "parent", "children", "pod", "slice", "pod_l", "slice_l", "leader",
                 "capacity", "leaf")

    def __init__(self, values: DomainValues, did: str) -> None:
        self.id, self.values = did, values
        self.parent: _Domain | None = None
        self.children: list[_Domain] = []
        self.pod = self.slice = self.pod_l = self.slice_l = self.leader = 0
        self.capacity: dict[str, int] = {}
        self.leaf = False

    def copy_state(self) -> _Domain:
        d = _Domain(self.values, self.id)
        d.parent, d.children, d.leaf = self.parent, self.children, self.leaf
        d.pod, d.slice, d.pod_l, d.slice_l, d.leader = self.pod, self.slice, self.pod_l, self.slice_l, self.leader
        return d


@dataclass(slots=True)
class _Stats:
    """tasExclusionStats (:455-549): why nodes were left out, for the failure message."""

    total: int = 0
    node_selector: int = 0
    affinity: int = 0
    taints: dict[str, int] = field(default_factory=dict)
    resources: dict[str, int] = field(default_factory=dict)

    def reasons(self) -> str:
        out = []
        if self.node_selector:
            out.append(f"nodeSelector: {self.node_selector}")
        if self.affinity:
            out.append(f"affinity: {self.affinity}")
        out += [f'taint "{k}": {v}' for k, v in sorted(self.taints.items())]
        out += [f'resource "{k}": {v}' for k, v in sorted(self.resources.items())]
        return ", ".join(sorted(out))


def _taint_string(t: Taint) -> str:
    """core/v1 Taint.ToString (taint.go:30-36)."""
    return f"{t.key}={t.value}:{t.effect}" if t.value else f"{t.key}:{t.effect}"


def count_in(requests: Sequence[tuple[str, int]], capacity: Mapping[str, int]) -> tuple[int, str]:
    """How many times ``requests`` (name, value pairs sorted by name) fit in ``capacity`` and
    the limiting resource (pkg/resources/requests.go:195-230): a resource the capacity lacks fits
    0 times, a zero request any number; ties go to the first name in order."""
    best, limiting = -1, ""
    for name, value in requests:
        count = MAX_INT32 if value == 0 else max(0, min(capacity.get(name, 0) // value, MAX_INT32))
        if best < 0 or count < best:
            best, limiting = count, name
    return (best if best >= 0 else 0), limiting


def _sub(a: dict[str, int], b: Mapping[str, int]) -> None:
    for k, v in b.items():
        a[k] = a.get(k, 0) - v


class FlavorSnapshot:
    """One flavor's topology tree with free capacity (TASFlavorSnapshot, :128-257): the nodes
    Kueue keeps, grouped per level, each leaf's allocatable minus the usage on it."""

    def __init__(self, flavor: FitFlavor, nodes: Iterable[FitNode], usage: Mapping[str, Requests] | None = None,
                 tas_usage: Mapping[str, Requests] | None = None) -> None:
        """``usage``: per node name, the summed requests of the pods bound there that Kueue counts
        as non-TAS usage, and a ``pods`` unit per pod (tas_non_tas_pod_cache.go:112-119).
        ``tas_usage``: per leaf domain id (the hostname when the lowest level is
        ``kubernetes.io/hostname``, else the level values joined by ","), the usage of admitted TAS
        Workloads (tas_flavor.go:264-308: pods x requests plus the pods)."""
        self.flavor = flavor
        self.levels = flavor.levels
        # :226-257 via topologyTree (tas_topology_tree.go): a leaf per hostname, or per path when
        # the lowest level is not the hostname.
        self.lowest_is_node = bool(self.levels) and self.levels[-1] == HOSTNAME_LABEL
        self.per_level: list[dict[str, _Domain]] = [{} for _ in self.levels]
        self.leaves: dict[str, _Domain] = {}
        self.leaf_nodes: dict[str, FitNode] = {}
        node_leaf: dict[str, str] = {}
        for node in nodes:
            if not self._kept(node):
                continue
            values = tuple(node.labels[k] for k in self.levels)
            did = node.labels[HOSTNAME_LABEL] if self.lowest_is_node else ",".join(values)
            leaf = self.leaves.get(did)
            if leaf is None:
                leaf = self.leaves[did] = _Domain(values, did)
                leaf.leaf = True
                if self.lowest_is_node:
                    self.leaf_nodes[did] = node
            for k, v in node.allocatable.items():
                leaf.capacity[k] = leaf.capacity.get(k, 0) + v
            node_leaf[node.name] = did
        self.roots: dict[str, _Domain] = {}
        # Feasible leaves per (tolerations, nodeSelector, affinity), with the exclusions counted:
        # Kueue caches the same per pod set (TASCacheNodeMatchResults, :1845-1882).
        self._feasible_cache: dict[tuple[object, ...], tuple[list[_Domain], _Stats]] = {}
        for leaf in self.leaves.values():
            self.per_level[len(leaf.values) - 1][leaf.id] = leaf
            self._link(leaf)
        # tas_flavor.go:197-205: TAS usage per held domain, then non-TAS usage per node.
        for did, u in (tas_usage or {}).items():
            if did in self.leaves:
                _sub(self.leaves[did].capacity, u)
        for name, u in (usage or {}).items():
            leaf_id = node_leaf.get(name)
            if leaf_id is not None:
                _sub(self.leaves[leaf_id].capacity, u)

    def _kept(self, node: FitNode) -> bool:
        # tas_nodes_cache.go:58-66: a node that is cordoned or not Ready is dropped (with
        # SchedulerLibraryIntegration off); NodeMatchesFlavor (pkg/util/tas/node.go:19-33): the
        # flavor's node labels and a label for every level.
        if node.unschedulable or not node.ready:
            return False
        labels = node.labels
        return (all(labels.get(k) == v for k, v in self.flavor.node_labels.items())
                and all(k in labels for k in self.levels))

    def _link(self, dom: _Domain) -> None:
        """tas_topology_tree.go initializeHelper: create the parents up to a root."""
        if len(dom.values) == 1:
            self.roots[dom.id] = dom
            return
        pv = dom.values[:-1]
        pid = ",".join(pv)
        parent = self.per_level[len(pv) - 1].get(pid)
        if parent is None:
            parent = self.per_level[len(pv) - 1][pid] = _Domain(pv, pid)
            self._link(parent)
        dom.parent = parent
        parent.children.append(dom)

    def has_level(self, ps: FitPodSet) -> bool:
        """HasLevel (:1170-1195): the request's level, slice level and every layer are levels here."""
        key = self._level_key(ps)
        if key is None or key not in self.levels:
            return False
        return all(layer in self.levels for layer, _ in ps.slices)

    # ---- the request's levels (:1197-1274) ----

    def _level_key(self, ps: FitPodSet) -> str | None:
        if ps.required:
            return ps.required
        if ps.preferred:
            return ps.preferred
        if ps.slices:
            return self.levels[0]
        if ps.unconstrained or ps.implied:
            return self.levels[-1]
        return None

    # ---- placement of the pod sets in turn (:578-684) ----

    def place(self, podsets: Sequence[FitPodSet]) -> dict[str, PodSetPlacement]:
        """FindTopologyAssignmentsForFlavor: groups (``podSetGroupName``, else each pod set alone)
        in the order of their first pod set, each placed with the usage of those before it
        assumed (:591-681, addAssumedUsage :734-745); the first failure ends it."""
        result: dict[str, PodSetPlacement] = {}
        assumed: dict[str, dict[str, int]] = {}
        groups: dict[str, list[FitPodSet]] = {}
        for i, ps in enumerate(podsets):
            groups.setdefault(ps.group or str(i), []).append(ps)
        for trs in groups.values():
            workers, leader = trs[0], None
            if len(trs) > 1:  # findLeaderAndWorkers (:668-684)
                leader = trs[1]
                if leader.count > workers.count:
                    leader, workers = trs[0], trs[1]
            assignments, reason = self._find(workers, leader, assumed)
            for ps in trs:
                result[ps.name] = assignments.get(ps.name, PodSetPlacement()) if not reason else PodSetPlacement(reason=reason)
            if reason:
                return result
            for ps in trs:
                a = assignments.get(ps.name)
                if a is None:
                    continue
                for values, pods in a.domains:
                    did = values[-1] if self.lowest_is_node else ",".join(values)
                    u = assumed.setdefault(did, {})
                    # ComputeUsagePerDomain (pkg/util/tas/tas_assignment.go:559-568): requests x
                    # pods, and the pods.
                    for k, v in ps.requests.items():
                        u[k] = u.get(k, 0) + v * pods
                    u[PODS] = u.get(PODS, 0) + pods
        return result

    # ---- one group (:886-1121) ----

    def _find(self, workers: FitPodSet, leader: FitPodSet | None,
              assumed: Mapping[str, Mapping[str, int]]) -> tuple[dict[str, PodSetPlacement], str]:
        requests = dict(workers.requests)
        requests[PODS] = requests.get(PODS, 0) + 1  # resources.OnePodRequest (:898-899)
        leader_requests = None
        leader_count = 0
        if leader is not None:
            leader_requests = dict(leader.requests)
            leader_requests[PODS] = leader_requests.get(PODS, 0) + 1
            leader_count = 1
        count = workers.count
        # getSliceSizeWithSinglePodAsDefault (:1259-1274)
        slice_size = 1
        if workers.slices:
            slice_size = workers.slices[0][1]
            if slice_size <= 0:
                return {}, "slice topology requested, but slice size not provided"
        required = bool(workers.required)
        unconstrained = workers.unconstrained or workers.implied or (
            not workers.required and not workers.preferred and bool(workers.slices))
        key = self._level_key(workers)
        if key is None:
            return {}, "topology level not specified"
        if key not in self.levels:
            return {}, f"no requested topology level: {key}"
        level_idx = self.levels.index(key)
        slice_key = workers.slices[0][0] if workers.slices else self.levels[-1]
        if slice_key not in self.levels:
            return {}, f"no requested topology level for slices: {slice_key}"
        slice_idx = self.levels.index(slice_key)
        if level_idx > slice_idx:
            return {}, f"podset slice topology {slice_key} is above the podset topology {key}"
        at_level, reason = self._slice_size_at_level(workers, slice_size, slice_idx)
        if reason:
            return {}, reason
        multi = workers.slices if at_level else ()
        tolerations = (*workers.tolerations, *self.flavor.tolerations)  # :961
        stats = _Stats()
        self._fill_in_counts(workers, requests, leader_requests, tolerations, assumed, stats, slice_size,
                             slice_idx, at_level, leader_count > 0)
        fit_idx, fit, reason = self._level_with_fit_domains(level_idx, count, slice_size, leader_count, required,
                                                            unconstrained, multi, stats)
        if reason:
            return {}, reason
        fit = self._update_counts_to_minimum(fit, count, leader_count, slice_size, unconstrained, True)
        cur = fit_idx
        last = len(self.levels) - 1
        while cur < min(last, slice_idx):  # :1048-1053
            fit = self._update_counts_to_minimum(self._sorted(self._lower(fit), unconstrained), count, leader_count,
                                                 slice_size, unconstrained, True)
            cur += 1
        while cur < last:  # :1055-1085
            size_here = slice_size
            if cur >= slice_idx:
                size_here = at_level.get(cur + 1, 1)
            new: list[_Domain] = []
            for dom in fit:
                lower = self._sorted(dom.children, unconstrained)
                if size_here > 1:
                    for d in lower:
                        d.slice, d.slice_l = d.pod // size_here, d.pod_l // size_here
                new += self._update_counts_to_minimum(lower, dom.pod, dom.leader, size_here, unconstrained, size_here > 1)
            fit = new
            cur += 1
        out: dict[str, PodSetPlacement] = {}
        if leader is not None:
            leader_domains, worker_domains = [], []
            for dom in fit:
                if dom.leader > 0:
                    c = dom.copy_state()
                    c.pod = dom.leader
                    leader_domains.append(c)
                if dom.pod > 0:
                    worker_domains.append(dom)
            out[leader.name] = self._build(leader_domains)
            fit = worker_domains
        out[workers.name] = self._build(fit)
        return out, ""

    def _slice_size_at_level(self, ps: FitPodSet, slice_size: int, slice_idx: int) -> tuple[dict[int, int], str]:
        """buildSliceSizeAtLevel (:1123-1168): the inner layers' sizes per level (TASMultiLayerTopology)."""
        out: dict[int, int] = {}
        prev_size, prev_idx = slice_size, slice_idx
        for layer, size in ps.slices[1:]:
            if layer not in self.levels:
                return {}, f"no requested topology level for additional slice layer: {layer}"
            idx = self.levels.index(layer)
            if idx <= prev_idx:
                return {}, f"additional slice layer topology {layer} must be at a lower level than {self.levels[prev_idx]}"
            if size == 0 or prev_size % size:
                return {}, f"additional slice layer size {size} must evenly divide parent layer size {prev_size}"
            for lvl in range(prev_idx + 1, idx + 1):
                out[lvl] = size
            prev_size, prev_idx = size, idx
        return out, ""

    # ---- phase 1: pods and slices per domain (:1800-1995) ----

    def _feasible(self, leaf: _Domain, ps: FitPodSet, tolerations: Sequence[Toleration], stats: _Stats) -> bool:
        """The default simulator's FindFeasibleNodes (scheduling_simulator_default.go:55-117):
        scheduling taints untolerated by the pod set's and the flavor's tolerations, then the
        nodeSelector, then required node affinity; only when the lowest level is the hostname
        (:963-976, :1820-1833)."""
        node = self.leaf_nodes.get(leaf.id)
        stats.total += 1
        if node is None:
            return True
        for t in node.taints:  # FindMatchingUntoleratedTaint: the first untolerated one
            if t.effect in SCHEDULING_EFFECTS and not any(tol.tolerates(t) for tol in tolerations):
                key = _taint_string(t)
                stats.taints[key] = stats.taints.get(key, 0) + 1
                return False
        if any(node.labels.get(k) != v for k, v in ps.node_selector.items()):
            stats.node_selector += 1
            return False
        if ps.affinity is not None and not any(term.matches(node.name, node.labels) for term in ps.affinity):
            stats.affinity += 1
            return False
        return True

    def _feasible_leaves(self, ps: FitPodSet, tolerations: Sequence[Toleration], stats: _Stats) -> list[_Domain]:
        key = (tuple(tolerations), tuple(sorted(ps.node_selector.items())), ps.affinity)
        found = self._feasible_cache.get(key)
        if found is None:
            own = _Stats()
            if self.lowest_is_node:
                leaves = [leaf for leaf in self.leaves.values() if self._feasible(leaf, ps, tolerations, own)]
            else:
                leaves = list(self.leaves.values())
                own.total = len(leaves)
            found = self._feasible_cache[key] = (leaves, own)
        leaves, own = found
        stats.total += own.total
        stats.node_selector += own.node_selector
        stats.affinity += own.affinity
        for k, v in own.taints.items():
            stats.taints[k] = stats.taints.get(k, 0) + v
        return leaves

    def _fill_in_counts(self, ps: FitPodSet, requests: Requests, leader_requests: Requests | None,
                        tolerations: Sequence[Toleration], assumed: Mapping[str, Mapping[str, int]], stats: _Stats,
                        slice_size: int, slice_idx: int, at_level: Mapping[int, int], leader_required: bool) -> None:
        for lvl in self.per_level:
            for d in lvl.values():
                d.pod = d.slice = d.pod_l = d.slice_l = d.leader = 0
        req = tuple(sorted(requests.items()))
        lead = tuple(sorted(leader_requests.items())) if leader_requests is not None else None
        for leaf in self._feasible_leaves(ps, tolerations, stats):
            # fillLeafCounts (:1899-1928)
            remaining: Mapping[str, int] = leaf.capacity
            if leaf.id in assumed:
                remaining = dict(remaining)
                _sub(remaining, assumed[leaf.id])
            leaf.pod, limiting = count_in(req, remaining)
            if leaf.pod == 0 and limiting:
                stats.resources[limiting] = stats.resources.get(limiting, 0) + 1
            leaf.leader = 0
            if lead is not None and leader_requests is not None and count_in(lead, remaining)[0] > 0:
                leaf.leader = 1
                remaining = dict(remaining)
                _sub(remaining, leader_requests)
                leaf.pod_l = count_in(req, remaining)[0]
            else:
                leaf.pod_l = leaf.pod
        for root in self.roots.values():
            self._fill_helper(root, slice_size, slice_idx, 0, at_level, leader_required)

    def _fill_helper(self, dom: _Domain, slice_size: int, slice_idx: int, level: int, at_level: Mapping[int, int],
                     leader_required: bool) -> None:
        """fillInCountsHelper (:1930-1995)."""
        if not dom.children:
            if level == slice_idx:
                dom.slice, dom.slice_l = dom.pod // slice_size, dom.pod_l // slice_size
            return
        pods = slices_ = 0
        contributor = False
        min_pod_diff = min_slice_diff = MAX_INT32
        leader = 0
        inner = at_level.get(level + 1)
        for child in dom.children:
            self._fill_helper(child, slice_size, slice_idx, level + 1, at_level, leader_required)
            cp, cpl = child.pod, child.pod_l
            if inner is not None:
                cp, cpl = (cp // inner) * inner, (cpl // inner) * inner
            pods += cp
            slices_ += child.slice
            if not leader_required or child.leader > 0:
                contributor = True
                min_pod_diff = min(cp - cpl, min_pod_diff)
                min_slice_diff = min(child.slice - child.slice_l, min_slice_diff)
            leader = max(child.leader, leader)
        dom.pod = pods
        slice_l = 0
        if contributor:
            dom.pod_l = pods - min_pod_diff
            slice_l = slices_ - min_slice_diff
        else:
            dom.pod_l = 0
        dom.leader = leader
        if level == slice_idx:
            slices_ = dom.pod // slice_size
            slice_l = dom.pod_l // slice_size
        dom.slice, dom.slice_l = slices_, slice_l

    # ---- phase 2: the level and domains (:1276-1448) ----

    def _best_fit_by(self, domains: Sequence[_Domain], needed: int, attr: str, leader_count: int) -> _Domain:
        """findBestFitDomainBy (:1307-1334): the first domain with the smallest count that still
        holds ``needed`` (domains that cannot take the leaders left out), else the first."""
        best, best_count = domains[0], MAX_INT32
        for d in domains:
            if d.leader < leader_count:
                continue
            c = getattr(d, attr)
            if needed <= c < best_count:
                best, best_count = d, c
        return best

    def _best_fit(self, domains: Sequence[_Domain], count: int, leader_count: int) -> _Domain:
        return self._best_fit_by(domains, count, "pod_l" if leader_count > 0 else "pod", leader_count)

    def _best_fit_slices(self, domains: Sequence[_Domain], count: int, leader_count: int) -> _Domain:
        return self._best_fit_by(domains, count, "slice_l" if leader_count > 0 else "slice", leader_count)

    def _level_with_fit_domains(self, idx: int, count: int, slice_size: int, leader_count: int, required: bool,
                                unconstrained: bool, multi: Sequence[tuple[str, int]],
                                stats: _Stats) -> tuple[int, list[_Domain], str]:
        """findLevelWithFitDomains (:1336-1448); ``unconstrained`` requests use the least free
        domains first (useLeastFreeCapacityAlgorithm with TASProfileMixed, :1463-1472)."""
        level = self.per_level[idx]
        if not level:
            return 0, [], f"no topology domains at level: {self.levels[idx]}"
        ordered = self._sorted_with_leader(list(level.values()), unconstrained)
        top = ordered[0]
        slice_count = count // slice_size

        def not_fit(fit: int, total: int) -> str:
            if multi:
                return self._multi_layer_not_fit(idx, count, multi, stats)
            return self._not_fit(fit, total, slice_size, stats)

        if not unconstrained and top.slice_l >= slice_count and top.leader >= leader_count:
            top = self._best_fit_slices(ordered, slice_count, leader_count)
        if unconstrained:
            for d in ordered:
                capacity = d.slice
                if leader_count > 0:
                    if d.leader < leader_count:
                        continue
                    capacity = d.slice_l
                if capacity >= slice_count:
                    return idx, [d], ""
            if required:
                return 0, [], not_fit(ordered[-1].pod, slice_count)
        if top.slice_l < slice_count or top.leader < leader_count:
            if required:
                return 0, [], not_fit(top.slice, slice_count)
            if idx > 0 and not unconstrained:
                return self._level_with_fit_domains(idx - 1, count, slice_size, leader_count, required, unconstrained,
                                                    multi, stats)
            results: list[_Domain] = []
            remaining, remaining_leaders = slice_count, leader_count
            ordered = self._prioritize_leader(ordered, count, leader_count, slice_size, True)
            i = 0
            while remaining_leaders > 0 and i < len(ordered) and ordered[i].leader > 0:
                d = ordered[i]
                if not unconstrained and d.slice_l >= remaining:
                    d = self._best_fit_slices(ordered[i:], remaining, remaining_leaders)
                results.append(d)
                remaining_leaders -= d.leader
                remaining -= d.slice_l
                i += 1
            if remaining_leaders > 0:
                return 0, [], not_fit(leader_count - remaining_leaders, slice_count)
            ordered = self._sorted(ordered[i:], unconstrained)
            j = 0
            while remaining > 0 and j < len(ordered):
                d = ordered[j]
                if not unconstrained and d.slice >= remaining:
                    d = self._best_fit_slices(ordered[j:], remaining, 0)
                results.append(d)
                remaining -= d.slice
                j += 1
            if remaining > 0:
                return 0, [], not_fit(slice_count - remaining, slice_count)
            return idx, results, ""
        return idx, [top], ""

    def _prioritize_leader(self, domains: list[_Domain], count: int, leader_count: int, slice_size: int,
                           slices_enabled: bool) -> list[_Domain]:
        """prioritizeLeaderDomain (:1533-1573)."""
        if leader_count == 0 or len(domains) < 2:
            return domains
        need = count // slice_size if slices_enabled else count
        avail = sum(d.slice for d in domains) if slices_enabled else sum(d.pod for d in domains)
        for i, d in enumerate(domains):
            if d.leader < leader_count:
                continue
            penalty = (d.slice - d.slice_l) if slices_enabled else (d.pod - d.pod_l)
            if avail - penalty < need:
                continue
            if i == 0:
                return domains
            return [d, *domains[:i], *domains[i + 1:]]
        return domains

    def _update_counts_to_minimum(self, domains: list[_Domain], count: int, leader_count: int, slice_size: int,
                                  unconstrained: bool, slices: bool) -> list[_Domain]:
        """updateCountsToMinimumGeneric (:1575-1670) with consumeWithLeadersGeneric (:1486-1531):
        take domains in order until the pods (or slices) are placed, the last one best-fit."""
        domains = self._prioritize_leader(domains, count, leader_count, slice_size, slices)
        result: list[_Domain] = []
        remaining = count // slice_size if slices else count
        remaining_leaders = leader_count
        primary, with_leader = ("slice", "slice_l") if slices else ("pod", "pod_l")
        for i, dom in enumerate(domains):
            if remaining_leaders > 0:
                d = dom
                if not unconstrained and getattr(d, with_leader) >= remaining and d.leader >= remaining_leaders:
                    d = (self._best_fit_slices if slices else self._best_fit)(domains[i:], remaining, remaining_leaders)
                wl = getattr(d, with_leader)
                if wl >= remaining and d.leader >= remaining_leaders:
                    setattr(d, primary, remaining)
                    d.leader = remaining_leaders
                    d.pod = remaining * (slice_size if slices else 1)
                    result.append(d)
                    return result
                if wl > remaining:
                    wl = remaining
                    setattr(d, with_leader, wl)
                if d.leader > remaining_leaders:
                    d.leader = remaining_leaders
                setattr(d, primary, wl)
                d.pod = wl * (slice_size if slices else 1)
                remaining_leaders -= d.leader
                remaining -= wl
                result.append(d)
                continue
            if slices:
                if not unconstrained and dom.slice >= remaining:
                    dom = self._best_fit_slices(domains[i:], remaining, 0)
                dom.leader = 0
                if dom.slice >= remaining:
                    dom.pod, dom.slice = remaining * slice_size, remaining
                    result.append(dom)
                    return result
                dom.pod = dom.slice * slice_size
                remaining -= dom.slice
                result.append(dom)
                continue
            if not unconstrained and dom.pod >= remaining:
                dom = self._best_fit(domains[i:], remaining, 0)
            dom.leader = 0
            if dom.pod >= remaining:
                dom.pod = remaining
                result.append(dom)
                return result
            remaining -= dom.pod
            result.append(dom)
        return []  # Kueue logs "code assumptions violated" and returns nil (:1652-1669)

    # ---- ordering and the assignment (:1683-1798) ----

    def _compare(self, a: _Domain, b: _Domain) -> int:
        """compareDomainLevelValues (:1720-1729)."""
        if self.lowest_is_node and a.parent is b.parent:
            x, y = a.values[-1], b.values[-1]
        else:
            x, y = a.values, b.values  # type: ignore[assignment]
        return (x > y) - (x < y)

    def _sorted_with_leader(self, domains: list[_Domain], unconstrained: bool) -> list[_Domain]:
        """sortedDomainsWithLeader (:1731-1768)."""
        def cmp(a: _Domain, b: _Domain) -> int:
            if a.leader != b.leader:
                return b.leader - a.leader
            if a.slice_l != b.slice_l:
                return (a.slice_l - b.slice_l) if unconstrained else (b.slice_l - a.slice_l)
            if a.pod_l != b.pod_l:
                return a.pod_l - b.pod_l
            return self._compare(a, b)
        return sorted(domains, key=cmp_to_key(cmp))

    def _sorted(self, domains: list[_Domain], unconstrained: bool) -> list[_Domain]:
        """sortedDomains (:1770-1798): BestFit: slices descending; LeastFreeCapacity
        (unconstrained): ascending; then pods ascending, then the level values."""
        def cmp(a: _Domain, b: _Domain) -> int:
            if a.slice != b.slice:
                return (a.slice - b.slice) if unconstrained else (b.slice - a.slice)
            if a.pod != b.pod:
                return a.pod - b.pod
            return self._compare(a, b)
        return sorted(domains, key=cmp_to_key(cmp))

    def _lower(self, domains: Sequence[_Domain]) -> list[_Domain]:
        return [c for d in domains for c in d.children]

    def _build(self, domains: list[_Domain]) -> PodSetPlacement:
        """buildAssignment (:1701-1710): sorted by level values, only the hostname level where the
        Topology's lowest level is the hostname, domains without pods left out."""
        domains = sorted(domains, key=cmp_to_key(self._compare))
        start = len(self.levels) - 1 if self.lowest_is_node else 0
        return PodSetPlacement(self.levels[start:], tuple((d.values[start:], d.pod) for d in domains if d.pod))

    # ---- failure messages (:1997-2070) ----

    def _not_fit(self, fit: int, total: int, slice_size: int, stats: _Stats) -> str:
        unit = "pod" if slice_size == 1 else "slice"
        name = self.flavor.topology
        if fit == 0:
            text = f'topology "{name}" doesn\'t allow to fit any of {total} {unit}(s)'
        else:
            text = f'topology "{name}" allows to fit only {fit} out of {total} {unit}(s)'
        reasons = stats.reasons()
        return text + (f". Total nodes: {stats.total}; excluded: {reasons}" if reasons else "")

    def _multi_layer_not_fit(self, idx: int, count: int, layers: Sequence[tuple[str, int]], stats: _Stats) -> str:
        text = f'topology "{self.flavor.topology}" doesn\'t allow to fit'
        best: _Domain | None = None
        for d in self.per_level[idx].values():
            if best is None or d.slice > best.slice or (d.slice == best.slice and d.id < best.id):
                best = d
        if best is None:
            return text
        for key, size in layers:
            if key not in self.levels:
                continue
            target = self.levels.index(key)
            text += f"; {self._count_slices(best, idx, target, size)}/{count // size} slice(s) fit on level {key}"
        reasons = stats.reasons()
        return text + (f". Total nodes: {stats.total}; excluded: {reasons}" if reasons else "")

    def _count_slices(self, d: _Domain, cur: int, target: int, size: int) -> int:
        if cur == target:
            return d.pod // size
        return sum(self._count_slices(c, cur + 1, target, size) for c in d.children)


def place(flavor: FitFlavor, nodes: Iterable[FitNode], podsets: Sequence[FitPodSet],
          usage: Mapping[str, Requests] | None = None,
          tas_usage: Mapping[str, Requests] | None = None) -> dict[str, PodSetPlacement]:
    """Every pod set's placement in one flavor, as Kueue's FindTopologyAssignmentsForFlavor
    answers (see :meth:`FlavorSnapshot.place`)."""
    return FlavorSnapshot(flavor, nodes, usage, tas_usage).place(podsets)
