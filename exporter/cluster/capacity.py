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
* **placeable pods** of each size in ``--placement-sizes``: per host ``free // size``, at most the
  host's allocatable ``pods`` not taken, summed, the way Kueue counts the pods a leaf domain fits
  (tas_flavor_snapshot.go:896-899, 1899-1928, 1930-1995);
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

**Fit.** The waiting Workloads' fits are :class:`.fits.Fits`'s: at each flush this module gives
it the cluster as Kueue's placement reads it (:mod:`.tas_fit`): per GPU node its allocatable
resources, taints and readiness, and the usage on it, the admitted Workloads' pods x requests (and
a ``pods`` unit each) on the hosts of their assignments plus the requests of the bound non-TAS pods
the pod store holds (Kueue's non-TAS usage, pod_usage_controller.go:158-173), one snapshot per
flavor and state of the cluster.

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

from ..exposition import Exposition, Family, LabelPairs
from ..taints import Taint, Toleration, tolerated, untolerated
from ..topology import HOSTNAME_LABEL
from .fits import FitReport, Fits
from .node_loss import NodeHealth, why
from .tas_fit import FitFlavor, FitNode, FlavorSnapshot
from .workload_state import holds_quota

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
    "rounded down, and no more than the node's allocatable pods allow (for each of --placement-sizes); for a single "
    "host only where that differs from free // size: host:gangscope_domain_placeable_pods:sum records every host.",
    ("level", "gpus_per_pod"), topology=True,
)
DOMAINS = Family(
    "gangscope_domains", "gauge",
    "Topology domains of each level by state: free (nothing used), partial, full (no free GPU) and unavailable (every "
    "GPU unavailable).",
    ("level", "state"),
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
NODE_NOT_READY = Family(
    "gangscope_node_not_ready", "gauge",
    "1 per GPU node whose Ready condition is not True (exporter/cluster/node_loss.py), by why: unreachable (the node "
    "lifecycle controller's unreachable taint: Ready Unknown), not ready (its not-ready taint: Ready False) or "
    "not ready, not yet tainted (before the controller's taint); absent while Ready. The rules join it to the Workloads whose GPUs are there.",
    ("node", "why"), topology=True,
)
FAMILIES = (DOMAIN_GPUS, DOMAIN_BOUND, DOMAIN_PLACEABLE, DOMAINS, WORKLOAD_DOMAINS_NEEDED, NODE_NOT_READY)

_DOMAINS_OWNER = ("capacity_domains",)


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
                 shard: int = 0, total_shards: int = 1,
                 queue_flavors: Callable[[str], tuple[str, ...] | None] | None = None) -> None:
        self.exposition = exposition
        exposition.register(*FAMILIES)
        self._skip = exposition.filtered(FAMILIES)  # --metric-denylist: never formatted
        self.fits = Fits(exposition, lambda key: self._levels().alias(key))
        # The flavors of a ClusterQueue, in spec order (None: the queue is not known).
        self._queue_flavors = queue_flavors or (lambda _cq: None)
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
        self._upper_keys: dict[tuple[int, Path], tuple[int, Path]] = {}  # see _host_domains
        self._state_counts: list[dict[str, int]] = []
        self._dirty_hosts: set[str] = set()
        self._dirty_domains: set[tuple[int, Path]] = set()
        self._needed: dict[WorkloadKey, list[tuple[PodSet, str, Any]]] = {}  # admitted, preferred: (pod set, flavor, level key)
        self._dirty_needed: set[WorkloadKey] = set()
        # The fit's view (see module doc): usage per hostname of the admitted Workloads, every
        # resource; per flavor the snapshot of the current state.
        self._tas_usage: dict[str, dict[str, int]] = {}
        self._snapshots: dict[str, FlavorSnapshot] = {}
        self._fit_flavors: dict[str, FitFlavor] | None = None
        self._fit_dirty = False  # the cluster changed since the fits were last evaluated
        self._needed_cache: dict[Any, list[int]] = {}
        self._candidates_cache: dict[Any, list[Host]] = {}
        self._flavor_cache: dict[tuple[str, str], list[Candidates]] = {}
        self._capacity_changed = False  # a host's capacity, path or labels: domains needed change
        self._free_changed = False  # a host's free GPUs or availability: fits change
        self._loop: asyncio.AbstractEventLoop | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._hold = 0
        self._pods: PodStore | None = None
        self._non_tas_seen: dict[str, Mapping[str, int]] = {}  # node -> its non-TAS usage last seen
        self._fit_nodes: dict[str, FitNode] = {}  # node name -> what the placement reads of it (every Node)
        self._not_ready: dict[str, Node] = {}  # node name -> the GPU Node, while gangscope_node_not_ready is exported
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
            self._dirty_needed.update(self._needed)
            self._fit_dirty = True
            if not self.complete:
                self.fits.forget_all()
            self._render_domain_counts()
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
                self._non_tas_changed(node)
        if (changes is None or changes.covered) and (pods := self._pods) is not None:
            self._non_tas_seen = {n: dict(pods.non_tas_usage_on(n)) for n in self._fit_nodes}
            self._snapshots.clear()
            self._fit_dirty = True
        self._schedule()
        self.settle()

    def _non_tas_changed(self, node: str) -> None:
        """A watched pod on ``node`` came, went or changed: the fit's snapshots are stale."""
        new = self._pods.non_tas_usage_on(node) if self._pods is not None else {}
        old = self._non_tas_seen.get(node, {})
        if new == old:
            return
        self._non_tas_seen[node] = dict(new)
        self._snapshots.clear()
        self._fit_dirty = True

    def _node_fit(self, name: str, node: Node | None) -> None:
        """Keep what the placement reads of every Node (its record shared, so equal Nodes cost little)."""
        old = self._fit_nodes.get(name)
        if node is None:
            if self._fit_nodes.pop(name, None) is not None:
                self._snapshots.clear()
                self._fit_dirty = True
            return
        if old is not None and (old.allocatable, old.taints, old.ready, old.unschedulable, old.labels, old.ready_reported) == (
                node.allocatable, node.taints, node.ready, node.unschedulable, node.labels, node.ready_reported):
            return  # a heartbeat: nothing the placement reads
        self._fit_nodes[name] = _fit_node(node)
        self._snapshots.clear()
        self._fit_dirty = True

    def node_health(self, name: str) -> NodeHealth | None:
        """What exporter.cluster.node_loss reads of the Node ``name``; None where it is not among
        the objects or reports no Ready condition (a metadata-only object)."""
        fit = self._fit_nodes.get(name)
        if fit is None or not fit.ready_reported:
            return None
        path = tuple(pair for pair in self._levels().labels_from_node(fit.labels, name) if pair[1])
        return NodeHealth(name, fit.ready, tuple(t.key for t in fit.taints), path)

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
        self.hold()
        try:
            yield
        finally:
            self.release()

    def hold(self) -> None:
        """Hold every flush, timer or not, until :meth:`release` (the collector's first sync: a
        timer flush every second while the LISTs arrive rendered each domain about twice before
        the sync ended, bench/collector.py; held, each is rendered once)."""
        self._hold += 1
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def release(self) -> None:
        """End a :meth:`hold`; the last one flushes (offline at once, in the collector by its timer)."""
        self._hold -= 1
        if not self._hold:
            self.settle()
            self._schedule()

    def settle(self) -> None:
        """End of a handler call: flush now offline; the collector's timer does it otherwise."""
        if self._loop is None and not self._hold:
            self.flush()

    def _schedule(self) -> None:
        if self._loop is not None and self._timer is None and not self._hold and self._pending_work():
            self._timer = self._loop.call_later(FLUSH_DELAY, self.flush)

    def _pending_work(self) -> bool:
        return bool(self._dirty_hosts or self._dirty_domains or self._dirty_needed or self._capacity_changed
                    or self._free_changed or self._fit_dirty or self.fits.pending)

    # ---- inputs ---------------------------------------------------------------------------------

    def node_changed(self, name: str, node: Node | None) -> None:
        """A Node was put (``node``) or deleted (None); only GPU nodes are hosts, every Node is in
        the fit's view (Kueue places pod sets that request no GPU too)."""
        self._node_fit(name, node)
        self._render_not_ready(name, node)
        hostname = node.hostname if node is not None and node.gpu_node else None
        old = self._node_host.pop(name, None)
        if old is not None and old != hostname:
            self._drop_host(old, name)
        if node is None or hostname is None:
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

    def _render_not_ready(self, name: str, node: Node | None) -> None:
        """``gangscope_node_not_ready`` of one Node: shard 0 exports it for a GPU node that reports
        a Ready condition other than True (0 series in a healthy cluster)."""
        owner = ("node_not_ready", name)
        health = self.node_health(name) if node is not None and node.gpu_node and self.node_owner else None
        if node is None or health is None or health.ready or NODE_NOT_READY in self._skip:
            if self._not_ready.pop(name, None) is not None:
                self.exposition.delete(owner)
            return
        self._not_ready[name] = node
        path = tuple(self._levels().labels_from_node(node.labels, name))
        self.exposition.set(owner, {NODE_NOT_READY: [NODE_NOT_READY.sample((name, why(health)), 1, self._fragment(path))]})

    def _drop_host(self, hostname: str, node: str) -> None:
        host = self.hosts.get(hostname)
        if host is None or host.node != node:
            return
        del self.hosts[hostname]
        self._unapply(host)
        self._free_changed = self._capacity_changed = True
        self._snapshots.clear()
        self._fit_dirty = True
        self._candidates_cache.clear()
        self._schedule()

    def levels_changed(self) -> None:
        """Topology levels or Nodes' labels changed: every host's path is read again."""
        levels = self._levels()
        for name, node in list(self._not_ready.items()):
            self._render_not_ready(name, node)
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
        self._snapshots.clear()
        self._fit_dirty = True
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
        self._snapshots.clear()
        self._fit_flavors = None
        self._fit_dirty = True
        self._schedule()

    def cluster_queue_changed(self, name: str) -> None:
        """A ClusterQueue was put with other flavors, or deleted: the fits of its Workloads depend on them."""
        self.fits.queue_changed(name)
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
        self.fits.note(key, wl)
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
            ps = podsets[0]
            return tuple((a.placed, ps.gpus_per_pod, ps.requests) for a in wl.assignments if a.placed and a.name == ps.name)
        per_name = {ps.name: ps for ps in podsets}
        return tuple((a.placed, per_name[a.name].gpus_per_pod, per_name[a.name].requests)
                     for a in wl.assignments if a.placed and a.name in per_name)

    def _apply_usage(self, usage: tuple[Any, ...], sign: int) -> None:
        """Add (``sign`` 1) or take back (-1) a Workload's GPUs per host. This runs for each of
        tens of thousands of Workloads in a LIST: one loop, no call per host."""
        used, hosts, dirty, tas = self._used, self.hosts, self._dirty_hosts, self._tas_usage
        for placed, per_pod, requests in usage:
            gpus = sign * per_pod
            for path, pods in placed:
                host = path[-1][1]
                if host:  # every resource, and a pods unit per pod (tas_flavor.go:283-306)
                    u = tas.get(host)
                    if u is None:
                        u = tas[host] = {}
                    n = sign * pods
                    for k, v in requests.items():
                        u[k] = u.get(k, 0) + n * v
                    u["pods"] = u.get("pods", 0) + n
                    if u["pods"] <= 0:
                        del tas[host]
                    self._snapshots.clear()
                    self._fit_dirty = True
                if gpus == 0:
                    continue
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
            # Each pod also takes one of the node's allocatable pods (tas_flavor_snapshot.go:896-899):
            # those the admitted Workloads and the watched non-TAS pods hold are gone.
            pods_free = self._free_pods(hostname, host)
            return (cap, 0, used, free, bound, *(min(free // s, pods_free) for s in self.sizes))
        return (cap, cap, used, 0, bound, *(0 for _ in self.sizes))

    def _free_pods(self, hostname: str, host: Host) -> float:
        node = self._fit_nodes.get(host.node)
        if node is None or "pods" not in node.allocatable:
            return float("inf")  # a Node record without it (a trimmed dump): GPUs alone decide
        taken = self._tas_usage.get(hostname, {}).get("pods", 0)
        if self._pods is not None:
            taken += self._pods.non_tas_usage_on(host.node).get("pods", 0)
        return max(0, node.allocatable["pods"] - taken)

    # ---- domains --------------------------------------------------------------------------------

    def _reset_domains(self) -> None:
        for level, domains in enumerate(self._domains):
            for path in domains:
                self.exposition.delete(("capacity_domain", level, path))
        n = len(self._levels().keys)
        self._domains = [{} for _ in range(n)]
        self._upper_keys.clear()
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
        applied = host.applied
        if applied == numbers and host.domains:
            return
        if applied is not None and host.domains:
            # Applied to the domains of its present path (a new path unapplies first, _unapply):
            # add what moved, where it moved. Under churn a host's used GPUs change and its
            # capacity does not: taking the old numbers back and adding the new ones cost twice.
            self._shift(host.domains, [(i, n - o) for i, (n, o) in enumerate(zip(numbers, applied)) if n != o])
        else:
            domains = self._host_domains(host.path)
            if applied is not None:
                self._apply(host.domains, applied, -1)
            self._apply(domains, numbers, 1)
            host.domains = domains
        host.applied = numbers

    def _host_domains(self, path: Path) -> tuple[tuple[int, Path], ...]:
        """(level, domain path) of each level of ``path`` the host has a value at. The keys of the
        levels above the host are one object for all the hosts of a domain: each host keeps its
        tuple, and made per host they were 5 MiB of the benchmark cluster's 16,384 hosts."""
        last, keys, out = len(path) - 1, self._upper_keys, []
        for i in range(len(path)):
            if path[i][1]:
                key = (i, path[: i + 1])  # the host's own level: its whole path, no new tuple
                out.append(key if i == last else keys.setdefault(key, key))
        return tuple(out)

    def _shift(self, domains: tuple[tuple[int, Path], ...], changes: list[tuple[int, float]]) -> None:
        """Add ``changes`` ((index, difference) of a host's numbers) to the domains it is applied to."""
        tables, dirty = self._domains, self._dirty_domains
        for level, path in domains:
            sums = tables[level][path].sums
            for i, d in changes:
                sums[i] += d
            dirty.add((level, path))

    def flush(self) -> None:
        """Apply the dirty hosts to their domains, render what changed, evaluate fits."""
        if self._timer is not None:  # called directly (explain, the first sync): the timer has nothing left
            self._timer.cancel()
            self._timer = None
        dirty_hosts, self._dirty_hosts = self._dirty_hosts, set()
        for hostname in dirty_hosts:
            self._refresh_host(hostname)
        if self._capacity_changed:
            self._capacity_changed = False
            self._needed_cache.clear()
            self._dirty_needed.update(self._needed)
        self._free_changed = False
        dirty, self._dirty_domains = self._dirty_domains, set()
        if dirty:
            counts_changed = False
            for level, path in dirty:
                counts_changed |= self._render_domain(level, path)
            if counts_changed:
                self._render_domain_counts()
        if self._dirty_needed:
            self._render_needed()
        if self.complete and (self._fit_dirty or self.fits.pending):
            cluster_changed, self._fit_dirty = self._fit_dirty, False
            self.fits.evaluate(cluster_changed, self._queue_flavors, self.fit_flavors(), self.snapshot, bool(self._fit_nodes))

    # ---- the fit's view (see module doc) --------------------------------------------------------

    def workload_fit(self, wl: Workload) -> FitReport | None:
        """explain's fit of a waiting Workload, current (flushes first); None where this collector
        does not see every Workload (a shard, a namespaced install): others' usage would look free."""
        if not self.complete:
            return None
        self.flush()
        return self.fits.report(wl.key)

    def fit_flavors(self) -> dict[str, FitFlavor]:
        """The TAS ResourceFlavors whose Topology is known, as the placement reads them."""
        if self._fit_flavors is None:
            out = {}
            for f in self._flavors.values():
                topo = self._topologies.get(f.topology_name) if f.topology_name else None
                if topo is not None and topo.levels:
                    out[f.name] = FitFlavor(f.name, topo.name, tuple(topo.levels), dict(f.node_labels), f.tolerations)
            self._fit_flavors = out
        return self._fit_flavors

    def snapshot(self, flavor: FitFlavor) -> FlavorSnapshot:
        """The flavor's free capacity now (one per flavor until the cluster changes)."""
        snap = self._snapshots.get(flavor.name)
        if snap is None or snap.flavor != flavor:
            pods, tas = self._pods, self._tas_usage
            usage: dict[str, Mapping[str, int]] = {}
            for name, fit_node in self._fit_nodes.items():
                u = tas.get(fit_node.labels.get(HOSTNAME_LABEL) or name)
                other = pods.non_tas_usage_on(name) if pods is not None else None
                if u and other:
                    merged = dict(u)
                    for k, v in other.items():
                        merged[k] = merged.get(k, 0) + v
                    usage[name] = merged
                elif u or other:
                    usage[name] = u or other  # type: ignore[assignment]
            # Kueue's snapshot reads the Nodes alone (tas_nodes_cache.go:58-66); another Workload's
            # unhealthyNodes do not keep a node out of it.
            snap = self._snapshots[flavor.name] = FlavorSnapshot(flavor, self._fit_nodes.values(), usage)
        return snap

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
        # A host's free GPUs follow from its other numbers (capacity minus unavailable minus used)
        # and so do its placeable pods (free // size) unless its allocatable pods bind first: the
        # recording rules derive them (alerts/config.yaml, capacity); a host exports its placeable
        # pods of a size only where they differ from free // size. 5 series per Node otherwise.
        host_level = self._levels().keys[level] == HOSTNAME_LABEL
        label, topology = path[-1][0], self._fragment(path)  # the level's label name
        skip = self._skip
        lines: dict[Family, list[str]] = {}
        if DOMAIN_GPUS not in skip:
            lines[DOMAIN_GPUS] = [
                DOMAIN_GPUS.sample((label, name), value, topology) for name, value in zip(STATES, (cap, unavailable, used, free))
                if name == "used" or (name == "free" and self.complete and not host_level)
                or (name in ("capacity", "unavailable") and self.node_owner)]
        if self.bound_known and DOMAIN_BOUND not in skip:
            lines[DOMAIN_BOUND] = [DOMAIN_BOUND.sample((label,), dom.sums[_BOUND], topology)]
        if self.complete and DOMAIN_PLACEABLE not in skip:
            placeable = dom.sums[_PLACEABLE:]
            if dom.extra_used:  # usage not on a host: take it from the largest sizes' count too
                placeable = [max(0.0, p - dom.extra_used // s) for p, s in zip(placeable, self.sizes)]
            pairs = list(zip(self.sizes, placeable))
            if host_level:
                pairs = [(s, p) for s, p in pairs if p != free // s]
            if pairs:
                lines[DOMAIN_PLACEABLE] = [DOMAIN_PLACEABLE.sample((label, str(s)), p, topology) for s, p in pairs]
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
                self._dirty_needed.add(key)
        elif self._needed.pop(key, None) is not None:
            self.exposition.delete(("capacity_workload", *key))

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

    def _render_needed(self) -> None:
        """The domains-needed series of the admitted Workloads whose entries changed."""
        dirty, self._dirty_needed = self._dirty_needed, set()
        levels = self._levels()
        for key in dirty:
            lines: dict[Family, list[str]] = {}
            for ps, flavor, level_key in self._needed.get(key, ()):
                n = self._needed_domains(flavor, level_key, ps.gpus_per_pod, ps.count)
                if n is not None:
                    lines.setdefault(WORKLOAD_DOMAINS_NEEDED, []).append(WORKLOAD_DOMAINS_NEEDED.sample(
                        (key[0], key[1], ps.name, levels.alias(level_key) or level_key), n))
            if lines:
                self.exposition.set(("capacity_workload", *key), lines)
            else:
                self.exposition.delete(("capacity_workload", *key))


def _same_usage(a: tuple[Any, ...], b: tuple[Any, ...]) -> bool:
    return len(a) == len(b) and all(x[0] is y[0] and x[1] == y[1] and x[2] == y[2] for x, y in zip(a, b))


def _fit_node(node: Node) -> FitNode:
    return FitNode(node.name, node.labels, node.allocatable, node.taints, node.ready, node.unschedulable, node.ready_reported)
