"""The collector's state: every Kueue object it watches, as records, rendered into the exposition.

API (for the gang join, explain and the collector main)::

    store = ClusterStore(exposition, gpu_resources=("nvidia.com/gpu",),
                         level_keys=(),            # --topology-levels; empty: from Topology objects
                         alias_overrides={},       # --topology-alias
                         eviction_level=None,      # --eviction-level; None: the level above the host
                         eviction_grace=3600.0,    # --eviction-domain-grace
                         placement_sizes=(1, 2, 4, 8),  # --placement-sizes
                         shard=0, total_shards=1,  # which Workloads this collector sees (exporter.cluster.capacity)
                         clock=time.time)
    handlers = store.handlers()                    # {source name: ResourceHandler}, sources as in
                                                   # exporter.kube.resources (workloads, localqueues,
                                                   # topologies, resourceflavors, clusterqueues, cohorts, nodes)
    handlers["workloads"].replace(objects)         # a full LIST (objects not in it are deleted)
    handlers["workloads"].apply("MODIFIED", obj)   # one watch event: ADDED | MODIFIED | DELETED
    handlers["workloads"].health = SourceHealth(...)   # where parse errors are counted (optional)
    store.start_timers() / store.stop_timers()     # inside the collector's loop: backoff ends, domain pruning,
                                                   # capacity flushes
    store.capacity                                 # exporter.cluster.capacity.Capacity: GPUs per domain, fits

    store.workload(namespace, name) -> Workload | None        # exporter.cluster.workloads.Workload
    store.workloads                                            # dict[(namespace, name), Workload]
    store.workloads_by_owner_uid(uid) -> list[Workload]        # controller owner uid or label kueue.x-k8s.io/job-uid
    store.workloads_by_owner_name(namespace, name) -> list[Workload]
    store.local_queues / store.topologies / store.flavors / store.nodes   # dicts of records
    store.cluster_queues: dict[str, ClusterQueue]  # exporter.cluster.clusterqueues (spec order of flavors,
                                                   # quotas, Active condition); store.cohorts likewise
    store.levels -> TopologyLevels; store.node_path(node_name) -> Path; store.fragment(path) -> LabelPairs
    store.queue_positions                          # (namespace, name) -> QueuePosition (the visibility poller's)
    store.on_workload_change: list[Callable[[tuple[str, str]], None]]   # after a Workload is set,
        # re-rendered or deleted (then store.workload() returns None); key = (namespace, name)
    store.on_topology_change: list[Callable[[], None]]   # after the topology levels (or a flavor's Topology) change
    store.pods_assembling: list[PodsAssembling]     # gang (or pod) signals for admitted Workloads
        # without PodsReady; store.refresh(key) after a signal changes

Every event renders the affected objects' lines into the :class:`Exposition` at once (owner key
``("workload", namespace, name)``); a scrape never renders. Each Workload's meaning (stage,
pending reason) comes from :func:`exporter.cluster.workload_state.workload_state`, computed when
it is rendered; a backoff that ends re-renders it by a timer. Nothing raised by a malformed
object leaves a handler: it is counted in ``gangscope_parse_errors_total{source}`` and logged; an
exception of any other type is a bug, counted in ``gangscope_internal_errors_total{component=<source>}``.

Two things outlive the objects Kueue shows: the last topology assignment of each Workload
(Kueue clears ``status.admission`` when it evicts), and ``gangscope_topology_evictions_total``,
which attributes each eviction (a ``status.schedulingStats.evictions`` count going up) once to
each domain, at ``eviction_level``, where it happened (:mod:`exporter.cluster.evictions`). A
domain that no Node has any more is dropped ``eviction_grace`` seconds later, so the counter's
series do not outlive the cluster.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import msgspec
import structlog

from ..exposition import Exposition, Family, LabelPairs, topology_pairs
from ..fields import ParseError
from ..health import SourceHealth
from ..topologies import (
    FlavorTopology, ResourceFlavor, Topology, merge_levels, parse_resource_flavor, parse_topology, resolve_flavor_topology,
)
from ..topology import HOSTNAME_LABEL, DomainPaths, TopologyError, TopologyLevels
from .capacity import DEFAULT_PLACEMENT_SIZES, Capacity
from .clusterqueues import FAMILIES as CLUSTER_QUEUE_FAMILIES
from .clusterqueues import ClusterQueue, Cohort, QueuePosition, parse_cluster_queue, parse_cohort, render_cluster_queue
from .evictions import NODE_FAILURES, eviction_domains, failed_nodes, new_evictions
from .localqueues import LocalQueue, parse_local_queue
from .multimap import MultiMap
from .node_doc import NodeDoc, read_node
from .nodes import Node
from .object_labels import WORKLOAD_LABELS, LabelsAllowlist
from .workload_state import PodsAssembling, workload_state
from .unchanged import digest
from .workload_doc import WorkloadDoc, as_doc, read_workload
from .workloads import (
    FAMILIES, RETIRED_STAGES, TOPOLOGY_EVICTIONS, Assignment, Path, Workload, render_workload,
)

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]
R = TypeVar("R")
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
TOPOLOGY_UNRESOLVED_OWNER = ("topology_unresolved",)
DEFAULT_EVICTION_GRACE = 3600.0
DEFAULT_FINISHED_DETAIL = 0.0  # seconds a finished Workload keeps its detail series (0: none)

TOPOLOGY_UNRESOLVED = Family(
    "gangscope_topology_unresolved_workloads", "gauge",
    "Workloads exporting their placement whose topology assignment could not be expanded with their flavor's Topology "
    "levels, by flavor and problem (flavor_missing, no_topology_name, topology_missing); their series carry only the "
    "levels Kueue stored.",
    ("flavor", "topology", "problem"),
)

class ResourceHandler(Generic[R]):
    """The informer-facing adapter of one resource: ``replace`` a full list, ``apply`` one event.

    It parses, keys and hands records to the store; every failure is counted on ``health`` and
    logged, never raised: a ``ParseError`` as a parse error (the object is bad), anything else as
    an internal error (the code is).
    """

    def __init__(self, source: str, parse: Callable[[Any], R], key: Callable[[R], Any],
                 put: Callable[[R], None], remove: Callable[[Any], None], records: Mapping[Any, R],
                 finish: Callable[[], None] | None = None, raw_key: Callable[[Any], Any] | None = None,
                 doc_type: type[msgspec.Struct] | None = None, as_doc: Callable[[Any], Any] | None = None) -> None:
        self.source = source
        # With doc_type, the informer decodes LIST items into that struct (exporter.kube.typed), and
        # ``parse`` takes either form; as_doc converts each watch event's object alike where the
        # digests of both must compare (a struct's digest is not a dict's, exporter.cluster.unchanged).
        self.doc_type = doc_type
        self._as_doc = as_doc
        self.health: SourceHealth | None = None
        self._parse, self._key, self._put, self._remove, self._records = parse, key, put, remove, records
        self._finish = finish
        self._seen: set[Any] | None = None  # keys of the LIST in progress
        # With raw_key (a raw object's record key): each record's digest (exporter.cluster.unchanged),
        # so an object that changed nothing read is neither parsed nor rendered again.
        self._raw_key = raw_key
        self._digests: dict[Any, int] = {}

    def replace(self, objects: Iterable[Any]) -> None:
        """A complete LIST: set every object, delete the records it no longer contains."""
        self.begin_replace()
        self.add_page(objects)
        self.end_replace(True)

    def begin_replace(self) -> None:
        """A LIST starts; its pages follow (the informer's paged protocol, see
        :class:`exporter.kube.informer.PagedHandler`: a page is parsed and dropped as it arrives)."""
        self._seen = set()

    def add_page(self, objects: Iterable[Any]) -> None:
        seen = self._seen
        if seen is None:
            raise RuntimeError("add_page outside begin_replace/end_replace")
        as_doc = self._as_doc
        for obj in objects:
            if as_doc is not None:
                obj = as_doc(obj)
            key, fingerprint = self._unchanged(obj)
            if key is not None:
                seen.add(key)
                continue
            rec = self._record(obj)
            if rec is not None:
                seen.add(self._key(rec))
                self._set(rec, fingerprint)

    def end_replace(self, complete: bool) -> None:
        """Delete what the list did not contain, only if it arrived whole (a list that failed
        midway proves nothing about the objects its missing pages would have held)."""
        seen, self._seen = self._seen, None
        if complete and seen is not None:
            for k in [k for k in self._records if k not in seen]:
                self._digests.pop(k, None)
                self._guarded(self._remove, k)
        if self._finish is not None:
            self._guarded(self._finish)

    def apply(self, event_type: str, obj: Any) -> None:
        """One watch event; BOOKMARK and unknown types are ignored."""
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        fingerprint = None
        if self._as_doc is not None:
            obj = self._as_doc(obj)
        if event_type != "DELETED":
            key, fingerprint = self._unchanged(obj)
            if key is not None:
                return
        rec = self._record(obj)
        if rec is None:
            return
        if event_type == "DELETED":
            key = self._key(rec)
            self._digests.pop(key, None)
            self._guarded(self._remove, key)
        else:
            self._set(rec, fingerprint)
        if self._finish is not None:
            self._guarded(self._finish)

    def _unchanged(self, obj: Any) -> tuple[Any, int | None]:
        """(its key, None) when ``obj`` changes nothing read since its record was put, else
        (None, its digest: None without raw_key or for an object without a usable digest)."""
        if self._raw_key is None:
            return None, None
        fingerprint = digest(obj)
        if fingerprint is None:
            return None, None
        try:
            key = self._raw_key(obj)
            known = self._digests.get(key)  # TypeError: a name that is no string (parsing counts it)
        except (KeyError, TypeError):
            return None, None
        if known == fingerprint and key in self._records:
            return key, None
        return None, fingerprint

    def _set(self, rec: R, fingerprint: int | None) -> None:
        """Put ``rec``; keep its digest only if it went in whole (a record with problems, or one
        whose put failed, is taken again, and its problems counted, at its next event)."""
        key = self._key(rec)
        self._digests.pop(key, None)
        if self._guarded(self._put, rec) and fingerprint is not None and not getattr(rec, "problems", None):
            self._digests[key] = fingerprint

    def _record(self, obj: Any) -> R | None:
        try:
            rec = self._parse(obj)
        except ParseError as exc:
            self._count(1, str(exc), obj)
            return None
        except Exception:  # a parser bug must not stop the stream, nor pass for a bad object
            log.exception("parse_failed", source=self.source, object=_name(obj))
            self._bug()
            return None
        problems = getattr(rec, "problems", None)
        if problems:
            self._count(len(problems), "; ".join(problems[:3]), obj)
        return rec

    def _guarded(self, fn: Callable[..., None], *args: Any) -> bool:
        """Call ``fn``; False when it raised (counted and logged, never passed on)."""
        try:
            fn(*args)
        except ParseError as exc:  # e.g. Topologies whose levels collide on one label name
            self._count(1, str(exc), None)
            return False
        except Exception:
            log.exception("handler_failed", source=self.source)
            self._bug()
            return False
        return True

    def _count(self, n: int, detail: str, obj: Any) -> None:
        log.warning("object_parse_problems", source=self.source, object=_name(obj), count=n, detail=detail[:500])
        if self.health is not None:
            self.health.parse_error(n)

    def _bug(self) -> None:
        if self.health is not None:
            self.health.internal_error()


def _namespaced_key(obj: Any) -> tuple[str, str]:
    """A raw namespaced object's record key, (namespace, name); of a dict or a typed document."""
    if obj.__class__ is not dict:
        return (obj.metadata.namespace, obj.metadata.name)
    meta = obj["metadata"]
    return (meta["namespace"], meta["name"])


def _cluster_key(obj: dict) -> str:
    """A raw cluster-scoped object's record key, its name."""
    return obj["metadata"]["name"]


def _name(obj: Any) -> str:
    """``namespace/name`` of a raw object or a typed document, for logs ("" when it has no usable
    metadata)."""
    if isinstance(obj, msgspec.Struct):
        return f"{obj.metadata.namespace}/{obj.metadata.name}".lstrip("/")  # type: ignore[attr-defined]
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}".lstrip("/")
    return ""


class ClusterStore:
    """Records of Workloads, LocalQueues, Topologies, ResourceFlavors and Nodes (see module doc)."""

    def __init__(self, exposition: Exposition, *, gpu_resources: Sequence[str] = ("nvidia.com/gpu",),
                 level_keys: Sequence[str] = (), alias_overrides: Mapping[str, str] | None = None,
                 eviction_level: str | None = None, eviction_grace: float = DEFAULT_EVICTION_GRACE,
                 placement_sizes: Sequence[int] = DEFAULT_PLACEMENT_SIZES, shard: int = 0, total_shards: int = 1,
                 clock: Callable[[], float] = time.time, labels_allowlist: LabelsAllowlist | None = None,
                 finished_detail: float = DEFAULT_FINISHED_DETAIL) -> None:
        self.exposition = exposition
        self.finished_detail = finished_detail
        exposition.register(*FAMILIES, TOPOLOGY_UNRESOLVED, *CLUSTER_QUEUE_FAMILIES)
        self._skip = exposition.filtered((*FAMILIES, *CLUSTER_QUEUE_FAMILIES))  # --metric-denylist: never formatted
        # --metric-labels-allowlist: Workload labels here, PodGroup labels in the gang index
        self.labels_allowlist = labels_allowlist
        if labels_allowlist is not None:
            exposition.register(*labels_allowlist.families())
        exposition.register(TOPOLOGY_EVICTIONS)  # an owner per counter (reason, cause, domain)
        self.gpu_resources = tuple(gpu_resources)
        self.clock = clock
        self._fixed_levels = tuple(level_keys)
        self._overrides = dict(alias_overrides or {})
        self.workloads: dict[WorkloadKey, Workload] = {}
        self.local_queues: dict[tuple[str, str], LocalQueue] = {}
        self.topologies: dict[str, Topology] = {}
        self.flavors: dict[str, ResourceFlavor] = {}
        self.nodes: dict[str, Node] = {}
        self.cluster_queues: dict[str, ClusterQueue] = {}
        # ClusterQueues are cluster-scoped, so every shard reads them all: only shard 0 exports
        # their series, as it alone exports the Nodes' capacity (exporter.cluster.capacity, "Sharding").
        self.cluster_queue_owner = shard == 0
        self.cohorts: dict[str, Cohort] = {}
        self.queue_positions: dict[WorkloadKey, QueuePosition] = {}
        self.on_workload_change: list[Callable[[WorkloadKey], None]] = []
        self.on_topology_change: list[Callable[[], None]] = []
        self.pods_assembling: list[PodsAssembling] = []
        self._host_labels: dict[str, dict[str, str]] = {}  # hostname label value -> node labels
        # Workloads by host (hostname value or node name), in two steps: a gang's hosts are
        # indexed once per distinct assignment (its host group), not once per Workload.
        self._by_host = MultiMap()  # host -> host groups (see _host_groups)
        self._hosted: set[WorkloadKey] = set()  # placed and in the host index: those exporting detail (_host)
        self._by_group: dict[Any, set[WorkloadKey]] = {}  # host group -> workloads
        self._by_owner_uid = MultiMap()  # uid -> Workload keys
        self._by_owner_name = MultiMap()  # (namespace, owner name) -> Workload keys
        self._by_queue = MultiMap()  # (namespace, LocalQueue) -> Workload keys
        self._place_cache: dict[tuple[Any, ...], tuple[Path, int]] = {}
        self._fragments: dict[Path, LabelPairs] = {}
        self._resolutions: dict[tuple[str, ...], FlavorTopology] = {}  # sorted flavor names -> their Topology
        self._unresolved: dict[WorkloadKey, frozenset[tuple[str, str, str]]] = {}
        self._unresolved_counts: dict[tuple[str, str, str], int] = {}
        self._warned_unresolved: set[tuple[str, str, str]] = set()
        self._pending_nodes: set[WorkloadKey] | None = None
        self._deferred: dict[WorkloadKey, None] | None = None  # put during a Node LIST, rendered at its end
        # Evictions per domain at the eviction level (see module doc)
        self._eviction_flag = eviction_level
        self.eviction_grace = eviction_grace
        self._topology_evictions: dict[tuple[str, str, Path], int] = {}
        self._node_domain: dict[str, Path] = {}  # node name -> its domain at the eviction level
        self._domain_nodes: dict[Path, int] = {}  # domain -> nodes in it
        self._gone_since: dict[Path, float] = {}  # counted domains without a Node, since when
        # Timers (collector only): backoff ends, domain pruning
        self._loop: asyncio.AbstractEventLoop | None = None
        self._backoff_timers: dict[WorkloadKey, asyncio.TimerHandle] = {}
        self._detail_timers: dict[WorkloadKey, asyncio.TimerHandle] = {}
        self._prune_timer: asyncio.TimerHandle | None = None
        self.levels = TopologyLevels.build(self._fixed_levels, self._overrides)
        self._paths = DomainPaths(self.levels, self._host_labels)
        self.eviction_depth = self._resolve_eviction_depth()
        self._level_names: dict[str, str] = {}
        self.capacity = Capacity(exposition, lambda: self.levels, self.fragment, gpu_resources=self.gpu_resources,
                                 sizes=placement_sizes, flavors=self.flavors, topologies=self.topologies,
                                 shard=shard, total_shards=total_shards, queue_flavors=self.queue_flavors)
        self.on_workload_change.append(lambda key: self.capacity.workload_changed(key, self.workloads.get(key)))
        self.on_topology_change.append(self.capacity.levels_changed)

    def queue_flavors(self, cluster_queue: str) -> tuple[str, ...] | None:
        """The flavors of a ClusterQueue in spec order, None while it is not known (the fit is then
        unknown, never a guess). The ClusterQueue watch keeps ``cluster_queues``; a dump without
        ClusterQueues knows no queue."""
        queue = self.cluster_queues.get(cluster_queue)
        return tuple(queue.flavor_names) if queue is not None else None

    # ---- handlers -------------------------------------------------------------------------

    def handlers(self) -> dict[str, ResourceHandler]:
        """One adapter per watched resource, keyed by ``Resource.source``."""
        settle = self.capacity.settle  # after each call: offline, the capacity series are rendered then
        return {
            "workloads": ResourceHandler("workloads", lambda o: read_workload(o, self.gpu_resources),
                                         lambda w: w.key, self._put_workload, self._delete_workload, self.workloads,
                                         finish=settle, raw_key=_namespaced_key, doc_type=WorkloadDoc, as_doc=as_doc),
            "localqueues": ResourceHandler("localqueues", parse_local_queue, lambda q: q.key,
                                           self._put_local_queue, self._delete_local_queue, self.local_queues,
                                           finish=settle, raw_key=_namespaced_key),
            "topologies": ResourceHandler("topologies", parse_topology, lambda t: t.name, self._put_topology,
                                          self._delete_topology, self.topologies, finish=self._topologies_changed,
                                          raw_key=_cluster_key),
            "resourceflavors": ResourceHandler("resourceflavors", parse_resource_flavor, lambda f: f.name,
                                               self._put_flavor, self._delete_flavor, self.flavors,
                                               finish=self._flavors_changed, raw_key=_cluster_key),
            "clusterqueues": ResourceHandler("clusterqueues", parse_cluster_queue, lambda q: q.name,
                                             self._put_cluster_queue, self._delete_cluster_queue, self.cluster_queues,
                                             finish=settle, raw_key=_cluster_key),
            "cohorts": ResourceHandler("cohorts", parse_cohort, lambda c: c.name, self._put_cohort,
                                       self._delete_cohort, self.cohorts, raw_key=_cluster_key),
            "nodes": _NodeHandler("nodes", lambda o: read_node(o, self.gpu_resources), lambda n: n.name,
                                  self._put_node, self._delete_node, self.nodes, store=self, finish=settle,
                                  doc_type=NodeDoc),
        }

    # ---- timers ---------------------------------------------------------------------------

    def start_timers(self) -> None:
        """Arm the timers in the running loop: each backoff's end, and pruning of domains whose
        Nodes are gone (offline users evaluate at one instant and need none)."""
        self._loop = asyncio.get_running_loop()
        for wl in self.workloads.values():
            self._arm_backoff(wl)
            if wl.detail and wl.state is not None and wl.state.stage in RETIRED_STAGES:
                self.refresh(wl.key)  # arms its --finished-detail timer
        self._arm_prune()
        self.capacity.start(self._loop)

    def stop_timers(self) -> None:
        self.capacity.stop()
        for timers in (self._backoff_timers, self._detail_timers):
            for handle in timers.values():
                handle.cancel()
            timers.clear()
        if self._prune_timer is not None:
            self._prune_timer.cancel()
            self._prune_timer = None
        self._loop = None

    def _arm_backoff(self, wl: Workload) -> None:
        key = wl.key
        handle = self._backoff_timers.pop(key, None)
        if handle is not None:
            handle.cancel()
        until = wl.state.backoff_until if wl.state is not None else None
        if self._loop is not None and until is not None:
            self._backoff_timers[key] = self._loop.call_later(max(0.0, until - self.clock()), self.refresh, key)

    def _detail(self, wl: Workload) -> bool:
        """Whether the Workload's detail series (placement, gang, PodGroup) are exported: until it
        finishes or is deactivated, then for ``--finished-detail`` seconds from that moment (the
        Finished condition's, else the Evicted condition's lastTransitionTime), with a timer to
        drop them at the end; offline, from the clock at the one instant evaluated."""
        key = wl.key
        handle = self._detail_timers.pop(key, None)
        if handle is not None:
            handle.cancel()
        if wl.state is None or wl.state.stage not in RETIRED_STAGES:
            return True
        if self.finished_detail <= 0:
            return False
        since = next((c.last_transition_seconds for t in ("Finished", "Evicted")
                      if (c := wl.conditions.get(t)) is not None and c.status == "True"), None)
        left = (since if since is not None else self.clock()) + self.finished_detail - self.clock()
        if left <= 0:
            return False
        if self._loop is not None:
            self._detail_timers[key] = self._loop.call_later(left, self.refresh, key)
        return True

    # ---- lookups --------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> Workload | None:
        return self.workloads.get((namespace, name))

    def workloads_by_owner_uid(self, uid: str) -> list[Workload]:
        return [self.workloads[k] for k in sorted(self._by_owner_uid.of(uid))]

    def workloads_by_owner_name(self, namespace: str, name: str) -> list[Workload]:
        return [self.workloads[k] for k in sorted(self._by_owner_name.of((namespace, name)))]

    def node_path(self, node_name: str) -> Path:
        """Topology path of a node by name (upper levels empty when the Node is unknown)."""
        node = self.nodes.get(node_name)
        return tuple(self.levels.labels_from_node(node.labels if node else {}, node_name))

    def fragment(self, path: Path) -> LabelPairs:
        """The rendered, escaped label pairs of a path, cached (paths repeat across Workloads)."""
        frag = self._fragments.get(path)
        if frag is None:
            frag = self._fragments[path] = topology_pairs(path)
        return frag

    def level_name(self, key: str) -> str:
        """The label name of a topology level's node label key; the key itself when it is no level."""
        name = self._level_names.get(key)
        if name is None:
            name = self._level_names[key] = self.levels.alias(key) or key
        return name

    def flavor_topology(self, assignment: Assignment) -> FlavorTopology:
        """The Topology whose levels expand ``assignment`` (see :func:`resolve_flavor_topology`)."""
        names = tuple(sorted(set(assignment.flavors.values())))
        found = self._resolutions.get(names)
        if found is None:
            found = self._resolutions[names] = resolve_flavor_topology(names, self.flavors, self.topologies)
        return found

    def place(self, assignment: Assignment) -> list[tuple[Path, int]]:
        """Full paths (upper levels from Node labels) and pods of each domain of an assignment.

        The levels filled from Node labels are those of the assignment's own flavor's Topology
        (all levels with ``--topology-levels``; none when the Topology cannot be resolved, which
        :meth:`_note_unresolved` reports). The ``(path, pods)`` pairs are cached and shared:
        Workloads on the same hosts hold the same pairs rather than one tuple per domain each
        (hundreds of thousands in a large cluster; 41 MiB of a realistic 20,000-Workload
        cluster, bench/caches.py).
        """
        fill: frozenset[str] | None = None
        if not self._fixed_levels:
            assignment.topology = topo = self.flavor_topology(assignment)
            fill = topo.levels if topo.levels is not None else frozenset()
        levels = assignment.levels
        cache, paths, out = self._place_cache, self._paths, []
        for d in assignment.domains:
            k = (levels, d.values, d.count, fill)
            pair = cache.get(k)
            if pair is None:
                pair = cache[k] = (paths.path(levels, d.values, fill), d.count)
            out.append(pair)
        return out

    # ---- workloads ------------------------------------------------------------------------

    def _put_workload(self, wl: Workload) -> None:
        key = wl.key
        prev = self.workloads.get(key)
        if wl.admitted:
            wl.last_assignments = wl.assignments
        elif prev is not None:
            wl.last_assignments = prev.last_assignments
        if prev is not None:
            wl.failed_nodes = prev.failed_nodes  # replaced by _count_evictions on a new NodeFailures eviction
            self._count_evictions(prev, wl)
            self._unindex(prev)
        self.workloads[key] = wl
        self._index(wl)
        if self._deferred is not None:  # inside a Node LIST: placed and rendered once, at its end
            self._deferred[key] = None
        else:
            self._render(wl)

    def _delete_workload(self, key: WorkloadKey) -> None:
        prev = self.workloads.pop(key, None)
        if prev is None:
            return
        self._unindex(prev)
        for timers in (self._backoff_timers, self._detail_timers):
            handle = timers.pop(key, None)
            if handle is not None:
                handle.cancel()
        self.exposition.delete(("workload", *key))
        for cb in self.on_workload_change:
            cb(key)

    def refresh(self, key: WorkloadKey) -> None:
        """Re-render one Workload whose meaning may have changed without an event of its own
        (its backoff ended, or its gang's word on the pods changed)."""
        wl = self.workloads.get(key)
        if wl is not None:
            self._render(wl)

    def _assembling(self, key: WorkloadKey) -> bool | None:
        """The signals' combined word on an admitted Workload's pods: True if any says they are
        still assembling, else False if any says they are placed, else None."""
        answer = None
        for signal in self.pods_assembling:
            said = signal(key)
            if said:
                return True
            if said is False:
                answer = False
        return answer

    def _render(self, wl: Workload) -> None:
        """(Re)resolve what depends on other objects, render the lines, notify listeners."""
        if wl.admission_cluster_queue:
            wl.cluster_queue = wl.admission_cluster_queue
        else:
            lq = self.local_queues.get((wl.namespace, wl.queue_name))
            wl.cluster_queue = lq.cluster_queue if lq is not None else ""
        wl.unhealthy_paths = tuple(self.node_path(n) for n in wl.unhealthy_nodes)
        wl.state = workload_state(wl, self.clock(), self._assembling(wl.key) if self.pods_assembling else None,
                                  self.cluster_queues.get(wl.cluster_queue))
        self._arm_backoff(wl)
        wl.detail = self._detail(wl)
        if wl.detail:
            self._host(wl)
        else:
            self._unhost(wl)
        chunks = render_workload(wl, self.fragment, self.level_name, wl.detail, self._skip)
        if self.labels_allowlist is not None:
            line = "".join(self.labels_allowlist.lines("workloads", WORKLOAD_LABELS, wl.key, wl.labels)).encode()
            chunks.append((WORKLOAD_LABELS, line, line.count(b"\n")))
        self.exposition.set_counted(("workload", wl.namespace, wl.name), chunks)
        for cb in self.on_workload_change:
            cb(wl.key)

    def _rerender(self, keys: Iterable[WorkloadKey], replace_paths: bool) -> None:
        for key in keys:
            wl = self.workloads.get(key)
            if wl is None:
                continue
            if replace_paths and key in self._hosted:
                for a in wl.last_assignments:
                    a.placed = self.place(a)
                self._note_unresolved(wl)
            self._render(wl)

    def _host(self, wl: Workload) -> None:
        """Place a Workload that exports its detail and index it by its hosts (a Node's change
        then places and renders it again); one that already is, stays as it is."""
        key = wl.key
        if key in self._hosted:
            return
        for a in wl.last_assignments:
            if not a.placed and a.domains:
                a.placed = self.place(a)
        self._note_unresolved(wl)
        self._index_hosts(key, wl)
        self._hosted.add(key)

    def _unhost(self, wl: Workload) -> None:
        """A Workload whose detail went (finished or deactivated, past --finished-detail) keeps no
        placement and no place in the host index: in a real cluster most Workloads are finished,
        and placing them, their hundreds of thousands of hosts indexed, only to export a summary
        was a third of their sync. explain places them when asked (:meth:`placement`)."""
        self._unhost_key(wl.key, wl)
        for a in wl.last_assignments:  # also those it shares with the record it replaced
            if a.placed:
                a.placed = ()

    def _unhost_key(self, key: WorkloadKey, wl: Workload) -> None:
        if key in self._hosted:
            self._hosted.discard(key)
            self._unindex_hosts(key, wl)
            self._set_unresolved(key, frozenset())

    def placement(self, wl: Workload, a: Assignment) -> Sequence[tuple[Path, int]]:
        """The full paths and pods of an assignment of ``wl``: the store's for a Workload it keeps
        placed, else placed now with what the Nodes say now (and not kept)."""
        return a.placed if wl.key in self._hosted else self.place(a)

    def _note_unresolved(self, wl: Workload) -> None:
        """Record which of ``wl``'s assignments could not be expanded with their flavor's
        Topology although the levels have more to fill than the assignment stores."""
        found = set()
        if not self._fixed_levels:
            keys = self.levels.keys
            for a in wl.last_assignments:
                topo = a.topology
                if topo is not None and topo.levels is None and a.domains and not set(keys) <= set(a.levels):
                    found.add((topo.flavor, topo.topology, topo.problem))
        self._set_unresolved(wl.key, frozenset(found))

    def _set_unresolved(self, key: WorkloadKey, found: frozenset[tuple[str, str, str]]) -> None:
        old = self._unresolved.get(key, frozenset())
        if found == old:
            return
        if found:
            self._unresolved[key] = found
        else:
            self._unresolved.pop(key, None)
        counts = self._unresolved_counts
        for item in old - found:
            counts[item] -= 1
            if not counts[item]:
                del counts[item]
        for item in found - old:
            counts[item] = counts.get(item, 0) + 1
            if item not in self._warned_unresolved:
                self._warned_unresolved.add(item)
                log.warning("topology_unresolved", flavor=item[0], topology=item[1], problem=item[2],
                            workload=f"{key[0]}/{key[1]}")
        self.exposition.set(TOPOLOGY_UNRESOLVED_OWNER, {TOPOLOGY_UNRESOLVED: [
            TOPOLOGY_UNRESOLVED.sample(key, n) for key, n in sorted(counts.items())
        ]})

    def _index(self, wl: Workload) -> None:
        key = wl.key
        for uid in self.owner_uids(wl):
            self._by_owner_uid.add(uid, key)
        if wl.owner is not None and wl.owner.name:
            self._by_owner_name.add((wl.namespace, wl.owner.name), key)
        self._by_queue.add((wl.namespace, wl.queue_name), key)

    def _index_hosts(self, key: WorkloadKey, wl: Workload) -> None:
        by_group = self._by_group
        for group, a in self._host_groups(wl):
            keys = by_group.get(group)
            if keys is None:
                keys = by_group[group] = set()
                for host in self._group_hosts(group, a):
                    self._by_host.add(host, group)
            keys.add(key)

    def _unindex_hosts(self, key: WorkloadKey, wl: Workload) -> None:
        by_group = self._by_group
        for group, a in self._host_groups(wl):
            keys = by_group.get(group)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del by_group[group]
                    for host in self._group_hosts(group, a):
                        self._by_host.discard(host, group)

    def _unindex(self, wl: Workload) -> None:
        key = wl.key
        self._unhost_key(key, wl)
        for uid in self.owner_uids(wl):
            self._by_owner_uid.discard(uid, key)
        if wl.owner is not None and wl.owner.name:
            self._by_owner_name.discard((wl.namespace, wl.owner.name), key)
        self._by_queue.discard((wl.namespace, wl.queue_name), key)

    @staticmethod
    def _host_groups(wl: Workload) -> list[tuple[Any, Assignment | None]]:
        """The host groups a Workload is indexed under, with the assignment of each: a shaped
        hostname assignment (:class:`Assignment`) is one group (its shape) for all its hosts;
        any other host, assigned or unhealthy, is a group of its own (the host name)."""
        out: list[tuple[Any, Assignment | None]] = [(n, None) for n in wl.unhealthy_nodes]
        for a in wl.last_assignments:
            levels = a.levels
            if HOSTNAME_LABEL in levels:
                if a.shape is not None:
                    out.append((a.shape, a))
                else:
                    i = levels.index(HOSTNAME_LABEL)
                    out += [(d.values[i], None) for d in a.domains]
        return out

    @staticmethod
    def _group_hosts(group: Any, a: Assignment | None) -> Iterable[str]:
        if a is None:
            return (group,)
        return {d.values[0] for d in a.domains}  # a shape has one level, the hostname

    @staticmethod
    def owner_uids(wl: Workload) -> set[str]:
        """The uids a Workload's owner is known by: its controller owner's, and the
        ``kueue.x-k8s.io/job-uid`` label Kueue sets (the gang join matches PodGroups on them)."""
        uids = {wl.labels.get(JOB_UID_LABEL, "")}
        if wl.owner is not None:
            uids.add(wl.owner.uid)
        uids.discard("")
        return uids

    # ---- evictions ------------------------------------------------------------------------

    def _resolve_eviction_depth(self) -> int:
        """How many levels (from the top) an eviction domain spans: up to --eviction-level (a
        node label key or its alias), by default the level above the hostname (the hostname
        itself when it is the only level)."""
        flag = self._eviction_flag
        if flag:
            for i, (key, alias) in enumerate(zip(self.levels.keys, self.levels.aliases)):
                if flag in (key, alias):
                    return i + 1
            log.warning("eviction_level_unknown", eviction_level=flag, levels=list(self.levels.keys))
        return max(1, len(self.levels.keys) - 1)

    def _count_evictions(self, prev: Workload, wl: Workload) -> None:
        """Count each eviction Kueue records in ``status.schedulingStats.evictions`` (object
        state, so two collectors agree) once per domain it happened in
        (:func:`exporter.cluster.evictions.eviction_domains`: the placement seen before this
        event; for node failures, the failed nodes' domains only)."""
        found = new_evictions(prev, wl)
        if not found:
            return
        depth = self.eviction_depth
        counters = self._topology_evictions
        counted: set[Path] = set()
        moved = []
        for (reason, cause), n in found.items():
            domains, _ = eviction_domains(reason, prev, wl, depth, self._node_domain.get,
                                          [pair for a in prev.last_assignments for pair in self.placement(prev, a)])
            if reason == NODE_FAILURES:
                wl.failed_nodes = failed_nodes(prev, wl)
            for domain in domains:
                k = (reason, cause, domain)
                counters[k] = counters.get(k, 0) + n
                moved.append(k)
            counted |= domains
        if not counted:
            return
        if self.nodes:
            now = self.clock()
            for domain in counted:
                if not self._domain_nodes.get(domain):
                    self._gone_since.setdefault(domain, now)
            self._arm_prune()
        for k in moved:
            self._render_topology_eviction(k)

    def _render_topology_eviction(self, key: tuple[str, str, Path]) -> None:
        """One counter's line, an owner of its own: an eviction renders the counters it moved,
        not every domain's (O(domains) per eviction under churn)."""
        n = self._topology_evictions.get(key)
        owner = ("topology_evictions", *key)
        if n is None:
            self.exposition.delete(owner)
        else:
            self.exposition.set(owner, {TOPOLOGY_EVICTIONS: [TOPOLOGY_EVICTIONS.sample(key[:2], n, self.fragment(key[2]))]})

    def _node_domain_of(self, node: Node) -> Path:
        return tuple(self.levels.labels_from_node(node.labels, node.name))[: self.eviction_depth]

    def _track_node_domain(self, name: str, domain: Path | None) -> None:
        """Move node ``name`` to ``domain`` (None: deleted) in the per-domain node counts."""
        old = self._node_domain.pop(name, None)
        if old == domain:
            if domain is not None:
                self._node_domain[name] = domain
            return
        counts = self._domain_nodes
        if old is not None:
            counts[old] -= 1
            if not counts[old]:
                del counts[old]
                if any(k[2] == old for k in self._topology_evictions):
                    self._gone_since.setdefault(old, self.clock())
                    self._arm_prune()
        if domain is not None:
            self._node_domain[name] = domain
            counts[domain] = counts.get(domain, 0) + 1
            self._gone_since.pop(domain, None)

    def _rebuild_node_domains(self) -> None:
        """Levels or the eviction level changed: domains are new paths, old counts start over."""
        self.eviction_depth = self._resolve_eviction_depth()
        self._node_domain.clear()
        self._domain_nodes.clear()
        self._gone_since.clear()
        for node in self.nodes.values():
            self._track_node_domain(node.name, self._node_domain_of(node))
        cleared, self._topology_evictions = self._topology_evictions, {}
        for key in cleared:
            self._render_topology_eviction(key)

    def prune_domains(self) -> None:
        """Drop the eviction series of domains that no Node has had for ``eviction_grace``."""
        self._prune_timer = None
        now = self.clock()
        due = {d for d, since in self._gone_since.items() if now - since >= self.eviction_grace and not self._domain_nodes.get(d)}
        if due:
            for d in due:
                del self._gone_since[d]
            pruned = [k for k in self._topology_evictions if k[2] in due]
            for k in pruned:
                del self._topology_evictions[k]
                self._render_topology_eviction(k)
            log.info("eviction_domains_pruned", domains=len(due))
        self._arm_prune()

    def _arm_prune(self) -> None:
        if self._loop is None or self._prune_timer is not None or not self._gone_since:
            return
        first = min(self._gone_since.values()) + self.eviction_grace
        self._prune_timer = self._loop.call_later(max(0.0, first - self.clock()), self.prune_domains)

    # ---- local queues ---------------------------------------------------------------------

    def _put_local_queue(self, lq: LocalQueue) -> None:
        prev = self.local_queues.get(lq.key)
        self.local_queues[lq.key] = lq
        if prev is None or prev.cluster_queue != lq.cluster_queue:
            self._rerender_queue(lq.key)

    def _delete_local_queue(self, key: tuple[str, str]) -> None:
        if self.local_queues.pop(key, None) is not None:
            self._rerender_queue(key)

    def _rerender_queue(self, key: tuple[str, str]) -> None:
        pending = [k for k in self._by_queue.of(key) if not self.workloads[k].admission_cluster_queue]
        self._rerender(pending, replace_paths=False)

    # ---- cluster queues, cohorts ----------------------------------------------------------

    def _put_cluster_queue(self, cq: ClusterQueue) -> None:
        prev = self.cluster_queues.get(cq.name)
        self.cluster_queues[cq.name] = cq
        self._render_cluster_queue(cq)
        if prev is None or prev.flavor_names != cq.flavor_names:
            self.capacity.cluster_queue_changed(cq.name)
        if prev is None or (prev.active, prev.active_reason, prev.stop_policy) != (cq.active, cq.active_reason, cq.stop_policy):
            self._rerender_cluster_queue_workloads(cq.name)

    def _delete_cluster_queue(self, name: str) -> None:
        if self.cluster_queues.pop(name, None) is not None:
            self.exposition.delete(("clusterqueue", name))
            self.capacity.cluster_queue_changed(name)
            self._rerender_cluster_queue_workloads(name)

    def set_cluster_queue_owner(self, owner: bool) -> None:
        """Export the ClusterQueues' series (shard 0) or not (the other shards), from now on."""
        if owner == self.cluster_queue_owner:
            return
        self.cluster_queue_owner = owner
        for cq in self.cluster_queues.values():
            if owner:
                self._render_cluster_queue(cq)
            else:
                self.exposition.delete(("clusterqueue", cq.name))

    def _render_cluster_queue(self, cq: ClusterQueue) -> None:
        if not self.cluster_queue_owner:
            return
        flavors = self.flavors
        self.exposition.set(("clusterqueue", cq.name), render_cluster_queue(
            cq, lambda f: rf.topology_name if (rf := flavors.get(f)) is not None else "", self._skip))

    def _rerender_cluster_queue_workloads(self, name: str) -> None:
        """The queue's activity changed: what its waiting Workloads' "ClusterQueue X is inactive"
        means may have (the one judgement that reads the queue,
        :func:`exporter.cluster.workload_state.quota_reason_meaning`)."""
        self._rerender([k for k, wl in self.workloads.items()
                        if wl.cluster_queue == name and wl.state is not None and wl.state.pending is not None
                        and wl.state.pending.message.endswith(" is inactive")], replace_paths=False)

    def _put_cohort(self, cohort: Cohort) -> None:
        self.cohorts[cohort.name] = cohort

    def _delete_cohort(self, name: str) -> None:
        self.cohorts.pop(name, None)

    # ---- topologies, flavors --------------------------------------------------------------

    def _put_topology(self, topo: Topology) -> None:
        self.topologies[topo.name] = topo

    def _delete_topology(self, name: str) -> None:
        self.topologies.pop(name, None)

    def _put_flavor(self, flavor: ResourceFlavor) -> None:
        self.flavors[flavor.name] = flavor

    def _delete_flavor(self, name: str) -> None:
        self.flavors.pop(name, None)

    def _update_levels(self) -> None:
        """Rebuild the levels after Topology events; re-render everything if they changed,
        else only the Workloads whose flavor's Topology changed."""
        keys = self._fixed_levels or tuple(merge_levels(self.topologies.values()))
        try:
            levels = TopologyLevels.build(keys, self._overrides)
        except TopologyError as exc:
            raise ParseError(f"topology levels rejected, keeping {list(self.levels.keys)}: {exc}") from exc
        if levels == self.levels:
            self._update_flavor_topologies()
            return
        log.info("topology_levels", levels=list(levels.keys), labels=list(levels.aliases))
        self.levels = levels
        self._level_names.clear()
        self._paths = DomainPaths(levels, self._host_labels)
        self._resolutions.clear()
        self._rebuild_node_domains()
        self._invalidate_paths(list(self.workloads))

    def _topologies_changed(self) -> None:
        try:
            self._update_levels()
        finally:
            self.capacity.flavors_changed()
            self.capacity.settle()

    def _flavors_changed(self) -> None:
        try:
            self._update_flavor_topologies()
            for cq in self.cluster_queues.values():  # their series carry each flavor's Topology
                self._render_cluster_queue(cq)
        finally:
            self.capacity.flavors_changed()
            self.capacity.settle()

    def _update_flavor_topologies(self) -> None:
        """ResourceFlavors or Topologies changed: place again the Workloads whose assignments
        now resolve to another Topology (or none)."""
        old, self._resolutions = self._resolutions, {}
        if self._fixed_levels or not old:
            return
        changed = {names for names, topo in old.items()
                   if resolve_flavor_topology(names, self.flavors, self.topologies) != topo}
        if not changed:
            return
        affected = [k for k, wl in self.workloads.items()
                    if any(tuple(sorted(set(a.flavors.values()))) in changed for a in wl.last_assignments if a.domains)]
        if affected:
            self._invalidate_paths(affected)

    def _invalidate_paths(self, keys: Iterable[WorkloadKey], levels: bool = True) -> None:
        """Place ``keys`` again and re-render them; ``levels``: the topology levels changed, so
        the listeners read every host's path again. A Node's own change (``levels=False``)
        reaches the capacity through ``capacity.node_changed``, which reads that host's path:
        telling it that every host may have moved made each Node event cost O(Nodes), and a
        dump of N Nodes fed one by one (snapshot, explain) O(N^2)."""
        self._place_cache.clear()
        self._fragments.clear()
        self._rerender(keys, replace_paths=True)
        if levels:
            for cb in self.on_topology_change:
                cb()

    # ---- nodes ----------------------------------------------------------------------------

    def _node_view(self, node: Node | None) -> tuple[str, ...] | None:
        if node is None:
            return None
        return (node.hostname, *(node.labels.get(k, "") for k in self.levels.keys))

    def _put_node(self, node: Node) -> None:
        prev = self.nodes.get(node.name)
        self.nodes[node.name] = node
        self.capacity.node_changed(node.name, node)
        if prev is not None and prev.hostname != node.hostname:
            self._host_labels.pop(prev.hostname, None)
        self._host_labels[node.hostname] = node.labels
        if self._node_view(prev) != self._node_view(node):
            self._track_node_domain(node.name, self._node_domain_of(node))
            self._node_changed(node.name, node.hostname, prev.hostname if prev else None)

    def _delete_node(self, name: str) -> None:
        prev = self.nodes.pop(name, None)
        if prev is None:
            return
        self.capacity.node_changed(name, None)
        if self._host_labels.get(prev.hostname) is prev.labels:
            del self._host_labels[prev.hostname]
        self._track_node_domain(name, None)
        self._node_changed(name, prev.hostname, None)

    def _node_changed(self, name: str, hostname: str, old_hostname: str | None) -> None:
        affected: set[WorkloadKey] = set()
        for host in {name, hostname, old_hostname} - {None}:
            for group in self._by_host.of(host):
                affected.update(self._by_group[group])
        if self._pending_nodes is not None:  # inside a node LIST: re-render once at the end
            self._pending_nodes.update(affected)
            self._pending_nodes.add(("", ""))  # marks "paths changed" even with nothing affected
            return
        self._invalidate_paths(affected, levels=False)

    def begin_node_batch(self) -> None:
        """A Node LIST starts. Its pages interleave with the Workloads' (both lists start
        together): until it ends, Workloads are stored and placed but their rendering waits
        (``_deferred``), so none is rendered before the Nodes' labels are known and again after."""
        self._pending_nodes = set()
        if self._deferred is None:
            self._deferred = {}

    def end_node_batch(self) -> None:
        pending, self._pending_nodes = self._pending_nodes, None
        deferred, self._deferred = self._deferred or {}, None
        if pending:
            # Placed meanwhile, the deferred Workloads may hold paths cached before a Node's
            # labels arrived: they are placed again, with what the Nodes now say.
            pending.discard(("", ""))
            self._invalidate_paths([*deferred, *(k for k in pending if k not in deferred)], levels=False)
        elif deferred:
            self._rerender(deferred, replace_paths=False)


class _NodeHandler(ResourceHandler[Node]):
    """Nodes arrive by the thousand in one LIST: re-render the affected Workloads once, at the end."""

    def __init__(self, *args: Any, store: ClusterStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._store = store

    def begin_replace(self) -> None:
        self._store.begin_node_batch()
        super().begin_replace()

    def end_replace(self, complete: bool) -> None:
        with self._store.capacity.deferred():  # flushed once the Workloads held back are rendered too
            try:
                super().end_replace(complete)
            finally:
                self._store.end_node_batch()
