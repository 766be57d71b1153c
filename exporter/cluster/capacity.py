"""GPU capacity, use and free space per topology domain, and whether waiting jobs fit in it.

"Is there room anywhere, and where?" needs the Nodes' capacity beside the Workloads' assignments.
This module keeps both per host and sums them per domain of every topology level:

* **capacity**: ``status.allocatable`` of the GPU resources, what Kueue's topology-aware
  scheduling counts (kueue pkg/cache/scheduler/tas_nodes_cache.go:133-150);
* **unavailable**: the capacity of hosts a new pod cannot use: not Ready or cordoned (Kueue
  keeps only schedulable, Ready nodes, tas_nodes_cache.go:58-66), listed in a Workload's
  ``status.unhealthyNodes`` (workload_types.go:710-719), or tainted ``NoSchedule``/``NoExecute``
  without a toleration (scheduling_simulator_default.go:81-87). Tolerated are the taints the
  tolerations of the node's ResourceFlavors tolerate (tas_flavor_snapshot.go:961) and a
  ``NoSchedule`` taint keyed by a GPU resource, which pods requesting it tolerate (the
  ExtendedResourceToleration admission plugin, kubernetes plugin/pkg/admission/
  extendedresourcetoleration/admission.go:54-58, GKE's and the GPU operator's convention);
* **used**: Kueue's view, pods x GPUs per pod of every Workload that holds quota
  (:func:`.workload_state.holds_quota`) per domain of its topology assignment, as Kueue's TAS
  cache counts it (tas_flavor.go:264-308). Pods Kueue did not place (non-TAS usage) are not in it:
  Kueue subtracts them too (its non-TAS pod cache, pkg/cache/scheduler/tas_non_tas_pod_cache.go,
  ``update``: every bound pod by ``spec.nodeName``, dropped once terminated), gangscope watches
  only the pods of its selectors, so a node that other pods fill looks freer here than to Kueue;
* **free**: per host ``capacity - used`` on available hosts (0 on the others), summed;
* **placeable pods** of each size in ``--placement-sizes``: per host ``free // size``, summed,
  the way Kueue counts the pods a leaf domain fits (tas_flavor_snapshot.go:1899-1928, 1930-1995);
* **bound** (``gangscope_domain_gpus_bound``, where pods are watched): the scheduler's view, the
  GPUs requested by the bound, non-terminal pods of the pod store (:class:`.pods.PodStore`,
  ``gpus_bound_on``) on each host. The pod store holds the pods of Kueue's jobs, of gangs and of
  job controllers, not every pod: bound GPUs of other pods are not in it. ``used`` minus ``bound``
  is what Kueue counts that no pod holds yet (admitted, not yet bound: pods being created or
  scheduled) and, negative, GPUs that watched pods hold outside Kueue's accounting.

Every change is incremental: a Node or Workload event changes its hosts' numbers, which are
applied as deltas to the host's domains (one per level) and marked dirty; a flush renders only
the dirty domains. In the collector the flush runs on a timer (:data:`FLUSH_DELAY` after the
first change), never on the scrape path; offline (snapshot, explain) at the end of each handler
call, or of a batch (:meth:`Capacity.deferred`).

**Fit.** For each Workload waiting for admission whose pod sets name a topology level, the flush
evaluates Kueue's placement rule on the free capacity: the pods (or slices) that each domain of
the requested level holds are the sum over its slice-level domains of ``(sum of free // gpus
per pod) // slice size`` (fillInCountsHelper, tas_flavor_snapshot.go:1930-1995); a ``required``
request fits when one domain holds them all (findLevelWithFitDomains, :1379-1391), and the
cluster holds them when all domains together do. A required request the cluster holds but no
domain does is blocked by fragmentation; a ``preferred`` one is not (Kueue spreads it over
several domains, :1392-1437). Candidate nodes are those of each TAS ResourceFlavor whose
Topology has the level, with the flavor's node labels and every level label
(pkg/util/tas/node.go:19-33), not excluded by the pod set's nodeSelector or taints it does not
tolerate. Not modelled: node affinity, other resources than GPUs, pod sets competing for the same
hosts, inner slice layers beyond the outermost.

**Sharding.** Capacity and unavailable GPUs come from Nodes, which every shard watches; used
GPUs from Workloads and bound GPUs from pods, which shards split by namespace. So with several
shards, ``used`` and ``bound`` are exported by every shard (per-domain sums over shards add up:
``sum without (instance, pod)`` of the shards equals the unsharded collector's series) and
``capacity``/``unavailable`` by shard 0 only, while free GPUs, placeable pods, domain states, fit
and fragmentation, which need every Workload's usage, are left to the recording rules over those
sums (alerts/config.yaml, ``capacity``) and exported in-process only by a collector that sees
every namespace (:meth:`set_shards`). A collector limited to some namespaces (``--namespaces``,
``--namespaces-denylist``) exports capacity and its namespaces' usage, nothing that needs all.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..exposition import Exposition, Family, LabelPairs, format_value
from ..taints import Taint, Toleration, tolerated, untolerated
from ..topology import HOSTNAME_LABEL
from .workload_state import WAITING_STAGES, holds_quota

if TYPE_CHECKING:
    from ..topologies import ResourceFlavor, Topology
    from ..topology import TopologyLevels
    from .nodes import Node
    from .pods import PodChanges, PodStore
    from .workloads import PodSet, Workload

Path = tuple[tuple[str, str], ...]
WorkloadKey = tuple[str, str]

DEFAULT_PLACEMENT_SIZES = (1, 2, 4, 8)
FLUSH_DELAY = 1.0  # seconds from the first change to the flush that renders it (collector only)
STATES = ("capacity", "unavailable", "used", "free")
_BOUND = len(STATES)  # index of the bound GPUs in a host's numbers and a domain's sums
_PLACEABLE = _BOUND + 1  # the placeable pods per size follow
DOMAIN_STATES = ("free", "partial", "full", "unavailable")

DOMAIN_GPUS = Family(
    "gangscope_domain_gpus", "gauge",
    "GPUs of each topology domain (level and the path labels down to it) by state: capacity (allocatable), unavailable "
    "(on nodes not Ready, cordoned, unhealthy for Kueue or tainted without a toleration), used (Kueue's view: pods x "
    "GPUs of the Workloads holding quota there) and free (capacity minus used on available nodes; not for single hosts: "
    "recorded as host:gangscope_domain_gpus_free:sum).",
    ("level", "state"), topology=True,
)
DOMAIN_PLACEABLE = Family(
    "gangscope_domain_placeable_pods", "gauge",
    "Pods of gpus_per_pod GPUs the domain can take now: the sum over its nodes of free GPUs divided by the pod size, "
    "rounded down (for each of --placement-sizes); not for single hosts: recorded as "
    "host:gangscope_domain_placeable_pods:sum.",
    ("level", "gpus_per_pod"), topology=True,
)
DOMAINS = Family(
    "gangscope_domains", "gauge",
    "Topology domains of each level by state: free (nothing used), partial, full (no free GPU) and unavailable (every "
    "GPU unavailable).",
    ("level", "state"),
)
WORKLOAD_FIT = Family(
    "gangscope_workload_fit", "gauge",
    "Whether the free GPUs could place the waiting Workload's topology request now (1) or not (0): in one domain of "
    "its required or preferred level (scope domain), or anywhere in the cluster (scope cluster).",
    ("namespace", "workload", "scope"),
)
FRAGMENTATION_BLOCKED = Family(
    "gangscope_fragmentation_blocked_workloads", "gauge",
    "Waiting Workloads with a required topology level that the cluster's free GPUs could hold but no single domain of "
    "that level can.",
    ("cluster_queue", "level"),
)
WORKLOAD_DOMAINS_NEEDED = Family(
    "gangscope_workload_domains_needed", "gauge",
    "Fewest domains of its preferred level that the admitted pod set fits in by capacity (pods of its size per domain of "
    "its flavor, largest first); compare with gangscope_workload_domains_spanned.",
    ("namespace", "workload", "podset", "level"),
)
DOMAIN_BOUND = Family(
    "gangscope_domain_gpus_bound", "gauge",
    "GPUs requested by the bound, non-terminal pods the collector watches (Kueue's jobs, gangs, job controllers) on the "
    "domain's nodes: the scheduler's view, beside Kueue's view, gangscope_domain_gpus with state used. Exported where pods "
    "are watched, once their first LIST completed.",
    ("level",), topology=True,
)
FAMILIES = (DOMAIN_GPUS, DOMAIN_BOUND, DOMAIN_PLACEABLE, DOMAINS, WORKLOAD_FIT, FRAGMENTATION_BLOCKED, WORKLOAD_DOMAINS_NEEDED)

_DOMAINS_OWNER = ("capacity_domains",)
_BLOCKED_OWNER = ("capacity_fragmentation",)


def parse_sizes(text: str) -> tuple[int, ...]:
    """``--placement-sizes``: comma-separated positive pod sizes in GPUs (raises ValueError)."""
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if not part.isdigit() or int(part) <= 0:
            raise ValueError(f"--placement-sizes wants positive whole numbers of GPUs, got {part!r}")
        sizes.append(int(part))
    if not sizes:
        raise ValueError("--placement-sizes names no size")
    return tuple(sorted(set(sizes)))


@dataclass(slots=True)
class Host:
    """One GPU node as the accounting sees it (keyed by its hostname label value)."""

    node: str
    labels: Mapping[str, str]
    path: Path
    gpus: float
    ready: bool
    unschedulable: bool
    taints: tuple[Taint, ...]  # scheduling taints a GPU pod does not tolerate by itself
    blocking: tuple[Taint, ...] = ()  # of those, the ones no toleration of its flavors tolerates either
    applied: tuple[float, ...] | None = None  # the numbers last added to its domains
    domains: tuple[tuple[int, Path], ...] = ()  # (level index, domain path) it was added to


@dataclass(slots=True)
class Domain:
    """Sums over one domain's hosts: capacity, unavailable, used, free, bound, placeable per size."""

    sums: list[float]
    extra_used: float = 0  # usage Kueue assigned to the domain itself, not to a host in it
    hosts: int = 0
    state: str = ""


@dataclass(frozen=True, slots=True)
class Candidates:
    """A ResourceFlavor whose Topology places by a level: its name, node labels, levels, tolerations."""

    flavor: str
    node_labels: tuple[tuple[str, str], ...]
    levels: tuple[str, ...]
    tolerations: tuple[Toleration, ...]


@dataclass(slots=True)
class LevelFit:
    """What the free capacity holds for one request at one level, in one flavor's nodes."""

    flavor: str
    best: int  # slices (pods when not sliced) the best domain holds
    best_domain: Path
    total: int  # slices all domains hold together
    free_gpus: float
    domains_with_free: int
    domains: int


@dataclass(slots=True)
class PodSetFit:
    """One pod set's request and how the free capacity answers it (explain's numbers)."""

    podset: str
    mode: str  # required, preferred, unconstrained, or slices (only slice layers)
    level: str  # the level's label name ("" when the request names none)
    pods: int
    gpus_per_pod: float
    slice_level: str
    slice_size: int
    needed: int  # slices to place (pods when not sliced)
    fit: LevelFit | None  # the flavor that holds most; None: no node of any candidate flavor
    domain_fit: bool = False
    cluster_fit: bool = False

    @property
    def fragmented(self) -> bool:
        return self.cluster_fit and not self.domain_fit


@dataclass(slots=True)
class _Waiting:
    """A waiting Workload's evaluable requests and what the last flush found."""

    cluster_queue: str
    requests: list[tuple[PodSet, Any]]  # (pod set, what its fit depends on: request, size, tolerations, selector)
    result: tuple[bool, bool, str] | None = None  # (domain fit, cluster fit, blocked level or "")


class _FitState:
    """What one request shape (level, slice level and size, GPUs per pod, tolerations, node
    selector) finds in one flavor's candidate nodes, kept per domain and updated host by host:
    a flush that changed a few hosts' free GPUs costs a few updates per shape, not a walk over
    every node (the collector's 5,000)."""

    __slots__ = ("level", "slice_level", "gpus", "size", "tolerations", "members", "slice_pods", "slices", "free",
                 "total", "fit", "stale")

    def __init__(self, level: int, slice_level: int, gpus: float, size: int, tolerations: tuple[Toleration, ...]) -> None:
        self.level, self.slice_level, self.gpus, self.size, self.tolerations = level, slice_level, gpus, size, tolerations
        self.members: dict[str, tuple[Path, Path, float, float]] = {}  # hostname -> (slice domain, domain, pods, free)
        self.slice_pods: dict[Path, float] = {}
        self.slices: dict[Path, int] = {}  # domain of the level -> slices (pods when not sliced) it holds
        self.free: dict[Path, float] = {}  # domain of the level -> free GPUs
        self.total = 0
        self.fit: LevelFit | None = None
        self.stale = True  # fit must be computed again

    def put(self, hostname: str, path: Path, free: float) -> None:
        pods = free // self.gpus
        old = self.members.get(hostname)
        if old is not None:
            if old[2] == pods and old[3] == free:
                return
            if old[0] == path[: self.slice_level + 1] and old[1] == path[: self.level + 1]:
                self._change(old, pods, free)  # the common case: same domains, other free GPUs
                self.members[hostname] = (old[0], old[1], pods, free)
                return
            self._change(old, 0, 0)
        entry = (path[: self.slice_level + 1], path[: self.level + 1], 0, 0)
        self._change(entry, pods, free)
        self.members[hostname] = (entry[0], entry[1], pods, free)

    def _change(self, entry: tuple[Path, Path, float, float], pods: float, free: float) -> None:
        """Move a host's contribution from ``entry``'s pods and free GPUs to ``pods`` and ``free``."""
        sl, domain, old_pods, old_free = entry
        size = self.size
        before = self.slice_pods.get(sl, 0)
        after = self.slice_pods[sl] = before - old_pods + pods
        delta = int(after // size) - int(before // size)  # fillInCountsHelper: slices per slice domain
        self.slices[domain] = self.slices.get(domain, 0) + delta
        self.total += delta
        self.free[domain] = self.free.get(domain, 0) + free - old_free
        self.stale = True

    def result(self, flavor: str, extra: Mapping[Path, float]) -> LevelFit | None:
        if self.stale:
            self.stale = False
            if not self.slices:
                self.fit = None
            else:
                free = self.free
                if extra:  # usage Kueue put on a domain of this level, not on a host
                    free = {d: max(0.0, f - extra.get(d, 0)) for d, f in free.items()}
                best = max(self.slices, key=lambda d: (self.slices[d], free[d]))
                self.fit = LevelFit(flavor, self.slices[best], best, self.total, sum(free.values()),
                                    sum(1 for v in free.values() if v > 0), len(self.slices))
        return self.fit


def _plural(word: str, n: int) -> str:
    return word if n == 1 else (word + "es" if word.endswith(("s", "x", "sh", "ch")) else word + "s")


class Capacity:
    """The per-host and per-domain GPU accounting of one collector (see module doc).

    The store feeds it (``node_changed``, ``workload_changed``, ``levels_changed``,
    ``flavors_changed``) and it renders its families into ``exposition``.
    """

    def __init__(self, exposition: Exposition, levels: Callable[[], TopologyLevels], fragment: Callable[[Path], LabelPairs],
                 *, gpu_resources: Sequence[str] = ("nvidia.com/gpu",), sizes: Sequence[int] = DEFAULT_PLACEMENT_SIZES,
                 flavors: Mapping[str, ResourceFlavor] | None = None, topologies: Mapping[str, Topology] | None = None,
                 shard: int = 0, total_shards: int = 1) -> None:
        self.exposition = exposition
        exposition.register(*FAMILIES)
        self._skip = exposition.filtered(FAMILIES)  # --metric-denylist: never formatted
        self._levels, self._fragment = levels, fragment
        self.sizes = tuple(sizes)
        self._flavors: Mapping[str, ResourceFlavor] = flavors if flavors is not None else {}
        self._topologies: Mapping[str, Topology] = topologies if topologies is not None else {}
        # Pods requesting a GPU resource tolerate its NoSchedule taint (ExtendedResourceToleration).
        self._implied = tuple(Toleration(r, "Exists", "", "NoSchedule") for r in gpu_resources)
        self.hosts: dict[str, Host] = {}  # hostname -> host
        self._node_host: dict[str, str] = {}  # node name -> hostname
        self._used: dict[str, float] = {}  # hostname -> GPUs used (hosts not known yet included)
        self._extra: dict[Path, float] = {}  # usage assigned above the host level
        self._unhealthy: dict[str, int] = {}  # node name -> Workloads listing it in unhealthyNodes
        self._wl_usage: dict[WorkloadKey, tuple[Any, ...]] = {}  # what each Workload added (see _usage_of)
        self._wl_unhealthy: dict[WorkloadKey, tuple[str, ...]] = {}
        self._domains: list[dict[Path, Domain]] = []
        self._state_counts: list[dict[str, int]] = []
        self._dirty_hosts: set[str] = set()
        self._dirty_domains: set[tuple[int, Path]] = set()
        self._waiting: dict[WorkloadKey, _Waiting] = {}
        self._needed: dict[WorkloadKey, list[tuple[PodSet, str, Any]]] = {}  # admitted, preferred: (pod set, flavor, level key)
        self._dirty_fit: set[WorkloadKey] = set()
        self._fit_states: dict[Any, _FitState] = {}  # request shape -> its free space (see _FitState)
        self._needed_cache: dict[Any, list[int]] = {}
        self._candidates_cache: dict[Any, list[Host]] = {}
        self._flavor_cache: dict[tuple[str, str], list[Candidates]] = {}
        self._capacity_changed = False  # a host's capacity, path or labels: domains needed change
        self._free_changed = False  # a host's free GPUs or availability: fits change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._hold = 0
        self._pods: PodStore | None = None
        self.set_shards(shard, total_shards, render=False)
        self._reset_domains()

    # ---- configuration ------------------------------------------------------------------------

    def set_shards(self, shard: int, total_shards: int, *, every_namespace: bool = True, render: bool = True) -> None:
        """This collector's shard (see module doc): shard 0 exports the Nodes' side, every shard
        its own usage, and only an unsharded collector of every namespace what needs all usage."""
        self.node_owner = shard == 0
        self.complete = total_shards <= 1 and every_namespace
        if render:
            for level, domains in enumerate(self._domains):
                self._dirty_domains.update((level, path) for path in domains)
            self._dirty_fit.update(self._waiting)
            if not self.complete:
                for key in self._waiting:
                    self.exposition.delete(("capacity_workload", *key))
            self._render_domain_counts()
            self._render_blocked()
            self._schedule()

    def attach_pods(self, pods: PodStore) -> None:
        """Count the pod store's bound GPUs per host from now on (``gangscope_domain_gpus_bound``)."""
        self._pods = pods
        pods.on_change.append(self._pods_changed)
        self._pods_changed(None)

    def _pods_changed(self, changes: PodChanges | None) -> None:
        """Nodes whose bound GPUs changed, or (``None``, a first LIST) every host."""
        if changes is None or changes.covered:
            self._dirty_hosts.update(self.hosts)
            self._dirty_domains.update((level, path) for level, domains in enumerate(self._domains) for path in domains)
        else:
            for node in changes.nodes:
                hostname = self._node_host.get(node)
                if hostname is not None:
                    self._dirty_hosts.add(hostname)
        self._schedule()
        self.settle()

    @property
    def bound_known(self) -> bool:
        """Whether bound GPUs are exported: pods are watched and a pod source has listed."""
        return self._pods is not None and self._pods.listed

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Flush by timer in ``loop`` from now on (the collector)."""
        self._loop = loop
        self._schedule()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._loop = None

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Hold every flush until the block ends (a dump fed object by object), then flush once."""
        self._hold += 1
        try:
            yield
        finally:
            self._hold -= 1
            self.settle()

    def settle(self) -> None:
        """End of a handler call: flush now offline; the collector's timer does it otherwise."""
        if self._loop is None and not self._hold:
            self.flush()

    def _schedule(self) -> None:
        if self._loop is not None and self._timer is None and self._pending_work():
            self._timer = self._loop.call_later(FLUSH_DELAY, self.flush)

    def _pending_work(self) -> bool:
        return bool(self._dirty_hosts or self._dirty_domains or self._dirty_fit or self._capacity_changed
                    or self._free_changed)

    # ---- inputs ---------------------------------------------------------------------------------

    def node_changed(self, name: str, node: Node | None) -> None:
        """A Node was put (``node``) or deleted (None); only GPU nodes are hosts."""
        hostname = node.hostname if node is not None and node.gpu_node else None
        old = self._node_host.pop(name, None)
        if old is not None and old != hostname:
            self._drop_host(old, name)
        if hostname is None:
            return
        self._node_host[name] = hostname
        path = tuple(self._levels().labels_from_node(node.labels, name))
        taints = untolerated(node.taints, self._implied)
        host = self.hosts.get(hostname)
        if host is not None and host.node != name:  # another Node with the same hostname label: the last one wins
            self._drop_host(hostname, host.node)
            host = None
        if host is None:
            host = self.hosts[hostname] = Host(name, node.labels, path, node.gpus, node.ready, node.unschedulable, taints)
            shape_changed = True
        else:
            # Capacity, path or labels change which nodes are candidates and what domains hold;
            # readiness, cordons and taints only what a host has free (updated host by host).
            shape_changed = (host.path, host.gpus, host.labels) != (path, node.gpus, node.labels)
            if not shape_changed and (host.ready, host.unschedulable, host.taints) == (node.ready, node.unschedulable, taints):
                return  # a status update that changes nothing counted here (most Node events)
            if host.path != path:
                self._unapply(host)
            host.labels, host.path, host.gpus, host.ready, host.unschedulable, host.taints = (
                node.labels, path, node.gpus, node.ready, node.unschedulable, taints)
        host.blocking = self._blocking(host)
        self._host_dirty(hostname, capacity=shape_changed)

    def _drop_host(self, hostname: str, node: str) -> None:
        host = self.hosts.get(hostname)
        if host is None or host.node != node:
            return
        del self.hosts[hostname]
        self._unapply(host)
        self._free_changed = self._capacity_changed = True
        self._candidates_cache.clear()
        self._schedule()

    def levels_changed(self) -> None:
        """Topology levels or Nodes' labels changed: every host's path is read again."""
        levels = self._levels()
        if len(self._domains) != len(levels.keys):
            for host in self.hosts.values():
                host.applied, host.domains = None, ()
            self._reset_domains()
        for hostname, host in self.hosts.items():
            path = tuple(levels.labels_from_node(host.labels, host.node))
            if path != host.path or host.applied is None:
                self._unapply(host)
                host.path = path
                self._host_dirty(hostname, capacity=True)
        self._needed_cache.clear()
        self._candidates_cache.clear()
        self._free_changed = self._capacity_changed = True
        self._schedule()

    def flavors_changed(self) -> None:
        """ResourceFlavors or Topologies changed: tolerations and candidate nodes are read again."""
        self._flavor_cache.clear()
        for hostname, host in self.hosts.items():
            blocking = self._blocking(host)
            if blocking != host.blocking:
                host.blocking = blocking
                self._host_dirty(hostname)
        self._needed_cache.clear()
        self._candidates_cache.clear()
        self._free_changed = self._capacity_changed = True
        self._schedule()

    def workload_changed(self, key: WorkloadKey, wl: Workload | None) -> None:
        """A Workload was put or re-rendered (``wl``) or deleted (None)."""
        usage = self._usage_of(wl) if wl is not None else ()
        old = self._wl_usage.get(key, ())
        if not _same_usage(old, usage):
            self._apply_usage(old, -1)
            self._apply_usage(usage, 1)
            if usage:
                self._wl_usage[key] = usage
            else:
                self._wl_usage.pop(key, None)
        unhealthy = tuple(wl.unhealthy_nodes) if wl is not None and wl.unhealthy_nodes and holds_quota(wl) else ()
        before = self._wl_unhealthy.get(key, ())
        if unhealthy != before:
            for name in before:
                self._count_unhealthy(name, -1)
            for name in unhealthy:
                self._count_unhealthy(name, 1)
            if unhealthy:
                self._wl_unhealthy[key] = unhealthy
            else:
                self._wl_unhealthy.pop(key, None)
        self._note_waiting(key, wl)
        self._note_needed(key, wl)
        self._schedule()

    # ---- usage ----------------------------------------------------------------------------------

    @staticmethod
    def _usage_of(wl: Workload) -> tuple[Any, ...]:
        """``((placed list, GPUs per pod), ...)`` of the current assignments Kueue counts as used;
        the placed lists are the store's (shared by identity), so an event that leaves the
        assignment alone is recognised without walking its hosts."""
        if not wl.admitted or not holds_quota(wl):
            return ()
        podsets = wl.podsets
        if len(podsets) == 1:  # the usual Job: one pod set, one assignment
            g = podsets[0].gpus_per_pod
            return tuple((a.placed, g) for a in wl.assignments if a.placed and g and a.name == podsets[0].name)
        per_pod = {ps.name: ps.gpus_per_pod for ps in podsets}
        return tuple((a.placed, per_pod.get(a.name, 0)) for a in wl.assignments if a.placed and per_pod.get(a.name))

    def _apply_usage(self, usage: tuple[Any, ...], sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) a Workload's GPUs per host. This runs for each of
        tens of thousands of Workloads in a LIST: one loop, no call per host."""
        used, hosts, dirty = self._used, self.hosts, self._dirty_hosts
        for placed, per_pod in usage:
            gpus = sign * per_pod
            for path, pods in placed:
                host = path[-1][1]
                if not host:  # Kueue named no host: the deepest domain it named holds the usage
                    depth = max((i + 1 for i, (_, v) in enumerate(path) if v), default=0)
                    if depth:
                        self._add_extra(path[:depth], pods * gpus)
                    continue
                value = used.get(host, 0) + pods * gpus
                if -1e-9 < value < 1e-9:
                    used.pop(host, None)
                else:
                    used[host] = value
                if host in hosts:
                    dirty.add(host)
                    self._free_changed = True

    def _add_extra(self, where: Path, gpus: float) -> None:
        extra = self._extra.get(where, 0) + gpus  # a domain above the host
        if abs(extra) < 1e-9:
            self._extra.pop(where, None)
        else:
            self._extra[where] = extra
        for level, domains in enumerate(self._domains):
            if level < len(where) and where[level][1]:
                key = where[: level + 1]
                dom = domains.get(key)
                if dom is None:
                    dom = domains[key] = Domain([0.0] * (_PLACEABLE + len(self.sizes)))
                dom.extra_used += gpus
                self._dirty_domains.add((level, key))
        self._free_changed = True

    def _count_unhealthy(self, node: str, delta: int) -> None:
        n = self._unhealthy.get(node, 0) + delta
        if n > 0:
            self._unhealthy[node] = n
        else:
            self._unhealthy.pop(node, None)
        hostname = self._node_host.get(node)
        if hostname is not None:
            self._host_dirty(hostname)

    def _host_dirty(self, hostname: str, capacity: bool = False) -> None:
        self._dirty_hosts.add(hostname)
        self._free_changed = True
        if capacity:
            self._capacity_changed = True
            self._candidates_cache.clear()
        self._schedule()

    def _blocking(self, host: Host) -> tuple[Taint, ...]:
        """The host's taints that no toleration of the ResourceFlavors selecting it tolerates."""
        if not host.taints:
            return ()
        tolerations = [t for f in self._flavors.values()
                       if all(host.labels.get(k) == v for k, v in f.node_labels.items()) for t in f.tolerations]
        return tuple(t for t in host.taints if not tolerated(t, tolerations))

    def available(self, host: Host) -> bool:
        return host.ready and not host.unschedulable and not host.blocking and host.node not in self._unhealthy

    def _numbers(self, hostname: str, host: Host) -> tuple[float, ...]:
        cap = host.gpus
        used = self._used.get(hostname, 0)
        bound = self._pods.gpus_bound_on(host.node) if self._pods is not None else 0.0
        if self.available(host):
            free = max(0.0, cap - used)
            return (cap, 0, used, free, bound, *(free // s for s in self.sizes))
        return (cap, cap, used, 0, bound, *(0 for _ in self.sizes))

    # ---- domains --------------------------------------------------------------------------------

    def _reset_domains(self) -> None:
        for level, domains in enumerate(self._domains):
            for path in domains:
                self.exposition.delete(("capacity_domain", level, path))
        n = len(self._levels().keys)
        self._domains = [{} for _ in range(n)]
        self._state_counts = [dict.fromkeys(DOMAIN_STATES, 0) for _ in range(n)]
        self._dirty_domains.clear()
        for where, gpus in list(self._extra.items()):
            self._extra.pop(where)
            self._add_extra(where, gpus)
        self._render_domain_counts()

    def _unapply(self, host: Host) -> None:
        if host.applied is not None:
            self._apply(host.domains, host.applied, -1)
        host.applied, host.domains = None, ()

    def _apply(self, domains: tuple[tuple[int, Path], ...], numbers: tuple[float, ...], sign: int) -> None:
        for level, path in domains:
            table = self._domains[level]
            dom = table.get(path)
            if dom is None:
                dom = table[path] = Domain([0.0] * len(numbers))
            sums = dom.sums
            for i, v in enumerate(numbers):
                sums[i] += sign * v
            dom.hosts += sign
            self._dirty_domains.add((level, path))

    def _refresh_host(self, hostname: str) -> None:
        host = self.hosts.get(hostname)
        if host is None:
            return
        numbers = self._numbers(hostname, host)
        if host.applied == numbers and host.domains:
            return
        path = host.path
        domains = tuple((i, path[: i + 1]) for i in range(len(path)) if path[i][1])
        if host.applied is not None:
            self._apply(host.domains, host.applied, -1)
        self._apply(domains, numbers, 1)
        host.applied, host.domains = numbers, domains

    def flush(self) -> None:
        """Apply the dirty hosts to their domains, render what changed, evaluate fits."""
        self._timer = None
        dirty_hosts, self._dirty_hosts = self._dirty_hosts, set()
        for hostname in dirty_hosts:
            self._refresh_host(hostname)
        recheck = self._free_changed
        if self._capacity_changed:
            self._capacity_changed = False
            self._needed_cache.clear()
            self._fit_states.clear()  # candidate nodes or their paths changed: built again when asked
            self._dirty_fit.update(self._needed)
        elif self._free_changed:
            self._update_fit_states(dirty_hosts)
        self._free_changed = False
        dirty, self._dirty_domains = self._dirty_domains, set()
        if dirty:
            counts_changed = False
            for level, path in dirty:
                counts_changed |= self._render_domain(level, path)
            if counts_changed:
                self._render_domain_counts()
        if self._dirty_fit or (recheck and self._waiting):
            self._render_fits(recheck)

    def _render_domain(self, level: int, path: Path) -> bool:
        """Render one domain's lines (or delete a domain without hosts); True when its state changed."""
        table = self._domains[level]
        dom = table.get(path)
        owner = ("capacity_domain", level, path)
        counts = self._state_counts[level]
        if dom is None or (dom.hosts <= 0 and not dom.extra_used):
            if dom is not None:
                del table[path]
                if dom.state:
                    counts[dom.state] -= 1
            self.exposition.delete(owner)
            return dom is not None and bool(dom.state)
        cap, unavailable, used, free = dom.sums[:4]
        used += dom.extra_used
        free = max(0.0, free - dom.extra_used)
        state = ("unavailable" if cap <= 0 or unavailable >= cap else "full" if free <= 0
                 else "free" if used <= 0 else "partial")
        changed = state != dom.state
        if changed:
            if dom.state:
                counts[dom.state] -= 1
            counts[state] += 1
            dom.state = state
        # A host's free GPUs and placeable pods follow from its other numbers (capacity minus
        # unavailable minus used; free // size): recording rules derive them (alerts/config.yaml,
        # capacity), 5 series per Node that no dashboard or rule reads raw.
        derived = self.complete and self._levels().keys[level] != HOSTNAME_LABEL
        level, topology = path[-1][0], self._fragment(path)
        skip = self._skip
        lines: dict[Family, list[str]] = {}
        if DOMAIN_GPUS not in skip:
            lines[DOMAIN_GPUS] = [
                DOMAIN_GPUS.sample((level, name), value, topology) for name, value in zip(STATES, (cap, unavailable, used, free))
                if name == "used" or (name == "free" and derived) or (name in ("capacity", "unavailable") and self.node_owner)]
        if self.bound_known and DOMAIN_BOUND not in skip:
            lines[DOMAIN_BOUND] = [DOMAIN_BOUND.sample((level,), dom.sums[_BOUND], topology)]
        if derived and DOMAIN_PLACEABLE not in skip:
            placeable = dom.sums[_PLACEABLE:]
            if dom.extra_used:  # usage not on a host: take it from the largest sizes' count too
                placeable = [max(0.0, p - dom.extra_used // s) for p, s in zip(placeable, self.sizes)]
            lines[DOMAIN_PLACEABLE] = [DOMAIN_PLACEABLE.sample((level, str(s)), p, topology)
                                       for s, p in zip(self.sizes, placeable)]
        self.exposition.set(owner, lines)
        return changed

    def _render_domain_counts(self) -> None:
        if not self.complete:
            self.exposition.delete(_DOMAINS_OWNER)
            return
        aliases = self._levels().aliases
        self.exposition.set(_DOMAINS_OWNER, {DOMAINS: [
            DOMAINS.sample((aliases[level], state), n)
            for level, counts in enumerate(self._state_counts) if level < len(aliases)
            for state, n in counts.items()]})

    # ---- fit ------------------------------------------------------------------------------------

    def _note_waiting(self, key: WorkloadKey, wl: Workload | None) -> None:
        requests = []
        if wl is not None and wl.stage in WAITING_STAGES and wl.podsets:
            requests = [(ps, (ps.topology, ps.gpus_per_pod, ps.count, ps.tolerations, tuple(sorted(ps.node_selector.items()))))
                        for ps in wl.podsets
                        if ps.topology is not None and ps.gpus_per_pod > 0 and ps.count > 0
                        and (ps.topology.mode or ps.topology.slices)]
        if requests:
            self._waiting[key] = _Waiting(wl.cluster_queue if wl is not None else "", requests)
            self._dirty_fit.add(key)
        elif self._waiting.pop(key, None) is not None:
            self.exposition.delete(("capacity_workload", *key))
            self._dirty_fit.add(key)

    def _note_needed(self, key: WorkloadKey, wl: Workload | None) -> None:
        entries = []
        if (wl is not None and wl.admitted and any(ps.topology is not None and ps.topology.preferred for ps in wl.podsets)
                and holds_quota(wl)):
            per_name = {ps.name: ps for ps in wl.podsets}
            for a in wl.assignments:
                ps = per_name.get(a.name)
                if ps is not None and ps.topology is not None and ps.topology.mode == "preferred" and a.domains and ps.gpus_per_pod > 0:
                    topo = a.topology
                    entries.append((ps, topo.flavor if topo is not None and topo.levels is not None else "", ps.topology.preferred))
        if entries:
            if self._needed.get(key) != entries:
                self._needed[key] = entries
                self._dirty_fit.add(key)
        elif self._needed.pop(key, None) is not None:
            self.exposition.delete(("capacity_workload", *key))
            self._dirty_fit.add(key)

    def _candidate_flavors(self, level: str, slice_level: str) -> list[Candidates]:
        """TAS flavors whose Topology has both levels; one catch-all (every GPU node with the level
        labels) when none is known."""
        found = self._flavor_cache.get((level, slice_level))
        if found is None:
            found = self._flavor_cache[(level, slice_level)] = self._find_flavors(level, slice_level)
        return found

    def _find_flavors(self, level: str, slice_level: str) -> list[Candidates]:
        out = []
        for f in sorted(self._flavors.values(), key=lambda f: f.name):
            topo = self._topologies.get(f.topology_name) if f.topology_name else None
            if topo is not None and level in topo.levels and slice_level in topo.levels:
                out.append(Candidates(f.name, tuple(sorted(f.node_labels.items())), topo.levels, f.tolerations))
        if not out:
            out.append(Candidates("", (), tuple(dict.fromkeys((level, slice_level))), ()))
        return out

    def _candidate_hosts(self, c: Candidates, selector: tuple[tuple[str, str], ...]) -> list[Host]:
        key = (c, selector)
        found = self._candidates_cache.get(key)
        if found is None:
            want = (*c.node_labels, *selector)
            found = self._candidates_cache[key] = [
                h for h in self.hosts.values()
                if all(h.labels.get(k) == v for k, v in want) and all(lv in h.labels or lv == HOSTNAME_LABEL for lv in c.levels)]
        return found

    def _usable_free(self, hostname: str, host: Host, tolerations: tuple[Toleration, ...]) -> float:
        """Free GPUs of a candidate host for pods with these tolerations (0 where they cannot go)."""
        if not host.ready or host.unschedulable or host.node in self._unhealthy:
            return 0.0
        if host.taints and any(not tolerated(t, tolerations) for t in host.taints):
            return 0.0
        return max(0.0, host.gpus - self._used.get(hostname, 0))

    def _update_fit_states(self, hosts: set[str]) -> None:
        for state in self._fit_states.values():
            members = state.members
            for hostname in hosts:
                if hostname in members:
                    host = self.hosts[hostname]
                    state.put(hostname, host.path, self._usable_free(hostname, host, state.tolerations))
        if self._extra:
            for state in self._fit_states.values():
                state.stale = True

    def _level_fit(self, c: Candidates, level: int, slice_level: int, gpus: float, size: int,
                   tolerations: tuple[Toleration, ...], selector: tuple[tuple[str, str], ...]) -> LevelFit | None:
        key = (c, level, slice_level, gpus, size, tolerations, selector)
        state = self._fit_states.get(key)
        if state is None:
            state = self._fit_states[key] = _FitState(level, slice_level, gpus, size, (*c.tolerations, *tolerations))
            for host in self._candidate_hosts(c, selector):
                path = host.path
                if path[level][1] and path[slice_level][1]:
                    hostname = path[-1][1]
                    state.put(hostname, path, self._usable_free(hostname, host, state.tolerations))
        return state.result(c.flavor, {d: v for d, v in self._extra.items() if len(d) == level + 1} if self._extra else {})

    def podset_fit(self, ps: PodSet) -> PodSetFit | None:
        """How the free capacity answers one pod set's topology request now (None: it names no
        level gangscope knows, or asks for no GPUs)."""
        tr = ps.topology
        if tr is None or ps.gpus_per_pod <= 0 or ps.count <= 0 or not self.hosts:
            return None  # no GPU node known (a dump without Nodes): nothing to say
        levels = self._levels()
        keys, aliases = levels.keys, levels.aliases
        slice_key, size = tr.slices[0] if tr.slices else (keys[-1], 1)
        size = size if size > 0 else 1
        mode = tr.mode or ("slices" if tr.slices else "")
        level_key = tr.level or (keys[0] if tr.slices else keys[-1])  # Kueue: slices alone -> top, unconstrained -> lowest
        if not mode or level_key not in keys or slice_key not in keys:
            return None
        level, slice_level = keys.index(level_key), keys.index(slice_key)
        if level > slice_level:
            return None  # Kueue rejects a slice level above the pod set's level (tas_flavor_snapshot.go:947-949)
        needed = ps.count // size
        best: LevelFit | None = None
        domain_fit = cluster_fit = False
        selector = tuple(sorted(ps.node_selector.items()))
        for c in self._candidate_flavors(level_key, slice_key):
            fit = self._level_fit(c, level, slice_level, ps.gpus_per_pod, size, ps.tolerations, selector)
            if fit is None:
                continue
            domain_fit |= fit.best >= needed
            cluster_fit |= fit.total >= needed
            if best is None or (fit.best >= needed, fit.best, fit.total) > (best.best >= needed, best.best, best.total):
                best = fit
        if mode in ("unconstrained", "slices"):
            domain_fit = cluster_fit  # no level to keep the pods in: anywhere they fit will do
        return PodSetFit(ps.name, mode, aliases[level] if tr.level else "", ps.count, ps.gpus_per_pod,
                         aliases[slice_level], size, needed, best, domain_fit, cluster_fit)

    def workload_fit(self, wl: Workload) -> list[PodSetFit]:
        """Every evaluable pod set of ``wl`` (explain); flushes first so the numbers are current.
        None where this collector does not see every Workload (a shard, a namespaced install, a
        live explain without the right to list them): other Workloads' GPUs would look free."""
        if not self.complete:
            return []
        self.flush()
        return [f for f in (self.podset_fit(ps) for ps in wl.podsets) if f is not None]

    def _needed_domains(self, flavor: str, level_key: str, gpus: float, pods: int) -> int | None:
        levels = self._levels()
        if level_key not in levels.keys:
            return None
        level = levels.keys.index(level_key)
        key = (flavor, level, gpus)
        prefix = self._needed_cache.get(key)
        if prefix is None:
            cands = [c for c in self._candidate_flavors(level_key, level_key) if c.flavor == flavor] or \
                self._candidate_flavors(level_key, level_key)
            per_domain: dict[Path, float] = {}
            for c in cands:
                for host in self._candidate_hosts(c, ()):
                    if host.path[level][1]:
                        domain = host.path[: level + 1]
                        per_domain[domain] = per_domain.get(domain, 0) + host.gpus // gpus
            prefix, total = [], 0
            for pods_in in sorted(per_domain.values(), reverse=True):
                total += int(pods_in)
                prefix.append(total)
            self._needed_cache[key] = prefix
        for i, total in enumerate(prefix):
            if total >= pods:
                return i + 1
        return len(prefix) or None

    def _render_fits(self, recheck: bool) -> None:
        """Render the Workloads whose entries changed (``_dirty_fit``), and, when free GPUs moved
        (``recheck``), every waiting Workload whose answer changed with them."""
        dirty, self._dirty_fit = self._dirty_fit, set()
        keys = dirty | set(self._waiting) if recheck else dirty
        blocked_changed = False
        levels = self._levels()
        memo: dict[Any, PodSetFit | None] = {}  # pod sets that ask the same get the same answer

        def podset_fit(ps: PodSet, shape: Any) -> PodSetFit | None:
            if shape not in memo:
                memo[shape] = self.podset_fit(ps)
            return memo[shape]

        for key in keys:
            changed = key in dirty
            waiting = self._waiting.get(key)
            if waiting is not None and self.complete:
                fits = [f for f in (podset_fit(ps, shape) for ps, shape in waiting.requests) if f is not None]
                result = None
                if fits:
                    cluster = all(f.cluster_fit for f in fits)
                    result = (all(f.domain_fit for f in fits), cluster,
                              next((f.level for f in fits if f.mode == "required" and f.fragmented), "") if cluster else "")
                if result != waiting.result:
                    blocked_changed |= (waiting.result or (0, 0, ""))[2] != (result or (0, 0, ""))[2]
                    waiting.result = result
                    changed = True
            elif waiting is None and changed:
                blocked_changed = True  # it may have been counted while it waited
            if not changed:
                continue
            lines: dict[Family, list[str]] = {}
            if waiting is not None and waiting.result is not None and self.complete:
                lines[WORKLOAD_FIT] = [WORKLOAD_FIT.sample((key[0], key[1], "domain"), int(waiting.result[0])),
                                       WORKLOAD_FIT.sample((key[0], key[1], "cluster"), int(waiting.result[1]))]
            for ps, flavor, level_key in self._needed.get(key, ()):
                n = self._needed_domains(flavor, level_key, ps.gpus_per_pod, ps.count)
                if n is not None:
                    lines.setdefault(WORKLOAD_DOMAINS_NEEDED, []).append(WORKLOAD_DOMAINS_NEEDED.sample(
                        (key[0], key[1], ps.name, levels.alias(level_key) or level_key), n))
            if lines:
                self.exposition.set(("capacity_workload", *key), lines)
            else:
                self.exposition.delete(("capacity_workload", *key))
        if recheck:  # shapes no waiting Workload asks for any more
            used = {key for key, state in self._fit_states.items() if not state.stale}
            for key in [k for k in self._fit_states if k not in used]:
                del self._fit_states[key]
        if blocked_changed:
            self._render_blocked()

    def _render_blocked(self) -> None:
        if not self.complete:
            self.exposition.delete(_BLOCKED_OWNER)
            return
        counts: dict[tuple[str, str], int] = {}
        for waiting in self._waiting.values():
            if waiting.result is not None and waiting.result[2]:
                k = (waiting.cluster_queue, waiting.result[2])
                counts[k] = counts.get(k, 0) + 1
        self.exposition.set(_BLOCKED_OWNER, {FRAGMENTATION_BLOCKED: [
            FRAGMENTATION_BLOCKED.sample((cq, level), n)
            for (cq, level), n in sorted(counts.items())]})


def _same_usage(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x[0] is y[0] and x[1] == y[1] for x, y in zip(a, b))


def _count(n: float, word: str) -> str:
    return f"{format_value(n)} {word if n == 1 else _plural(word, 2)}"


def fit_text(f: PodSetFit) -> str:
    """explain's sentence for one pod set: "needs 8 pods x 8 GPUs in one rack (required); the
    largest free rack, rack-2-1, fits 5; 96 GPUs are free across 4 racks: fragmented"."""
    what = f"{_count(f.pods, 'pod')} x {_count(f.gpus_per_pod, 'GPU')}"
    sliced = f.slice_size > 1
    if sliced:
        what += f" in slices of {f.slice_size} pods per {f.slice_level}"
    if f.mode == "required":
        text = f"needs {what} in one {f.level} (required)"
    elif f.mode == "preferred":
        text = f"needs {what}, preferably in one {f.level} (preferred)"
    else:
        text = f"needs {what} ({'slices only' if f.mode == 'slices' else 'unconstrained'})"
    fit = f.fit
    if fit is None:
        return text + "; no node of a flavor with that level is known"
    level = f.level or f.slice_level
    if f.level:
        text += f"; the largest free {f.level}, {fit.best_domain[-1][1]}, fits {fit.best}" + (" slices" if sliced else "")
    text += f"; {_count(fit.free_gpus, 'GPU')} {'is' if fit.free_gpus == 1 else 'are'} free across {_count(fit.domains_with_free, level)}"
    if f.domain_fit and (f.mode != "preferred" or fit.best >= f.needed):
        return text + ": it fits now"
    if f.cluster_fit:
        return text + (f": it fits now, spread over several {_plural(f.level, 2)}" if f.mode == "preferred" else ": fragmented")
    return text + f": not enough free GPUs ({fit.total} of {_count(f.needed, 'slice' if sliced else 'pod')} fit)"
