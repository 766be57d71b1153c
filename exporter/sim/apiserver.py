"""A simulated Kubernetes API server over real HTTP (aiohttp on 127.0.0.1), for tests, the demo
and benchmarks.

It implements the parts of the API that list/watch clients depend on, with the real wire
formats: discovery documents, LIST with ``limit``/``continue`` (continue tokens served from a
consistent snapshot and expiring with ``410 Expired`` after :meth:`SimApiServer.compact`),
chunked WATCH streams with ADDED/MODIFIED/DELETED/BOOKMARK events and the ``410`` ERROR event of
a too-old ``resourceVersion``, ``PartialObjectMetadata`` responses (406 for a list asked for as
one object, or an object as a list, as the real server answers), field and label selectors,
writes of ConfigMaps (POST creates, 409 ``AlreadyExists``, 404 in a namespace that does not exist
where Namespaces are served; PUT replaces, 409 ``Conflict`` for a
stale ``metadata.resourceVersion``, unconditionally without one; 400 for a name or namespace that
is not the URL's; 422 for data that is not string keys and values),
bearer-token authentication, TokenReview and SubjectAccessReview, and Kueue's visibility API
(``clusterqueues/<cq>/pendingworkloads``, computed from the Workloads it holds:
:meth:`SimApiServer.pending_workloads`). Faults are switches a test
flips: drop streams (now, after N events, mid-event), answer the next N requests with a status
(429 with ``Retry-After``, 500), delay or stop answering, forbid a resource (or only writing it),
stop serving one (a CRD deleted) and serve it again.

Objects live in one store per (group, plural) and are served in every registered version (the
``apiVersion`` is rewritten, nothing else: no conversion). One global, monotonically increasing
``resourceVersion`` orders all changes, like etcd's revision. Each object's JSON is encoded once
when it changes, so LIST and WATCH write pre-encoded bytes; that keeps a 20,000-object relist
cheap enough for the benchmarks to measure the client rather than the simulator.

Use it from a running event loop (``await sim.start()``; mutations are plain method calls) or
from another thread (``sim.start_in_thread()``; then go through :meth:`SimApiServer.call`).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import re
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson
import yaml
from aiohttp import web

from exporter.kube.resources import Resource

PARTIAL_KIND = "PartialObjectMetadata"
# kube-apiserver's message for an expired continue token (it also offers an "inconsistent
# continue" token in the Status metadata, which this server does not).
CONTINUE_EXPIRED = (
    "The provided continue parameter is too old to display a consistent list result. You can start a new list "
    "without the continue parameter, or use the continue token in this response to retrieve the remainder of the "
    "results. Continuing with the provided token results in an inconsistent list - objects that were created, "
    "modified, or deleted between the time the first chunk was returned and now may show up in the list.")
META_API_VERSION = "meta.k8s.io/v1"


def status_body(code: int, reason: str, message: str) -> dict[str, Any]:
    """A ``metav1.Status`` failure, the body of every error the real server returns (no
    ``reason`` for an error the server did not classify, such as a storage error's 500)."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, **({"reason": reason} if reason else {}), "code": code}


_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed",
            406: "NotAcceptable", 409: "AlreadyExists", 410: "Expired", 422: "Invalid", 429: "TooManyRequests",
            500: "InternalError", 503: "ServiceUnavailable"}
# What the server lets clients write (POST, PUT): ConfigMaps, the one kind gangscope writes.
WRITABLE = {("", "configmaps")}
_CONFIGMAP_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")


def _error(code: int, message: str, headers: dict[str, str] | None = None, reason: str | None = None) -> web.Response:
    body = status_body(code, _REASONS.get(code, "Unknown") if reason is None else reason, message)
    return web.Response(status=code, body=orjson.dumps(body), content_type="application/json", headers=headers)


def _partial_kind(accept: str) -> str | None:
    """The ``as=`` kind of the first media type of an Accept header (``PartialObjectMetadata``,
    ``PartialObjectMetadataList``), or None: the real server answers with the first it can."""
    for param in accept.split(",", 1)[0].split(";")[1:]:
        key, _, value = param.strip().partition("=")
        if key == "as":
            return value
    return None


def _page_not_found() -> web.Response:
    """What the real server answers for a group, version or resource it does not serve: not a
    Status object but Go's plain-text 404 page."""
    return web.Response(status=404, text="404 page not found\n", content_type="text/plain")


def _json(body: Any) -> web.Response:
    return web.Response(body=orjson.dumps(body), content_type="application/json")


def make_object(resource: Resource, name: str, namespace: str | None = "default", *, version: str | None = None,
                labels: dict[str, str] | None = None, **top: Any) -> dict[str, Any]:
    """A minimal object of ``resource`` (extra top-level fields such as ``spec=`` as keywords)."""
    version = version or resource.versions[0]
    meta: dict[str, Any] = {"name": name}
    if resource.namespaced:
        meta["namespace"] = namespace or "default"
    if labels:
        meta["labels"] = dict(labels)
    api_version = f"{resource.group}/{version}" if resource.group else version
    return {"apiVersion": api_version, "kind": resource.kind, "metadata": meta, **top}


# --- selectors -------------------------------------------------------------------------------

# (key, op in = != in notin exists !exists, value); a shard's value: its ranges of the FNV-1a hash
Requirement = tuple[str, str, str | frozenset[str] | tuple[tuple[int, int], ...] | None]


def _split_requirements(text: str) -> list[str]:
    """Split at the commas between requirements, not those inside ``in (a,b)``."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return parts


def parse_selector(text: str | None) -> list[Requirement]:
    """Selectors as the API server reads them: equality-based (``a=b``, ``a==b``, ``a!=b``),
    set-based (``a in (x,y)``, ``a notin (x,y)``) and existence (``a``, ``!a``), comma-separated."""
    out: list[Requirement] = []
    for part in _split_requirements(text or ""):
        part = part.strip()
        if not part:
            continue
        words = part.split(None, 1)
        if len(words) == 2 and words[1].startswith(("in ", "in(", "notin ", "notin(")):
            op, _, values = words[1].partition("(")
            out.append((words[0], op.strip(), frozenset(v.strip() for v in values.rstrip(")").split(",") if v.strip())))
        elif "!=" in part:
            k, v = part.split("!=", 1)
            out.append((k.strip(), "!=", v.strip()))
        elif "==" in part:
            k, v = part.split("==", 1)
            out.append((k.strip(), "=", v.strip()))
        elif "=" in part:
            k, v = part.split("=", 1)
            out.append((k.strip(), "=", v.strip()))
        elif part.startswith("!"):
            out.append((part[1:].strip(), "!exists", None))
        else:
            out.append((part, "exists", None))
    return out


_SHARD_RANGE = re.compile(r"\s*shardRange\(\s*object\.(metadata\.(?:uid|namespace))\s*,\s*'0x([0-9a-f]+)'\s*,\s*'0x([0-9a-f]+)'\s*\)\s*")


def _fnv64a(text: str) -> int:
    """FNV-1a 64 of the UTF-8 bytes, as k8s.io/apimachinery pkg/sharding/hash.go computes it."""
    h = 14695981039346656037
    for b in text.encode():
        h = (h ^ b) * 1099511628211 % 2**64
    return h


def parse_shard_selector(text: str) -> Requirement:
    """``shardRange(object.metadata.namespace, '0x..', '0x..') || ...`` (KEP-5866, 1.36 alpha) as
    one field requirement: (field, "shard", ((start, end), ...)). Raises ValueError."""
    ranges, key = [], None
    for term in text.split("||"):
        m = _SHARD_RANGE.fullmatch(term)
        if m is None or (key is not None and m.group(1) != key):
            raise ValueError(f"invalid shardSelector {text!r}")
        key = m.group(1)
        ranges.append((int(m.group(2), 16), int(m.group(3), 16)))
    return (key or "", "shard", tuple(ranges))


def _field_value(obj: dict[str, Any], path: str) -> str | None:
    cur: Any = obj
    for step in path.split("."):
        if not isinstance(cur, dict) or step not in cur:
            return None
        cur = cur[step]
    return None if cur is None else str(cur)


def _matches(obj: dict[str, Any], fields: list[Requirement], labels: list[Requirement]) -> bool:
    for key, op, value in fields:
        actual = _field_value(obj, key) or ""  # the real server compares absent fields as ""
        if (op == "=" and actual != value) or (op == "!=" and actual == value):
            return False
        if op == "shard" and isinstance(value, tuple) and not any(start <= _fnv64a(actual) < end for start, end in value):
            return False
    obj_labels = (obj.get("metadata") or {}).get("labels") or {}
    for key, op, value in labels:
        present = key in obj_labels
        if op == "exists" and not present or op == "!exists" and present:
            return False
        if op == "=" and obj_labels.get(key) != value or op == "!=" and obj_labels.get(key) == value:
            return False
        if op == "in" and obj_labels.get(key) not in value or op == "notin" and obj_labels.get(key) in value:  # type: ignore[operator]
            return False
    return True


# --- storage -----------------------------------------------------------------------------------


@dataclass
class _Entry:
    obj: dict[str, Any]
    raw: bytes  # the object's JSON as stored (its own apiVersion)


@dataclass
class _Event:
    rv: int
    type: str
    entry: _Entry
    old: _Entry | None  # previous state (MODIFIED), for selector transitions


@dataclass(eq=False)
class _Watcher:
    queue: asyncio.Queue[_Event | str]
    namespace: str | None
    fields: list[Requirement]
    labels: list[Requirement]
    partial: bool
    version: str
    sent: int = 0


@dataclass
class _Store:
    group: str
    plural: str
    kind: str
    namespaced: bool
    versions: list[str]
    objects: dict[tuple[str, str], _Entry] = field(default_factory=dict)
    history: collections.deque[_Event] = field(default_factory=collections.deque)
    compacted_rv: int = 0
    watchers: set[_Watcher] = field(default_factory=set)
    forbidden: bool = False
    forbidden_writes: bool = False
    _raw_by_version: dict[tuple[int, str], bytes] = field(default_factory=dict)

    def api_version(self, version: str) -> str:
        return f"{self.group}/{version}" if self.group else version

    @property
    def qualified(self) -> str:
        """``workloads.kueue.x-k8s.io``, ``nodes``: how the real server names it in messages."""
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def encoded(self, entry: _Entry, version: str, partial: bool, in_list: bool = False) -> bytes:
        """The object as served in ``version`` (or as PartialObjectMetadata). Items of a list of
        a built-in kind carry no kind and apiVersion on the real server (typed Go lists); custom
        resources' items and every watch event's object do."""
        if partial:
            return orjson.dumps({"kind": PARTIAL_KIND, "apiVersion": META_API_VERSION, "metadata": entry.obj.get("metadata", {})})
        if in_list and not self.group:
            return orjson.dumps({k: v for k, v in entry.obj.items() if k not in ("kind", "apiVersion")})
        if entry.obj.get("apiVersion") == self.api_version(version):
            return entry.raw
        converted = dict(entry.obj, apiVersion=self.api_version(version))
        return orjson.dumps(converted)


@dataclass
class _Snapshot:
    rv: int
    entries: list[_Entry]


@dataclass
class _FailRule:
    status: int
    remaining: int
    retry_after: float | None
    match: str | None  # substring of the path, None for every request


class SimApiServer:
    """An in-memory API server. See the module docstring for what it implements.

    ``history_limit`` events are kept per resource for watches to resume from (older ones are
    compacted away, as etcd does every few minutes), which bounds memory in long demo runs.
    """

    def __init__(self, token: str | None = "sim-token", *, bookmark_interval: float = 5.0, history_limit: int = 10_000):
        self.valid_tokens: set[str] = {token} if token else set()
        self.bookmark_interval = bookmark_interval
        self.history_limit = history_limit
        self.requests: collections.Counter[str] = collections.Counter()  # "GET /apis/..." -> count
        self.request_log: list[tuple[str, str, dict[str, str]]] = []  # (method, path, query)
        # faults
        self.delay = 0.0
        self.ignore_partial_metadata = False
        self.shard_selectors = True  # honour shardSelector (a 1.36+ server with ShardedListAndWatch); False: ignore it
        # (group, plural) -> the namespaces a namespaced-only RBAC (Roles, no ClusterRole) allows
        self.namespace_rbac: dict[tuple[str, str], set[str]] = {}
        self.drop_after_events: int | None = None
        self.drop_mid_event = False
        self._fail_rules: list[_FailRule] = []
        self._answering = asyncio.Event()
        self._answering.set()
        # TokenReview / SubjectAccessReview tables
        self.token_users: dict[str, tuple[str, list[str]]] = {}
        self.non_resource_rules: set[tuple[str, str, str]] = set()  # (user or group, verb, path)
        self.resource_rules: set[tuple[str, str, str, str, str]] = set()  # (user or group, verb, group, resource, namespace)
        self._stores: dict[tuple[str, str], _Store] = {}
        self._rv = 0
        self._snapshots: collections.OrderedDict[str, _Snapshot] = collections.OrderedDict()
        self._runner: web.AppRunner | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._tls = False
        self.port = 0

    # --- lifecycle ------------------------------------------------------------------------

    @property
    def url(self) -> str:
        return f"{'https' if self._tls else 'http'}://127.0.0.1:{self.port}"

    async def start(self, host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None) -> SimApiServer:
        """Listen on ``host:port`` (port 0: any free one, see :attr:`port`); HTTPS with ``ssl_context``."""
        self._loop = asyncio.get_running_loop()
        self._tls = ssl_context is not None
        # The Event was created before a loop existed; rebind it to this one.
        self._answering = asyncio.Event()
        self._answering.set()
        app = web.Application(middlewares=[self._middleware])
        app.router.add_route("*", "/{tail:.*}", self._route)
        self._runner = web.AppRunner(app, handle_signals=False, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port, ssl_context=ssl_context)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        return self

    async def stop(self) -> None:
        self._answering.set()
        for store in self._stores.values():
            for w in list(store.watchers):
                w.queue.put_nowait("close")
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    def start_in_thread(self) -> SimApiServer:
        """Run the server on its own event loop in a daemon thread (benchmarks, the demo)."""
        started = threading.Event()
        loop = asyncio.new_event_loop()

        def main() -> None:
            asyncio.set_event_loop(loop)
            loop.run_until_complete(self.start())
            started.set()
            loop.run_forever()
            loop.run_until_complete(self.stop())
            loop.close()

        self._thread = threading.Thread(target=main, name="sim-apiserver", daemon=True)
        self._thread.start()
        started.wait()
        return self

    def stop_thread(self) -> None:
        if self._thread is not None and self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
            self._thread = None

    def call(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run ``fn`` on the server's loop and return its result (for use from another thread)."""
        if self._thread is None or threading.current_thread() is self._thread:
            return fn(*args, **kwargs)
        assert self._loop is not None

        async def run() -> Any:
            return fn(*args, **kwargs)

        return asyncio.run_coroutine_threadsafe(run(), self._loop).result()

    # --- resources ------------------------------------------------------------------------

    def serve(self, resource: Resource, versions: Iterable[str] | None = None) -> None:
        """Serve ``resource`` in ``versions`` (default: all its versions); adds to what is served."""
        key = (resource.group, resource.plural)
        wanted = list(versions) if versions is not None else list(resource.versions)
        store = self._stores.get(key)
        if store is None:
            self._stores[key] = _Store(resource.group, resource.plural, resource.kind, resource.namespaced, wanted)
        else:
            store.versions += [v for v in wanted if v not in store.versions]

    def serve_kind(self, group: str, version: str, plural: str, kind: str, namespaced: bool) -> None:
        self.serve(Resource(plural, group, (version,), plural, kind, namespaced))

    def unserve(self, resource: Resource, versions: Iterable[str] | None = None) -> None:
        """Stop serving versions of ``resource``; with none left it is gone, like a deleted CRD:
        every object is deleted (DELETED events), open watches close, requests get 404."""
        store = self._stores.get((resource.group, resource.plural))
        if store is None:
            return
        drop = set(versions) if versions is not None else set(store.versions)
        store.versions = [v for v in store.versions if v not in drop]
        if not store.versions:
            for entry in list(store.objects.values()):
                self._delete_entry(store, entry)
            del self._stores[(resource.group, resource.plural)]
        for w in list(store.watchers):
            if w.version in drop:
                w.queue.put_nowait("close")

    def forbid(self, resource: Resource, forbidden: bool = True) -> None:
        """Answer 403 to every request for ``resource`` (RBAC missing), or stop doing so."""
        self._store_for(resource.group, resource.plural).forbidden = forbidden

    def forbid_writes(self, resource: Resource, forbidden: bool = True) -> None:
        """Answer 403 to creates and updates of ``resource`` (a read-only Role), or stop doing so."""
        self._store_for(resource.group, resource.plural).forbidden_writes = forbidden

    def _store_for(self, group: str, plural: str) -> _Store:
        try:
            return self._stores[(group, plural)]
        except KeyError:
            raise KeyError(f"resource {plural}.{group} is not served") from None

    def _store_of(self, obj: dict[str, Any]) -> _Store:
        api_version = obj.get("apiVersion", "")
        group = api_version.rpartition("/")[0]
        kind = obj.get("kind")
        for store in self._stores.values():
            if store.group == group and store.kind == kind:
                return store
        raise KeyError(f"no served resource for {api_version} {kind}")

    # --- mutations ------------------------------------------------------------------------

    @property
    def resource_version(self) -> int:
        return self._rv

    def _key(self, store: _Store, obj: dict[str, Any]) -> tuple[str, str]:
        meta = obj.get("metadata") or {}
        return (meta.get("namespace", "") if store.namespaced else "", meta["name"])

    def _stamp(self, obj: dict[str, Any], old: _Entry | None) -> _Entry:
        self._rv += 1
        meta = dict(obj.get("metadata") or {})
        meta["resourceVersion"] = str(self._rv)
        if old is not None:
            old_meta = old.obj.get("metadata", {})
            meta.setdefault("uid", old_meta.get("uid"))
            meta.setdefault("creationTimestamp", old_meta.get("creationTimestamp"))
        meta.setdefault("uid", str(uuid.uuid4()))
        meta.setdefault("creationTimestamp", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        raw = orjson.dumps(dict(obj, metadata=meta))
        return _Entry(orjson.loads(raw), raw)  # a private copy: callers may keep mutating theirs

    def _record(self, store: _Store, event: _Event) -> None:
        store.history.append(event)
        while len(store.history) > self.history_limit:
            store.compacted_rv = store.history.popleft().rv
        for w in store.watchers:
            w.queue.put_nowait(event)

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Store a new object (stamped with uid, creationTimestamp, resourceVersion); returns it."""
        store = self._store_of(obj)
        key = self._key(store, obj)
        if key in store.objects:
            raise ValueError(f"{store.kind} {key} already exists")
        entry = self._stamp(obj, None)
        store.objects[key] = entry
        self._record(store, _Event(self._rv, "ADDED", entry, None))
        return entry.obj

    def update(self, obj: dict[str, Any]) -> dict[str, Any]:
        store = self._store_of(obj)
        key = self._key(store, obj)
        old = store.objects.get(key)
        if old is None:
            raise KeyError(f"{store.kind} {key} not found")
        entry = self._stamp(obj, old)
        store.objects[key] = entry
        self._record(store, _Event(self._rv, "MODIFIED", entry, old))
        return entry.obj

    def apply(self, obj: dict[str, Any]) -> dict[str, Any]:
        """Create or update."""
        store = self._store_of(obj)
        return self.update(obj) if self._key(store, obj) in store.objects else self.create(obj)

    def delete(self, obj: dict[str, Any]) -> None:
        """Delete the object named by ``obj``'s apiVersion, kind and metadata.namespace/name."""
        store = self._store_of(obj)
        entry = store.objects.get(self._key(store, obj))
        if entry is None:
            raise KeyError(f"{store.kind} {self._key(store, obj)} not found")
        self._delete_entry(store, entry)

    def _delete_entry(self, store: _Store, entry: _Entry) -> None:
        del store.objects[self._key(store, entry.obj)]
        self._rv += 1
        meta = dict(entry.obj["metadata"], resourceVersion=str(self._rv))
        raw = orjson.dumps(dict(entry.obj, metadata=meta))
        gone = _Entry(orjson.loads(raw), raw)
        self._record(store, _Event(self._rv, "DELETED", gone, entry))

    def bulk_load(self, objects: Iterable[dict[str, Any]]) -> int:
        """Create many objects fast: no per-object history or watch events, and the history is
        compacted to the new revision (a watch from before the load gets 410 and relists)."""
        n = 0
        touched: set[int] = set()
        for obj in objects:
            store = self._store_of(obj)
            store.objects[self._key(store, obj)] = self._stamp(obj, None)
            touched.add(id(store))
            n += 1
        for store in self._stores.values():
            if id(store) in touched:
                store.history.clear()
                store.compacted_rv = self._rv
                for w in list(store.watchers):
                    w.queue.put_nowait("close")
        return n

    def objects(self, resource: Resource) -> list[dict[str, Any]]:
        """The stored objects of a resource, in key order (the truth tests compare against)."""
        store = self._store_for(resource.group, resource.plural)
        return [store.objects[k].obj for k in sorted(store.objects)]

    def compact(self) -> None:
        """Forget history up to now, like etcd compaction: watches from an older resourceVersion
        get a 410 ERROR event and outstanding continue tokens get HTTP 410."""
        for store in self._stores.values():
            store.history.clear()
            store.compacted_rv = self._rv
        self._snapshots.clear()

    # --- faults ---------------------------------------------------------------------------

    def fail_next(self, count: int, status: int = 500, *, retry_after: float | None = None, match: str | None = None) -> None:
        """Answer the next ``count`` requests (whose path contains ``match``) with ``status``."""
        self._fail_rules.append(_FailRule(status, count, retry_after, match))

    def drop_watches(self, mid_event: bool = False) -> int:
        """Cut every open watch stream now (abruptly: no terminating chunk); returns how many.
        With ``mid_event`` half of an event line is written first."""
        n = 0
        for store in self._stores.values():
            for w in list(store.watchers):
                w.queue.put_nowait("cut-mid" if mid_event else "cut")
                n += 1
        return n

    def hang(self, hanging: bool = True) -> None:
        """Stop answering (requests wait until ``hang(False)``): a server that went silent."""
        if hanging:
            self._answering.clear()
        else:
            self._answering.set()

    def rotate_token(self, new_token: str) -> None:
        """Accept only ``new_token`` from now on: clients with the old one get 401."""
        self.valid_tokens = {new_token}

    def open_watches(self) -> int:
        return sum(len(s.watchers) for s in self._stores.values())

    def count(self, substring: str = "", *, watch: bool | None = None) -> int:
        """Requests whose path contains ``substring`` (``watch=True/False`` to split LIST and WATCH)."""
        return sum(1 for _, path, q in self.request_log
                   if substring in path and (watch is None or _is_watch(q) == watch))

    # --- kubeconfig -----------------------------------------------------------------------

    def kubeconfig(self, token: str | None = None, context: str = "sim", **cluster: Any) -> dict[str, Any]:
        """A kubeconfig dict; extra keywords go into the cluster entry (``certificate-authority``...)."""
        token = token if token is not None else next(iter(sorted(self.valid_tokens)), "")
        user: dict[str, Any] = {"token": token} if token else {}
        return {
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": context, "cluster": {"server": self.url, **cluster}}],
            "users": [{"name": context, "user": user}],
            "contexts": [{"name": context, "context": {"cluster": context, "user": context, "namespace": "default"}}],
            "current-context": context,
        }

    def write_kubeconfig(self, path: str, token: str | None = None, context: str = "sim") -> str:
        """Write a kubeconfig for this server (the first valid token unless ``token`` is given)."""
        with open(path, "w") as f:
            yaml.safe_dump(self.kubeconfig(token, context), f)
        return path

    # --- HTTP -----------------------------------------------------------------------------

    @web.middleware
    async def _middleware(self, request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        self.requests[f"{request.method} {request.path}"] += 1
        self.request_log.append((request.method, request.path, dict(request.query)))
        await self._answering.wait()
        if self.delay:
            await asyncio.sleep(self.delay)
        if self.valid_tokens:
            auth = request.headers.get("Authorization", "")
            if not auth.lower().startswith("bearer ") or auth[7:].strip() not in self.valid_tokens:
                return _error(401, "Unauthorized")
        for rule in self._fail_rules:
            if rule.remaining > 0 and (rule.match is None or rule.match in request.path):
                rule.remaining -= 1
                headers = {"Retry-After": f"{rule.retry_after:g}"} if rule.retry_after is not None else None
                return _error(rule.status, f"simulated {rule.status}", headers)
        self._fail_rules = [r for r in self._fail_rules if r.remaining > 0]
        return await handler(request)

    async def _route(self, request: web.Request) -> web.StreamResponse:
        parts = [p for p in request.path.split("/") if p]
        if request.method == "POST" and parts[:2] in (["apis", "authentication.k8s.io"], ["apis", "authorization.k8s.io"]):
            return await self._post(request, parts)
        if request.method not in ("GET", "POST", "PUT"):
            return _error(405, f"method {request.method} not allowed")
        if parts == ["api"]:
            return _json({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})
        if parts == ["apis"]:
            return _json(self._group_list())
        if parts[:1] == ["api"] and len(parts) >= 2:
            group, rest = "", parts[1:]
        elif parts[:1] == ["apis"] and len(parts) >= 2:
            group, rest = parts[1], parts[2:]
            if not rest:
                doc = self._group(group)
                return _json(doc) if doc else _page_not_found()
        else:
            return _page_not_found()
        version, rest = rest[0], rest[1:]
        if not rest:
            doc = self._resource_list(group, version)
            return _json(doc) if doc else _page_not_found()
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        if len(rest) == 3 and (group, f"{rest[0]}/{rest[2]}") in self._stores and request.method == "GET":
            return self._subresource(request, self._stores[(group, f"{rest[0]}/{rest[2]}")], version, rest[1], namespace)
        if len(rest) not in (1, 2):
            return _page_not_found()
        store = self._stores.get((group, rest[0]))
        if store is None or version not in store.versions or (namespace is not None and not store.namespaced):
            # The core group's own router answers with a Status; every other path falls through to the 404 page.
            return _error(404, "the server could not find the requested resource") if not group else _page_not_found()
        allowed = self.namespace_rbac.get((group, store.plural))
        writing = request.method != "GET"
        if store.forbidden or (writing and store.forbidden_writes) or (allowed is not None and namespace not in allowed):
            scope = f'in the namespace "{namespace}"' if namespace is not None else "at the cluster scope"
            verb = {"POST": "create", "PUT": "update"}.get(request.method, "list" if len(rest) == 1 else "get")
            return _error(403, f'{store.qualified} is forbidden: User "sim" cannot {verb} resource '
                               f'"{store.plural}" in API group "{store.group}" {scope}')
        if writing:
            if (group, store.plural) not in WRITABLE:
                return _error(405, f"the simulated server writes only {sorted(WRITABLE)}, not {store.qualified}")
            if request.method == "POST" and len(rest) == 1:
                return await self._create(request, store, version, namespace)
            if request.method == "PUT" and len(rest) == 2:
                return await self._replace(request, store, version, namespace, rest[1])
            return _error(405, f"method {request.method} not allowed on {request.path}")
        accept = request.headers.get("Accept", "")
        as_kind = _partial_kind(accept)
        partial = as_kind in ("PartialObjectMetadata", "PartialObjectMetadataList") and not self.ignore_partial_metadata
        if partial and (as_kind == "PartialObjectMetadataList") != (len(rest) == 1) and not _is_watch(request.query):
            # handlers/response.go asPartialObjectMetadata(List): no fallback to the next media type; the
            # Go type named is the internal one of a built-in kind, an unstructured one of a custom resource
            # (whose single object asked for as a list fails earlier, a 500 of kube-apiserver 1.20)
            custom = "." in group
            kind = "unstructured.Unstructured" if custom else f"{group or 'core'}.{store.kind}"
            if len(rest) == 1:
                return _error(406, f"you requested {as_kind}, but the requested object is a list (*{kind}List)")
            if custom:
                return _error(500, "content is not a list", reason="")
            return _error(406, f"you requested {as_kind}, but the requested object is not a list (*{kind})")
        if len(rest) == 2:
            entry = store.objects.get((namespace or "", rest[1]))
            if entry is None:
                return _error(404, f'{store.qualified} "{rest[1]}" not found')
            return web.Response(body=store.encoded(entry, version, partial), content_type="application/json")
        fields = parse_selector(request.query.get("fieldSelector"))
        labels = parse_selector(request.query.get("labelSelector"))
        shard = request.query.get("shardSelector") if self.shard_selectors else None
        if shard:
            try:
                fields.append(parse_shard_selector(shard))
            except ValueError as exc:
                return _error(400, str(exc))
        if _is_watch(request.query):
            return await self._watch(request, store, version, namespace, fields, labels, partial)
        return self._list(request, store, version, namespace, fields, labels, partial, shard_info=shard)

    async def _written(self, request: web.Request, store: _Store, namespace: str | None,
                       name: str | None) -> dict[str, Any] | web.Response:
        """The body of a create or update, or the real server's refusal of it."""
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "invalid JSON")
        meta = body.get("metadata") if isinstance(body, dict) else None
        if not isinstance(meta, dict):
            return _error(400, "the object has no metadata")
        if meta.get("namespace", namespace) != namespace:
            return _error(400, "the namespace of the provided object does not match the namespace sent on the request")
        if name is not None and meta.get("name") != name:
            return _error(400, f"the name of the object ({meta.get('name')}) does not match the name on the URL ({name})")
        if not isinstance(meta.get("name"), str) or not meta["name"]:
            return _error(422, f'{store.kind} "" is invalid: metadata.name: Required value: name or generateName is required')
        data = body.get("data", {})
        if not isinstance(data, dict) or not all(isinstance(v, str) for v in data.values()):
            return _error(400, f"{store.kind} in version \"v1\" cannot be handled as a {store.kind}: data values must be strings")
        bad = [k for k in data if not _CONFIGMAP_KEY.match(k) or len(k) > 253]
        if bad:
            return _error(422, f'{store.kind} "{meta["name"]}" is invalid: data[{bad[0]}]: Invalid value: "{bad[0]}": '
                               "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. "
                               "'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')")
        return dict(body, metadata=dict(meta, namespace=namespace))

    async def _create(self, request: web.Request, store: _Store, version: str, namespace: str | None) -> web.Response:
        body = await self._written(request, store, namespace, None)
        if isinstance(body, web.Response):
            return body
        if body["metadata"].get("resourceVersion"):  # etcd3 store.go Create: a plain error, a 500 without reason
            return _error(500, "resourceVersion should not be set on objects to be created", reason="")
        name = body["metadata"]["name"]
        namespaces = self._stores.get(("", "namespaces"))
        if namespace is not None and namespaces is not None and ("", namespace) not in namespaces.objects:
            return _error(404, f'namespaces "{namespace}" not found')  # NamespaceLifecycle admission
        if (namespace or "", name) in store.objects:
            return _error(409, f'{store.plural} "{name}" already exists')
        meta = {k: v for k, v in body["metadata"].items() if k not in ("uid", "creationTimestamp")}  # the server's to set
        created = self.create(dict(body, metadata=meta, apiVersion=store.api_version(version), kind=store.kind))
        return web.Response(status=201, body=orjson.dumps(created), content_type="application/json")

    async def _replace(self, request: web.Request, store: _Store, version: str, namespace: str | None,
                       name: str) -> web.Response:
        body = await self._written(request, store, namespace, name)
        if isinstance(body, web.Response):
            return body
        old = store.objects.get((namespace or "", name))
        if old is None:  # ConfigMaps are not created by an update (AllowCreateOnUpdate: false)
            return _error(404, f'{store.plural} "{name}" not found')
        wanted = body["metadata"].get("resourceVersion")
        if wanted and wanted != old.obj["metadata"]["resourceVersion"]:  # empty: unconditional, as ConfigMaps allow
            return _error(409, f'Operation cannot be fulfilled on {store.plural} "{name}": the object has been modified; '
                               "please apply your changes to the latest version and try again", reason="Conflict")
        updated = self.update(dict(body, apiVersion=store.api_version(version), kind=store.kind))
        return web.Response(body=orjson.dumps(updated), content_type="application/json")

    def _subresource(self, request: web.Request, store: _Store, version: str, name: str,
                     namespace: str | None = None) -> web.Response:
        """GET of a served subresource: Kueue's ``clusterqueues/<cq>/pendingworkloads`` and the
        namespaced ``localqueues/<lq>/pendingworkloads`` (pending_workloads_cq.go, _lq.go)."""
        if version not in store.versions or (namespace is not None) != store.namespaced:
            return _error(404, "the server could not find the requested resource")
        allowed = self.namespace_rbac.get((store.group, store.plural))
        if store.forbidden or (allowed is not None and namespace not in allowed):
            return _error(403, f'{store.plural}.{store.group} is forbidden: User "sim" cannot get resource '
                               f'"{store.plural}" in API group "{store.group}"')
        if namespace is not None:
            items = self.local_pending_workloads(namespace, name)
            kind = "localqueue"
        else:
            items = self.pending_workloads(name)
            kind = "clusterqueue"
        if items is None:
            return _error(404, f'{kind}.{store.group} "{name}" not found')
        limit = int(request.query.get("limit", "1000") or 1000)
        offset = int(request.query.get("offset", "0") or 0)
        return _json({"kind": "PendingWorkloadsSummary", "apiVersion": store.api_version(version), "metadata": {},
                      "items": items[offset:offset + limit]})

    def local_pending_workloads(self, namespace: str, local_queue: str) -> list[dict[str, Any]] | None:
        """The namespaced visibility answer for one LocalQueue: its Workloads of the ClusterQueue's
        answer, positions in the ClusterQueue and in the LocalQueue (kueue
        pkg/visibility/storage/pending_workloads_lq.go:65-95); None for an unknown LocalQueue."""
        lqs = self._stores.get(("kueue.x-k8s.io", "localqueues"))
        entry = lqs.objects.get((namespace, local_queue)) if lqs else None
        if entry is None:
            return None
        items = self.pending_workloads((entry.obj.get("spec") or {}).get("clusterQueue", "")) or []
        return [i for i in items if i["metadata"]["namespace"] == namespace and i["localQueueName"] == local_queue]

    def pending_workloads(self, cluster_queue: str) -> list[dict[str, Any]] | None:
        """The visibility answer for a ClusterQueue: its Workloads without quota, in Kueue's
        order (higher ``spec.priority`` first, then older), positions from 0 overall and per
        LocalQueue (kueue pkg/visibility/storage/pending_workloads_cq.go:76-88); None when no
        LocalQueue points at it (Kueue answers 404 for a ClusterQueue it does not know)."""
        lqs = self._stores.get(("kueue.x-k8s.io", "localqueues"))
        wls = self._stores.get(("kueue.x-k8s.io", "workloads"))
        queues = {k for k, e in (lqs.objects.items() if lqs else ()) if (e.obj.get("spec") or {}).get("clusterQueue") == cluster_queue}
        if not queues:
            return None
        pending = []
        for entry in (wls.objects.values() if wls else ()):
            obj = entry.obj
            meta, spec, status = obj.get("metadata") or {}, obj.get("spec") or {}, obj.get("status") or {}
            conds = {c.get("type"): c for c in status.get("conditions") or [] if isinstance(c, dict)}
            held = (conds.get("QuotaReserved") or {}).get("status") == "True" or (conds.get("Finished") or {}).get("status") == "True"
            if (meta.get("namespace"), spec.get("queueName")) in queues and not held and spec.get("active", True):
                pending.append((-(spec.get("priority") or 0), meta.get("creationTimestamp") or "", meta.get("name"), obj))
        items: list[dict[str, Any]] = []
        per_lq: collections.Counter[tuple[str, str]] = collections.Counter()
        for pos, (_, _, _, obj) in enumerate(sorted(pending, key=lambda t: t[:3])):
            meta, lq = obj["metadata"], obj["spec"].get("queueName", "")
            items.append({"metadata": {"name": meta["name"], "namespace": meta["namespace"],
                                       "creationTimestamp": meta.get("creationTimestamp")},
                          "priority": obj["spec"].get("priority") or 0, "localQueueName": lq,
                          "positionInClusterQueue": pos, "positionInLocalQueue": per_lq[(meta["namespace"], lq)]})
            per_lq[(meta["namespace"], lq)] += 1
        return items

    def _group_list(self) -> dict[str, Any]:
        groups = sorted({s.group for s in self._stores.values() if s.group})
        return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [self._group(g) for g in groups]}

    def _group(self, group: str) -> dict[str, Any] | None:
        versions: list[str] = []
        for s in self._stores.values():
            if s.group == group:
                versions += [v for v in s.versions if v not in versions]
        if not versions:
            return None
        entries = [{"groupVersion": f"{group}/{v}", "version": v} for v in versions]
        return {"kind": "APIGroup", "apiVersion": "v1", "name": group, "versions": entries, "preferredVersion": entries[0]}

    def _resource_list(self, group: str, version: str) -> dict[str, Any] | None:
        stores = [s for s in self._stores.values() if s.group == group and version in s.versions]
        if not stores and group:
            return None
        return {
            "kind": "APIResourceList", "apiVersion": "v1", "groupVersion": f"{group}/{version}" if group else version,
            "resources": [{"name": s.plural, "singularName": s.kind.lower(), "namespaced": s.namespaced, "kind": s.kind,
                           "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]} for s in stores],
        }

    def _selected(self, store: _Store, entry: _Entry, namespace: str | None,
                  fields: list[Requirement], labels: list[Requirement]) -> bool:
        if namespace is not None and entry.obj.get("metadata", {}).get("namespace") != namespace:
            return False
        return _matches(entry.obj, fields, labels)

    def _list(self, request: web.Request, store: _Store, version: str, namespace: str | None,
              fields: list[Requirement], labels: list[Requirement], partial: bool, shard_info: str | None = None) -> web.Response:
        limit = int(request.query.get("limit", "0") or 0)
        token = request.query.get("continue")
        if token:
            try:
                decoded = orjson.loads(base64.urlsafe_b64decode(token))
                snap_id, offset = decoded["id"], int(decoded["offset"])
            except (ValueError, KeyError, TypeError):
                return _error(400, "invalid continue token")
            snapshot = self._snapshots.get(snap_id)
            if snapshot is None:
                return _error(410, CONTINUE_EXPIRED)
        else:
            entries = [store.objects[k] for k in sorted(store.objects)]
            snapshot = _Snapshot(self._rv, [e for e in entries if self._selected(store, e, namespace, fields, labels)])
            snap_id, offset = uuid.uuid4().hex, 0
        end = len(snapshot.entries) if limit <= 0 else min(len(snapshot.entries), offset + limit)
        meta: dict[str, Any] = {"resourceVersion": str(snapshot.rv)}
        if shard_info:  # echoed when honoured (ListMeta.shardInfo, KEP-5866)
            meta["shardInfo"] = {"selector": shard_info}
        if end < len(snapshot.entries):
            self._snapshots[snap_id] = snapshot
            self._snapshots.move_to_end(snap_id)
            while len(self._snapshots) > 64:
                self._snapshots.popitem(last=False)
            meta["continue"] = base64.urlsafe_b64encode(orjson.dumps({"id": snap_id, "offset": end})).decode()
            meta["remainingItemCount"] = len(snapshot.entries) - end
        else:
            self._snapshots.pop(snap_id, None)
            if store.group and not partial:
                meta["continue"] = ""  # custom resources' lists always carry the key
        items = b",".join(store.encoded(e, version, partial, in_list=True) for e in snapshot.entries[offset:end])
        kind, api_version = (f"{PARTIAL_KIND}List", META_API_VERSION) if partial else (f"{store.kind}List", store.api_version(version))
        head = orjson.dumps({"kind": kind, "apiVersion": api_version, "metadata": meta})
        # The real server writes an empty PartialObjectMetadataList's items as null (a nil Go slice).
        body = head[:-1] + (b',"items":null}' if partial and not items else b',"items":[' + items + b"]}")
        return web.Response(body=body, content_type="application/json")

    def _event_line(self, store: _Store, w: _Watcher, event: _Event) -> bytes | None:
        """The line for ``event`` as ``w`` sees it (selector transitions become ADDED/DELETED)."""
        now = self._selected(store, event.entry, w.namespace, w.fields, w.labels)
        etype = event.type
        if etype == "MODIFIED" and event.old is not None:
            before = self._selected(store, event.old, w.namespace, w.fields, w.labels)
            if before and not now:
                etype, now = "DELETED", True
            elif now and not before:
                etype = "ADDED"
            elif not now:
                return None
        elif etype == "DELETED" and event.old is not None:
            now = self._selected(store, event.old, w.namespace, w.fields, w.labels)
        if not now:
            return None
        return b'{"type":"' + etype.encode() + b'","object":' + store.encoded(event.entry, w.version, w.partial) + b"}\n"

    async def _watch(self, request: web.Request, store: _Store, version: str, namespace: str | None,
                     fields: list[Requirement], labels: list[Requirement], partial: bool) -> web.StreamResponse:
        rv_text = request.query.get("resourceVersion", "")
        bookmarks = request.query.get("allowWatchBookmarks", "") in ("true", "1", "True")
        timeout = float(request.query.get("timeoutSeconds", "0") or 0) or 1800.0
        w = _Watcher(asyncio.Queue(), namespace, fields, labels, partial, version)
        # Registering and replaying happen in one synchronous block: no event can slip between.
        too_old = False
        if rv_text in ("", "0"):
            for k in sorted(store.objects):
                w.queue.put_nowait(_Event(self._rv, "ADDED", store.objects[k], None))
        else:
            try:
                since = int(rv_text)
            except ValueError:
                return _error(400, f"invalid resourceVersion {rv_text!r}")
            if since < store.compacted_rv:
                too_old = True
            else:
                for event in store.history:
                    if event.rv > since:
                        w.queue.put_nowait(event)
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        resp.enable_chunked_encoding()
        # A client may go away at any point, even before the headers are out (a one-shot explain
        # that stops its informers as soon as the lists are in): that ends the watch, quietly, as
        # the real API server does, rather than a traceback from aiohttp's request handler.
        try:
            await resp.prepare(request)
            if too_old:
                status = status_body(410, "Expired", f"too old resource version: {rv_text} ({store.compacted_rv})")
                await resp.write(orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
                await resp.write_eof()
                return resp
        except ConnectionError:
            return resp
        store.watchers.add(w)
        deadline = time.monotonic() + timeout
        try:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                wait = min(remaining, self.bookmark_interval) if bookmarks else remaining
                try:
                    async with asyncio.timeout(wait):  # not wait_for (exporter.node.nvml.NvmlSampler.start)
                        item = await w.queue.get()
                except TimeoutError:
                    if bookmarks and deadline - time.monotonic() > 0:
                        mark: dict[str, Any] = {"kind": PARTIAL_KIND if partial else store.kind,
                                "apiVersion": META_API_VERSION if partial else store.api_version(version),
                                "metadata": {"resourceVersion": str(self._rv)}}
                        if partial or not store.group:  # a typed Go object: its zero creationTimestamp
                            mark["metadata"]["creationTimestamp"] = None
                        await resp.write(orjson.dumps({"type": "BOOKMARK", "object": mark}) + b"\n")
                    continue
                if item == "close":
                    break
                if item in ("cut", "cut-mid"):
                    return self._cut(request, resp, half=b'{"type":"MODIFIED","object":{"kind"' if item == "cut-mid" else b"")
                assert isinstance(item, _Event)
                line = self._event_line(store, w, item)
                if line is None:
                    continue
                if self.drop_after_events is not None and w.sent >= self.drop_after_events:
                    return self._cut(request, resp, half=line[: len(line) // 2] if self.drop_mid_event else b"")
                await resp.write(line)
                w.sent += 1
            await resp.write_eof()
        except ConnectionError:  # the client went away; nothing to tell it
            pass
        finally:
            store.watchers.discard(w)
        return resp

    def _cut(self, request: web.Request, resp: web.StreamResponse, half: bytes) -> web.StreamResponse:
        """Close the connection without the terminating chunk, optionally after half a line."""
        transport = request.transport
        if transport is not None:
            if half:
                transport.write(f"{len(half):x}\r\n".encode() + half + b"\r\n")
            transport.abort()
        return resp

    async def _post(self, request: web.Request, parts: list[str]) -> web.Response:
        try:
            body = orjson.loads(await request.read())
        except orjson.JSONDecodeError:
            return _error(400, "invalid JSON")
        spec = body.get("spec") or {}
        if parts == ["apis", "authentication.k8s.io", "v1", "tokenreviews"]:
            found = self.token_users.get(spec.get("token", ""))
            status: dict[str, Any] = {"authenticated": found is not None}
            if found:
                status["user"] = {"username": found[0], "groups": list(found[1])}
            return _json(dict(body, status=status))
        if parts == ["apis", "authorization.k8s.io", "v1", "subjectaccessreviews"]:
            subjects = [spec.get("user", "")] + list(spec.get("groups") or [])
            if "resourceAttributes" in spec:  # RBAC: a rule in the namespace, or a cluster-wide one ("")
                ra = spec["resourceAttributes"] or {}
                wanted = (ra.get("verb", ""), ra.get("group", ""), ra.get("resource", ""))
                allowed = any((s, *wanted, ns) in self.resource_rules for s in subjects for ns in (ra.get("namespace", ""), ""))
            else:
                attrs = spec.get("nonResourceAttributes") or {}
                allowed = any((s, attrs.get("verb", ""), attrs.get("path", "")) in self.non_resource_rules for s in subjects)
            return _json(dict(body, status={"allowed": allowed, "reason": "sim rule" if allowed else "no rule"}))
        return _error(405, "only TokenReview and SubjectAccessReview accept POST here")

    def allow_non_resource(self, subject: str, verb: str, path: str) -> None:
        """Let a user or group ``verb`` the non-resource URL ``path`` (SubjectAccessReview)."""
        self.non_resource_rules.add((subject, verb, path))

    def allow_resource(self, subject: str, verb: str, group: str, resource: str, namespace: str = "") -> None:
        """Let a user or group ``verb`` a resource in ``namespace`` ("" for every namespace, as a
        ClusterRoleBinding would), for SubjectAccessReviews with resourceAttributes."""
        self.resource_rules.add((subject, verb, group, resource, namespace))

    def add_token_user(self, token: str, username: str, groups: Iterable[str] = ()) -> None:
        """A bearer token that TokenReview authenticates as ``username`` in ``groups``."""
        self.token_users[token] = (username, list(groups))


def _is_watch(query: Any) -> bool:
    return query.get("watch", "") in ("true", "1", "True")


__all__ = ["SimApiServer", "make_object", "parse_selector", "status_body"]
