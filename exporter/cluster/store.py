"""The collector's state: every Kueue object it watches, as records, rendered into the exposition.

API (for the gang join, explain and the collector main)::

    store = ClusterStore(exposition, gpu_resources=("nvidia.com/gpu",),
                         level_keys=(),            # --topology-levels; empty: from Topology objects
                         alias_overrides={})       # --topology-alias
    handlers = store.handlers()                    # {source name: ResourceHandler}, sources as in
                                                   # exporter.kube.resources (workloads, localqueues,
                                                   # topologies, resourceflavors, nodes)
    handlers["workloads"].replace(objects)         # a full LIST (objects not in it are deleted)
    handlers["workloads"].apply("MODIFIED", obj)   # one watch event: ADDED | MODIFIED | DELETED
    handlers["workloads"].health = SourceHealth(...)   # where parse errors are counted (optional)

    store.workload(namespace, name) -> Workload | None        # exporter.cluster.workloads.Workload
    store.workloads                                            # dict[(namespace, name), Workload]
    store.workloads_by_owner_uid(uid) -> list[Workload]        # controller owner uid or label kueue.x-k8s.io/job-uid
    store.workloads_by_owner_name(namespace, name) -> list[Workload]
    store.local_queues / store.topologies / store.flavors / store.nodes   # dicts of records
    store.levels -> TopologyLevels; store.node_path(node_name) -> Path; store.fragment(path) -> str
    store.on_workload_change: list[Callable[[tuple[str, str]], None]]   # after a Workload is set,
        # re-rendered or deleted (then store.workload() returns None); key = (namespace, name)
    store.on_topology_change: list[Callable[[], None]]   # after levels or a Node's topology labels change

Every event renders the affected objects' lines into the :class:`Exposition` at once (owner key
``("workload", namespace, name)``); a scrape never renders. Nothing raised by a malformed object
leaves a handler: it is counted in ``gangscope_parse_errors_total{source}`` and logged; an exception
of any other type is a bug, counted in ``gangscope_internal_errors_total{component=<source>}``.

Two things outlive the objects Kueue shows: the last topology assignment of each Workload
(Kueue clears ``status.admission`` when it evicts), and ``gangscope_topology_evictions_total``,
which attributes each eviction observed since start to every domain of that last assignment.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Generic, TypeVar

import structlog

from ..exposition import Exposition
from ..health import SourceHealth
from ..topology import HOSTNAME_LABEL, DomainPaths, TopologyError, TopologyLevels
from .fields import ParseError
from .localqueues import LocalQueue, parse_local_queue
from .nodes import Node, parse_node
from .topologies import ResourceFlavor, Topology, merge_levels, parse_resource_flavor, parse_topology
from .workloads import (
    FAMILIES, TOPOLOGY_EVICTIONS, Assignment, Path, Workload, esc, parse_workload, render_fragment, render_workload,
)

log = structlog.get_logger(__name__)

WorkloadKey = tuple[str, str]
R = TypeVar("R")
JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
TOPOLOGY_EVICTIONS_OWNER = ("topology_evictions",)


class ResourceHandler(Generic[R]):
    """The informer-facing adapter of one resource: ``replace`` a full list, ``apply`` one event.

    It parses, keys and hands records to the store; every failure is counted on ``health`` and
    logged, never raised: a ``ParseError`` as a parse error (the object is bad), anything else as
    an internal error (the code is).
    """

    def __init__(self, source: str, parse: Callable[[Any], R], key: Callable[[R], Any],
                 put: Callable[[R], None], remove: Callable[[Any], None], records: Mapping[Any, R],
                 finish: Callable[[], None] | None = None) -> None:
        self.source = source
        self.health: SourceHealth | None = None
        self._parse, self._key, self._put, self._remove, self._records = parse, key, put, remove, records
        self._finish = finish
        self._seen: set[Any] | None = None  # keys of the LIST in progress

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
        for obj in objects:
            rec = self._record(obj)
            if rec is not None:
                seen.add(self._key(rec))
                self._guarded(self._put, rec)

    def end_replace(self, complete: bool) -> None:
        """Delete what the list did not contain, only if it arrived whole (a list that failed
        midway proves nothing about the objects its missing pages would have held)."""
        seen, self._seen = self._seen, None
        if complete and seen is not None:
            for k in [k for k in self._records if k not in seen]:
                self._guarded(self._remove, k)
        if self._finish is not None:
            self._guarded(self._finish)

    def apply(self, event_type: str, obj: Any) -> None:
        """One watch event; BOOKMARK and unknown types are ignored."""
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        rec = self._record(obj)
        if rec is None:
            return
        if event_type == "DELETED":
            self._guarded(self._remove, self._key(rec))
        else:
            self._guarded(self._put, rec)
        if self._finish is not None:
            self._guarded(self._finish)

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

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except ParseError as exc:  # e.g. Topologies whose levels collide on one label name
            self._count(1, str(exc), None)
        except Exception:
            log.exception("handler_failed", source=self.source)
            self._bug()

    def _count(self, n: int, detail: str, obj: Any) -> None:
        log.warning("object_parse_problems", source=self.source, object=_name(obj), count=n, detail=detail[:500])
        if self.health is not None:
            self.health.parse_error(n)

    def _bug(self) -> None:
        if self.health is not None:
            self.health.internal_error()


def _name(obj: Any) -> str:
    """``namespace/name`` of a raw object, for logs ("" when it has no usable metadata)."""
    if isinstance(obj, dict) and isinstance(obj.get("metadata"), dict):
        meta = obj["metadata"]
        return f"{meta.get('namespace') or ''}/{meta.get('name') or ''}".lstrip("/")
    return ""


class ClusterStore:
    """Records of Workloads, LocalQueues, Topologies, ResourceFlavors and Nodes (see module doc)."""

    def __init__(self, exposition: Exposition, *, gpu_resources: Sequence[str] = ("nvidia.com/gpu",),
                 level_keys: Sequence[str] = (), alias_overrides: Mapping[str, str] | None = None) -> None:
        self.exposition = exposition
        exposition.register(*FAMILIES)
        exposition.register(TOPOLOGY_EVICTIONS, aggregate=True)  # one owner, a series per domain and reason
        self.gpu_resources = tuple(gpu_resources)
        self._fixed_levels = tuple(level_keys)
        self._overrides = dict(alias_overrides or {})
        self.workloads: dict[WorkloadKey, Workload] = {}
        self.local_queues: dict[tuple[str, str], LocalQueue] = {}
        self.topologies: dict[str, Topology] = {}
        self.flavors: dict[str, ResourceFlavor] = {}
        self.nodes: dict[str, Node] = {}
        self.on_workload_change: list[Callable[[WorkloadKey], None]] = []
        self.on_topology_change: list[Callable[[], None]] = []
        self._host_labels: dict[str, dict[str, str]] = {}  # hostname label value -> node labels
        # Workloads by host (hostname value or node name), in two steps: a gang's hosts are
        # indexed once per distinct assignment (its host group), not once per Workload.
        self._by_host: dict[str, set[Any]] = {}  # host -> host groups (see _host_groups)
        self._by_group: dict[Any, set[WorkloadKey]] = {}  # host group -> workloads
        self._by_owner_uid: dict[str, set[WorkloadKey]] = {}
        self._by_owner_name: dict[tuple[str, str], set[WorkloadKey]] = {}
        self._by_queue: dict[tuple[str, str], set[WorkloadKey]] = {}
        self._place_cache: dict[tuple[tuple[str, ...], tuple[str, ...], int], tuple[Path, int]] = {}
        self._fragments: dict[Path, str] = {}
        self._eviction_balance: dict[WorkloadKey, dict[str, int]] = {}
        self._topology_evictions: dict[tuple[str, Path], int] = {}
        self._pending_nodes: set[WorkloadKey] | None = None
        self._deferred: dict[WorkloadKey, None] | None = None  # put during a Node LIST, rendered at its end
        self.levels = TopologyLevels.build(self._fixed_levels, self._overrides)
        self._paths = DomainPaths(self.levels, self._host_labels)

    # ---- handlers -------------------------------------------------------------------------

    def handlers(self) -> dict[str, ResourceHandler]:
        """One adapter per watched resource, keyed by ``Resource.source``."""
        return {
            "workloads": ResourceHandler("workloads", lambda o: parse_workload(o, self.gpu_resources),
                                         lambda w: w.key, self._put_workload, self._delete_workload, self.workloads),
            "localqueues": ResourceHandler("localqueues", parse_local_queue, lambda q: q.key,
                                           self._put_local_queue, self._delete_local_queue, self.local_queues),
            "topologies": ResourceHandler("topologies", parse_topology, lambda t: t.name, self._put_topology,
                                          self._delete_topology, self.topologies, finish=self._update_levels),
            "resourceflavors": ResourceHandler("resourceflavors", parse_resource_flavor, lambda f: f.name,
                                               self._put_flavor, self.flavors.pop, self.flavors),
            "nodes": _NodeHandler("nodes", parse_node, lambda n: n.name, self._put_node, self._delete_node,
                                  self.nodes, store=self),
        }

    # ---- lookups --------------------------------------------------------------------------

    def workload(self, namespace: str, name: str) -> Workload | None:
        return self.workloads.get((namespace, name))

    def workloads_by_owner_uid(self, uid: str) -> list[Workload]:
        return [self.workloads[k] for k in sorted(self._by_owner_uid.get(uid, ()))]

    def workloads_by_owner_name(self, namespace: str, name: str) -> list[Workload]:
        return [self.workloads[k] for k in sorted(self._by_owner_name.get((namespace, name), ()))]

    def node_path(self, node_name: str) -> Path:
        """Topology path of a node by name (upper levels empty when the Node is unknown)."""
        node = self.nodes.get(node_name)
        return tuple(self.levels.labels_from_node(node.labels if node else {}, node_name))

    def fragment(self, path: Path) -> str:
        """The rendered, escaped label pairs of a path, cached (paths repeat across Workloads)."""
        frag = self._fragments.get(path)
        if frag is None:
            frag = self._fragments[path] = render_fragment(path)
        return frag

    def place(self, assignment: Assignment) -> list[tuple[Path, int]]:
        """Full paths (upper levels from Node labels) and pods of each domain of an assignment.

        The ``(path, pods)`` pairs are cached and shared: Workloads on the same hosts hold the
        same pairs rather than one tuple per domain each (hundreds of thousands in a large
        cluster; 41 MiB of a realistic 20,000-Workload cluster, bench/caches.py).
        """
        levels = assignment.levels
        cache, out = self._place_cache, []
        for d in assignment.domains:
            k = (levels, d.values, d.count)
            pair = cache.get(k)
            if pair is None:
                pair = cache[k] = (self._paths.path(levels, d.values), d.count)
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
        for a in wl.last_assignments:
            if not a.placed and a.domains:
                a.placed = self.place(a)
        if prev is not None:
            self._count_evictions(prev, wl)
            self._unindex(prev)
        self.workloads[key] = wl
        self._index(wl)
        if self._deferred is not None:  # inside a Node LIST: rendered once, at its end
            self._deferred[key] = None
        else:
            self._render(wl)

    def _delete_workload(self, key: WorkloadKey) -> None:
        prev = self.workloads.pop(key, None)
        if prev is None:
            return
        self._unindex(prev)
        self._eviction_balance.pop(key, None)
        self.exposition.delete(("workload", *key))
        for cb in self.on_workload_change:
            cb(key)

    def _render(self, wl: Workload) -> None:
        """(Re)resolve what depends on other objects, render the lines, notify listeners."""
        if wl.admission_cluster_queue:
            wl.cluster_queue = wl.admission_cluster_queue
        else:
            lq = self.local_queues.get((wl.namespace, wl.queue_name))
            wl.cluster_queue = lq.cluster_queue if lq is not None else ""
        wl.unhealthy_paths = [self.node_path(n) for n in wl.unhealthy_nodes]
        self.exposition.set_counted(("workload", wl.namespace, wl.name), render_workload(wl, self.fragment))
        for cb in self.on_workload_change:
            cb(wl.key)

    def _rerender(self, keys: Iterable[WorkloadKey], replace_paths: bool) -> None:
        for key in keys:
            wl = self.workloads.get(key)
            if wl is None:
                continue
            if replace_paths:
                for a in wl.last_assignments:
                    a.placed = self.place(a)
            self._render(wl)

    def _index(self, wl: Workload) -> None:
        key = wl.key
        by_group = self._by_group
        for group, a in self._host_groups(wl):
            keys = by_group.get(group)
            if keys is None:
                keys = by_group[group] = set()
                for host in self._group_hosts(group, a):
                    self._by_host.setdefault(host, set()).add(group)
            keys.add(key)
        for uid in self._owner_uids(wl):
            self._by_owner_uid.setdefault(uid, set()).add(key)
        if wl.owner is not None and wl.owner.name:
            self._by_owner_name.setdefault((wl.namespace, wl.owner.name), set()).add(key)
        self._by_queue.setdefault((wl.namespace, wl.queue_name), set()).add(key)

    def _unindex(self, wl: Workload) -> None:
        key = wl.key
        by_group = self._by_group
        for group, a in self._host_groups(wl):
            keys = by_group.get(group)
            if keys is not None:
                keys.discard(key)
                if not keys:
                    del by_group[group]
                    for host in self._group_hosts(group, a):
                        _discard(self._by_host, host, group)
        for uid in self._owner_uids(wl):
            _discard(self._by_owner_uid, uid, key)
        if wl.owner is not None and wl.owner.name:
            _discard(self._by_owner_name, (wl.namespace, wl.owner.name), key)
        _discard(self._by_queue, (wl.namespace, wl.queue_name), key)

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
    def _owner_uids(wl: Workload) -> set[str]:
        uids = {wl.labels.get(JOB_UID_LABEL, "")}
        if wl.owner is not None:
            uids.add(wl.owner.uid)
        uids.discard("")
        return uids

    # ---- evictions ------------------------------------------------------------------------

    def _count_evictions(self, prev: Workload, wl: Workload) -> None:
        """Count each eviction once, whether Kueue shows it first as the Evicted condition turning
        True (new ``lastTransitionTime``) or as a ``schedulingStats`` count going up.

        A per-reason balance remembers evictions seen by one signal and not yet by the other, so
        the second signal of the same eviction, in this event or a later one, adds nothing.
        """
        found: dict[str, int] = {}
        balance = self._eviction_balance.setdefault(wl.key, {})
        before: dict[str, int] = {}
        for (reason, _), n in prev.evictions.items():
            before[reason] = before.get(reason, 0) + n
        after: dict[str, int] = {}
        for (reason, _), n in wl.evictions.items():
            after[reason] = after.get(reason, 0) + n
        for reason, n in after.items():
            delta = n - before.get(reason, 0)
            if delta > 0:
                ahead = max(balance.get(reason, 0), 0)  # already counted from the condition
                if delta > ahead:
                    found[reason] = delta - ahead
                balance[reason] = balance.get(reason, 0) - delta
        new, old = wl.conditions.get("Evicted"), prev.conditions.get("Evicted")
        if new is not None and new.status == "True" and not (
            old is not None and old.status == "True" and old.last_transition == new.last_transition
        ):
            reason = new.reason
            if balance.get(reason, 0) < 0:  # the stats already showed it
                balance[reason] += 1
            else:
                balance[reason] = balance.get(reason, 0) + 1
                found[reason] = found.get(reason, 0) + 1
        if not found:
            return
        paths = dict.fromkeys(path for a in wl.last_assignments for path, _ in a.placed)
        if not paths:
            return
        for reason, n in found.items():
            for path in paths:
                k = (reason, path)
                self._topology_evictions[k] = self._topology_evictions.get(k, 0) + n
        self._render_topology_evictions()

    def _render_topology_evictions(self) -> None:
        lines = [
            f'gangscope_topology_evictions_total{{reason="{esc(reason)}",{self.fragment(path)}}} {n}\n'
            for (reason, path), n in self._topology_evictions.items()
        ]
        self.exposition.set(TOPOLOGY_EVICTIONS_OWNER, {TOPOLOGY_EVICTIONS: lines})

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
        pending = [k for k in self._by_queue.get(key, ()) if not self.workloads[k].admission_cluster_queue]
        self._rerender(pending, replace_paths=False)

    # ---- topologies, flavors --------------------------------------------------------------

    def _put_topology(self, topo: Topology) -> None:
        self.topologies[topo.name] = topo

    def _delete_topology(self, name: str) -> None:
        self.topologies.pop(name, None)

    def _put_flavor(self, flavor: ResourceFlavor) -> None:
        self.flavors[flavor.name] = flavor

    def _update_levels(self) -> None:
        """Rebuild the levels after Topology events; re-render everything if they changed."""
        keys = self._fixed_levels or tuple(merge_levels(self.topologies.values()))
        try:
            levels = TopologyLevels.build(keys, self._overrides)
        except TopologyError as exc:
            raise ParseError(f"topology levels rejected, keeping {list(self.levels.keys)}: {exc}") from exc
        if levels == self.levels:
            return
        log.info("topology_levels", levels=list(levels.keys), labels=list(levels.aliases))
        self.levels = levels
        self._paths = DomainPaths(levels, self._host_labels)
        self._invalidate_paths(list(self.workloads))

    def _invalidate_paths(self, keys: Iterable[WorkloadKey]) -> None:
        self._place_cache.clear()
        self._fragments.clear()
        self._rerender(keys, replace_paths=True)
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
        if prev is not None and prev.hostname != node.hostname:
            self._host_labels.pop(prev.hostname, None)
        self._host_labels[node.hostname] = node.labels
        if self._node_view(prev) != self._node_view(node):
            self._node_changed(node.name, node.hostname, prev.hostname if prev else None)

    def _delete_node(self, name: str) -> None:
        prev = self.nodes.pop(name, None)
        if prev is None:
            return
        if self._host_labels.get(prev.hostname) is prev.labels:
            del self._host_labels[prev.hostname]
        self._node_changed(name, prev.hostname, None)

    def _node_changed(self, name: str, hostname: str, old_hostname: str | None) -> None:
        affected: set[WorkloadKey] = set()
        for host in {name, hostname, old_hostname} - {None}:
            for group in self._by_host.get(host, ()):  # type: ignore[arg-type]
                affected.update(self._by_group[group])
        if self._pending_nodes is not None:  # inside a node LIST: re-render once at the end
            self._pending_nodes.update(affected)
            self._pending_nodes.add(("", ""))  # marks "paths changed" even with nothing affected
            return
        self._invalidate_paths(affected)

    def _begin_node_batch(self) -> None:
        """A Node LIST starts. Its pages interleave with the Workloads' (both lists start
        together): until it ends, Workloads are stored and placed but their rendering waits
        (``_deferred``), so none is rendered before the Nodes' labels are known and again after."""
        self._pending_nodes = set()
        if self._deferred is None:
            self._deferred = {}

    def _end_node_batch(self) -> None:
        pending, self._pending_nodes = self._pending_nodes, None
        deferred, self._deferred = self._deferred or {}, None
        if pending:
            # Placed meanwhile, the deferred Workloads may hold paths cached before a Node's
            # labels arrived: they are placed again, with what the Nodes now say.
            pending.discard(("", ""))
            self._invalidate_paths([*deferred, *(k for k in pending if k not in deferred)])
        elif deferred:
            self._rerender(deferred, replace_paths=False)


class _NodeHandler(ResourceHandler[Node]):
    """Nodes arrive by the thousand in one LIST: re-render the affected Workloads once, at the end."""

    def __init__(self, *args: Any, store: ClusterStore, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._store = store

    def begin_replace(self) -> None:
        self._store._begin_node_batch()
        super().begin_replace()

    def end_replace(self, complete: bool) -> None:
        try:
            super().end_replace(complete)
        finally:
            self._store._end_node_batch()


def _discard(index: dict[Any, set[WorkloadKey]], k: Any, key: WorkloadKey) -> None:
    keys = index.get(k)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[k]
