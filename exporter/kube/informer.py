"""List/watch informer for one resource: a complete, current picture handed to an event handler.

The client-go reflector loop, in asyncio: a paginated LIST gives the complete state and its
``resourceVersion``; a WATCH from that version (with bookmarks) delivers every change after it;
when the stream ends or is cut the watch resumes from the last version seen, so nothing is lost
or replayed twice; when the server has compacted that version away (410 Gone, as an HTTP status
or an ERROR event) the informer lists again and hands the handler the complete state, so objects
deleted in the gap cannot linger as ghosts. Errors back off exponentially with jitter, 429 waits
for ``Retry-After``; 403 and 404 are not retried here but raised, because they mean "RBAC" or
"not served" and the caller (:mod:`.sources`) goes back to discovery.

A LIST is handed over page by page when the handler can take it (:class:`PagedHandler`), so
only one decoded page is alive at a time instead of the whole list: 20,000 Workloads decode to
~240 MB of dicts, and the collector's RSS after that sync went from 547 to 311 MiB
(bench/collector.py). The next page is requested before this one is handed over, so the server
and the transfer work while we parse (a small gain: the sync is bound by our parsing). Other
handlers get the whole list in one ``replace`` call.

Handlers receive raw dicts (orjson-decoded), or, for a handler that names a ``doc_type``, its
LIST items as typed documents (:mod:`exporter.kube.typed`). For ``metadata_only`` resources they are
``PartialObjectMetadata`` objects (``metadata`` only), or full objects if the server ignored the
request for partial metadata; handlers must only rely on ``metadata`` for those.

Requests follow client-go's reflector (tools/cache/reflector.go at kubernetes/client-go
32ce75a7): the first LIST asks for ``resourceVersion=0`` so a cluster's API servers answer it
from their watch cache rather than with a quorum read of etcd (``relistResourceVersion``: "For
performance reasons, initial list performed by reflector uses "0""); a relist after ``410
Gone`` asks for ``resourceVersion=""``, the consistent read, because the cache may be behind
what was already seen (``isLastSyncResourceVersionUnavailable``). A watch cache that cannot
page (kube-apiserver 1.20 in tests/test_realapi_informer.py) answers the first LIST whole,
ignoring ``limit``, as it does client-go's: the page handoff below then holds that one page.
Each watch asks for a
``timeoutSeconds`` drawn from ``[watch_timeout, 2 * watch_timeout]`` (reflector.go ``watch``:
"random in [minWatchTimeout, 2*minWatchTimeout]", 5 minutes by default), so a fleet of
collectors restarted together does not reconnect in step.

A :class:`~.scope.Scope` narrows a namespaced resource: with ``--namespaces`` one informer
lists and watches each namespace (a Role per namespace suffices); one LIST of each namespace
makes one replace for the handler, and each namespace's watch resumes from its own version; a
410 on any of them relists them all. Objects of namespaces the scope does not keep (denylist,
another shard) are dropped before the handler sees them; a sharded scope also asks the server
for its ``shardSelector`` (1.36+, see :mod:`.scope`), and the filter here keeps the result
right whether the server honoured it or not.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from typing import Any, Protocol

import msgspec
import orjson
import structlog

from ..health import SourceHealth
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, Forbidden, Gone, KubeClient, NotFound, error_from_status, report_failure
from .resources import Resource
from .scope import Scope
from .typed import page_decoder

log = structlog.get_logger(__name__)

JSON = "application/json"
PARTIAL_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PARTIAL_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
LIST_PAGE_RETRIES = 5
# A page is handed to a paged handler in slices of this many objects with a yield to the event
# loop between them: the prefetched next page arrives meanwhile, and scrapes are not held up for
# the parsing of a whole page.
HANDOFF_SLICE = 50
# A watch that ends cleanly after at least this long, or after delivering events, is a normal
# server timeout and is resumed at once; a shorter, empty one counts as a failure and backs off.
HEALTHY_WATCH_SECONDS = 1.0


class EventHandler(Protocol):
    """What an informer feeds. Both calls are synchronous. A handler may raise ``ValueError`` to
    report bad objects it skipped (counted as a parse error); any other exception escaping it is
    a bug (counted in ``gangscope_internal_errors_total``). The informer carries on either way."""

    def replace(self, objects: list[dict[str, Any]]) -> None:
        """The complete state after a (re)list: anything not in ``objects`` is gone."""

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """One change: ``event_type`` is ADDED, MODIFIED or DELETED."""


class PagedHandler(EventHandler, Protocol):
    """A handler that takes a LIST as it arrives. The informer calls ``begin_replace()``, then
    ``add_page(objects)`` any number of times, then exactly one ``end_replace(complete)``:
    ``complete`` is True when the whole list arrived (then whatever no page contained is gone)
    and False when it failed midway (then nothing may be deleted: the objects already added are
    real, newer states, but absence from a partial list proves nothing)."""

    def begin_replace(self) -> None: ...

    def add_page(self, objects: list[dict[str, Any]]) -> None: ...

    def end_replace(self, complete: bool) -> None: ...


def is_paged(handler: EventHandler) -> bool:
    """Whether ``handler`` implements :class:`PagedHandler` (the informer then streams LISTs to it)."""
    return all(callable(getattr(handler, m, None)) for m in ("begin_replace", "add_page", "end_replace"))


def collection_path(resource: Resource, version: str, namespace: str | None = None) -> str:
    """``/api/v1/nodes``, ``/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads``..."""
    root = f"/api/{version}" if not resource.group else f"/apis/{resource.group}/{version}"
    if namespace is not None and resource.namespaced:
        root += f"/namespaces/{namespace}"
    return f"{root}/{resource.plural}"


def object_key(obj: Any) -> tuple[str, str]:
    """(namespace, name) of a raw object or a typed document (exporter.kube.typed)."""
    if obj.__class__ is not dict:
        return (obj.metadata.namespace, obj.metadata.name)
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """List and watch one resource until cancelled. ``synced`` is set after the first list."""

    def __init__(self, client: KubeClient, resource: Resource, version: str, handler: EventHandler,
                 health: SourceHealth, *, namespace: str | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, page_size: int = 500, watch_timeout: int = 300,
                 backoff: BackoffPolicy | None = None, scope: Scope | None = None):
        self.client = client
        self.resource = resource
        self.version = version
        self.handler = handler
        self.health = health
        self.scope = scope if resource.namespaced and scope is not None else Scope()
        namespaces = self.scope.watched_namespaces() if namespace is None else (namespace,)
        # One collection per watched namespace, or the cluster-wide one (namespaced resources
        # without --namespaces, and every cluster-scoped one).
        self.paths = [collection_path(resource, version, ns) for ns in namespaces] if namespaces is not None \
            else [collection_path(resource, version)]
        self.path = self.paths[0] if self.paths else collection_path(resource, version)
        selectors = {"fieldSelector": ",".join(s for s in (field_selector, self.scope.field_selector()) if s),
                     "labelSelector": label_selector, "shardSelector": self.scope.shard_selector()}
        self.selectors = {k: v for k, v in selectors.items() if v}
        self._filtered = resource.namespaced and self.scope != Scope()
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = Backoff(backoff or BackoffPolicy())
        self.synced = asyncio.Event()
        self._versions: dict[str, str] = {}  # path -> last resourceVersion seen; resumes its watch
        self.lists = 0  # completed lists (the first and every relist)
        self._consistent = False  # the next list must be a consistent read (resourceVersion="")
        self.shard_selector_honoured: bool | None = None  # what the last LIST's metadata.shardInfo said
        self._keys: set[tuple[str, str]] = set()
        self._log = log.bind(source=health.name, path=self.path)

    @property
    def resource_version(self) -> str:
        """The last resourceVersion seen (of the first collection when there are several)."""
        return self._versions.get(self.path, "") if self.paths else ""

    def keeps(self, obj: Any) -> bool:
        """Whether an object (a dict, or a typed document) is in this informer's scope (always,
        unless a scope narrows it)."""
        if not self._filtered:
            return True
        if obj.__class__ is not dict:
            return self.scope.keeps(obj.metadata.namespace)
        meta = obj.get("metadata")
        return isinstance(meta, dict) and self.scope.keeps(str(meta.get("namespace") or ""))

    async def run(self) -> None:
        """Run until cancelled. Raises :class:`Forbidden` or :class:`NotFound` (the resource is
        not readable or not served); everything else is retried here."""
        listed = False
        while True:
            if not listed:
                try:
                    await self._list()
                except (Forbidden, NotFound):
                    raise
                except ApiError as e:
                    report_failure(self.client, self._log, "kube_list_failed", self.health.name, e)
                    self.health.down(f"list: {e}")
                    await self._pause(e)
                    continue
                listed = True
            try:
                await self._follow_all()
            except Gone:
                self._log.info("kube_watch_expired", resource_version=self.resource_version)
                listed, self._consistent = False, True  # relist at once, consistently: the informer is behind

    async def _follow_all(self) -> None:
        """Watch every collection until one of them needs a relist (Gone) or is not readable."""
        if not self.paths:  # every namespace of --namespaces is another shard's: nothing to watch
            await asyncio.Event().wait()
        if len(self.paths) == 1:
            await self._follow(self.paths[0])
            return
        try:
            async with asyncio.TaskGroup() as group:
                for path in self.paths:
                    group.create_task(self._follow(path))
        except BaseExceptionGroup as eg:  # the first failure stopped the others: raise it as it is
            raise eg.exceptions[0] from None

    async def _follow(self, path: str) -> None:
        """Watch one collection, resuming after every end or error; raises Gone, Forbidden,
        NotFound (for :meth:`run`)."""
        while True:
            try:
                await self._watch(path)
            except (Gone, Forbidden, NotFound):
                raise
            except ApiError as e:
                report_failure(self.client, self._log, "kube_watch_failed", self.health.name, e, path=path,
                               resource_version=self._versions.get(path))
                self.health.error(f"watch: {e}")
                await self._pause(e)

    async def _pause(self, error: ApiError) -> None:
        delay = error.retry_after if error.retry_after is not None else self.backoff.next()
        await asyncio.sleep(delay)

    async def _list(self) -> None:
        if not is_paged(self.handler):
            objects, versions = await self._pages(paged=False)
            self._call(self.handler.replace, objects)
        else:
            handler: PagedHandler = self.handler  # type: ignore[assignment]
            self._call(handler.begin_replace)
            try:
                _, versions = await self._pages(paged=True)
            except BaseException as exc:
                self._call(handler.end_replace, False)
                if isinstance(exc, NotFound) and self.lists == 0 and self._keys:
                    # Gone midway through the first list: the CRD took the objects already
                    # added with it (after a first list, the caller empties the handler: .sources).
                    self._call(handler.begin_replace)
                    self._call(handler.end_replace, True)
                    self._keys = set()
                raise
            self._call(handler.end_replace, True)
        self._versions = versions
        self._consistent = False
        self.lists += 1
        self.backoff.reset()
        self.health.sync_ok(objects=len(self._keys))
        self.synced.set()
        self._log.debug("kube_listed", objects=len(self._keys), resource_versions=versions)

    async def _pages(self, paged: bool) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """List every collection (one per watched namespace, usually one) as one list. A paged
        handler gets each page at once (and ``objects`` stays empty); otherwise they are
        collected. Returns the collected objects and each collection's resourceVersion."""
        objects: list[dict[str, Any]] = []
        versions: dict[str, str] = {}
        self._keys = set()
        for path in self.paths:
            versions[path] = await self._collection_pages(path, paged, objects)
        return objects, versions

    async def _collection_pages(self, path: str, paged: bool, objects: list[dict[str, Any]]) -> str:
        """Fetch every page of one collection, prefetching the next while this one is handed
        over; returns its resourceVersion. The first list reads ``resourceVersion=0`` (the
        watch cache), a relist after 410 ``resourceVersion=""`` (consistent), as client-go."""
        accept = PARTIAL_LIST_ACCEPT if self.resource.metadata_only else JSON
        doc_type = getattr(self.handler, "doc_type", None)
        decode = page_decoder(doc_type) if doc_type is not None and not self.resource.metadata_only else orjson.loads
        params = dict(self.selectors)
        if self.page_size > 0:
            params["limit"] = str(self.page_size)
        if not self._consistent:
            params["resourceVersion"] = "0"

        def fetch(token: str) -> asyncio.Task[Any]:
            # A continued page carries only the token (the server rejects a resourceVersion with it).
            page_params = dict(params, **{"continue": token}) if token else params
            if token:
                page_params.pop("resourceVersion", None)
            return asyncio.ensure_future(self.client.get_json(path, page_params, accept=accept, decode=decode))

        token = ""
        retries = 0
        restarted = continued = False
        pending = fetch(token)
        try:
            while True:
                try:
                    page = await pending
                except Gone:
                    if not token or restarted:
                        raise
                    # The continue token expired (compaction mid-list): start over once from scratch,
                    # consistently (every collection: the handler's replace is one list).
                    self._log.info("kube_list_continue_expired", fetched=len(self._keys))
                    if len(self.paths) > 1:
                        self._consistent = True
                        raise
                    if paged:
                        self._call(self.handler.end_replace, False)  # type: ignore[attr-defined]
                        self._call(self.handler.begin_replace)  # type: ignore[attr-defined]
                    objects.clear()
                    token, restarted, self._keys = "", True, set()
                    params.pop("resourceVersion", None)
                    pending = fetch(token)
                    continue
                except (Forbidden, NotFound):
                    raise
                except ApiError as e:
                    retries += 1
                    if retries > LIST_PAGE_RETRIES or e.status == 401:
                        raise
                    self._log.info("kube_list_page_retry", error=str(e), fetched=len(self._keys))
                    self.health.error(f"list: {e}")
                    await self._pause(e)  # the same continue token stays valid across a 429 or 500
                    pending = fetch(token)
                    continue
                items = page.get("items") if isinstance(page, dict) else None
                meta = page.get("metadata") if isinstance(page, dict) else None
                if items is None and isinstance(meta, dict) and "items" in page:
                    # An empty PartialObjectMetadataList carries "items": null (a nil Go slice);
                    # full lists say []. Seen on kube-apiserver 1.20 (tests/test_realapi_informer.py).
                    items = []
                if not isinstance(items, list) or not isinstance(meta, dict):
                    raise ApiError(200, "BadResponse", f"list {path}: not a List object")
                del page
                token = str(meta.get("continue") or "")
                if token:
                    pending = fetch(token)
                    await asyncio.sleep(0)  # let the request go out before parsing starts
                if "shardSelector" in self.selectors and not continued:
                    self._note_shard_info(meta)
                continued = True
                items = [o for o in items if (o.__class__ is dict or isinstance(o, msgspec.Struct)) and self.keeps(o)]
                self._keys.update(object_key(o) for o in items)
                if not paged:
                    objects += items
                else:
                    for i in range(0, len(items), HANDOFF_SLICE):
                        self._call(self.handler.add_page, items[i:i + HANDOFF_SLICE])  # type: ignore[attr-defined]
                        await asyncio.sleep(0)
                del items  # a paged handler has parsed them: free the page before the next one
                if not token:
                    return str(meta.get("resourceVersion") or "")
        finally:
            if not pending.done():
                pending.cancel()
                await asyncio.gather(pending, return_exceptions=True)

    def _note_shard_info(self, meta: dict[str, Any]) -> None:
        """Whether the server applied our shardSelector: it echoes it in ``metadata.shardInfo``
        (KEP-5866); without it the list is whole and the filter here does the sharding."""
        info = meta.get("shardInfo")
        honoured = isinstance(info, dict) and info.get("selector") == self.selectors["shardSelector"]
        if honoured != self.shard_selector_honoured:
            self._log.info("kube_shard_selector", honoured=honoured, selector=self.selectors["shardSelector"])
        self.shard_selector_honoured = honoured

    async def _watch(self, path: str) -> None:
        """One watch stream of one collection; returns when it ends (resume), raises on errors."""
        # client-go's jitter: timeoutSeconds uniformly in [watch_timeout, 2 * watch_timeout].
        timeout = self.watch_timeout + int(random.random() * self.watch_timeout)
        params = dict(self.selectors, resourceVersion=self._versions.get(path, ""), allowWatchBookmarks="true",
                      timeoutSeconds=str(timeout))
        accept = PARTIAL_ACCEPT if self.resource.metadata_only else JSON
        started = time.monotonic()
        events = 0
        # aclosing: leaving the loop by an exception (410, cancellation) closes the stream now, not at GC.
        async with contextlib.aclosing(self.client.watch(path, params, accept=accept)) as stream:
            async for event in stream:
                etype = event.get("type")
                obj = event.get("object")
                if not isinstance(obj, dict):
                    self.health.parse_error()
                    continue
                if etype == "ERROR":
                    code = obj.get("code")
                    raise error_from_status(code if isinstance(code, int) else 500, orjson.dumps(obj))
                rv = (obj.get("metadata") or {}).get("resourceVersion")
                if etype == "BOOKMARK":
                    if rv:
                        self._versions[path] = str(rv)
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    self.health.parse_error()
                    continue
                if not self.keeps(obj):  # another shard's, or a denied namespace (the server ignored the selector)
                    if rv:
                        self._versions[path] = str(rv)
                    continue
                key = object_key(obj)
                if etype == "DELETED":
                    self._keys.discard(key)
                else:
                    self._keys.add(key)
                self._call(self.handler.apply, etype, obj)
                if rv:
                    self._versions[path] = str(rv)
                events += 1
                if events == 1:
                    self.backoff.reset()
                self.health.set_objects(len(self._keys))
        if events == 0 and time.monotonic() - started < HEALTHY_WATCH_SECONDS:
            await asyncio.sleep(self.backoff.next())

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except ValueError as exc:  # the handler's way to say "bad object(s), skipped"
            self._log.warning("object_parse_problems", detail=str(exc)[:500])
            self.health.parse_error()
        except Exception:  # a handler bug must not stop the stream; counted and logged as one
            self._log.exception("kube_handler_failed")
            self.health.internal_error()
