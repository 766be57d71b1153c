"""List/watch informer for one resource: a complete, current picture handed to an event handler.

The client-go reflector loop, in asyncio: a paginated LIST gives the complete state and its
``resourceVersion``; a WATCH from that version (with bookmarks) delivers every change after it;
when the stream ends or is cut the watch resumes from the last version seen, so nothing is lost
or replayed twice; when the server has compacted that version away (410 Gone, as an HTTP status
or an ERROR event) the informer lists again and hands the handler the complete state, so objects
deleted in the gap cannot linger as ghosts. Errors back off exponentially with jitter, 429 waits
for ``Retry-After``; 403 and 404 are not retried here but raised, because they mean "RBAC" or
"not served" and the caller (:mod:`.sources`) goes back to discovery.

Handlers receive raw dicts (orjson-decoded). For ``metadata_only`` resources they are
``PartialObjectMetadata`` objects (``metadata`` only), or full objects if the server ignored the
request for partial metadata; handlers must only rely on ``metadata`` for those.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any, Protocol

import orjson
import structlog

from ..health import SourceHealth
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, Forbidden, Gone, KubeClient, NotFound, error_from_status
from .resources import Resource

log = structlog.get_logger(__name__)

JSON = "application/json"
PARTIAL_LIST_ACCEPT = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PARTIAL_ACCEPT = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
LIST_PAGE_RETRIES = 5
# A watch that ends cleanly after at least this long, or after delivering events, is a normal
# server timeout and is resumed at once; a shorter, empty one counts as a failure and backs off.
HEALTHY_WATCH_SECONDS = 1.0


class EventHandler(Protocol):
    """What an informer feeds. Both calls are synchronous and must not raise for bad objects
    (the informer counts an escaping exception as a parse error and carries on)."""

    def replace(self, objects: list[dict[str, Any]]) -> None:
        """The complete state after a (re)list: anything not in ``objects`` is gone."""

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        """One change: ``event_type`` is ADDED, MODIFIED or DELETED."""


def collection_path(resource: Resource, version: str, namespace: str | None = None) -> str:
    """``/api/v1/nodes``, ``/apis/kueue.x-k8s.io/v1beta2/namespaces/ns/workloads``..."""
    root = f"/api/{version}" if not resource.group else f"/apis/{resource.group}/{version}"
    if namespace is not None and resource.namespaced:
        root += f"/namespaces/{namespace}"
    return f"{root}/{resource.plural}"


def object_key(obj: dict[str, Any]) -> tuple[str, str]:
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return ("", "")
    return (str(meta.get("namespace") or ""), str(meta.get("name") or ""))


class Informer:
    """List and watch one resource until cancelled. ``synced`` is set after the first list."""

    def __init__(self, client: KubeClient, resource: Resource, version: str, handler: EventHandler,
                 health: SourceHealth, *, namespace: str | None = None, field_selector: str | None = None,
                 label_selector: str | None = None, page_size: int = 500, watch_timeout: int = 300,
                 backoff: BackoffPolicy | None = None):
        self.client = client
        self.resource = resource
        self.version = version
        self.handler = handler
        self.health = health
        self.path = collection_path(resource, version, namespace)
        self.selectors = {k: v for k, v in (("fieldSelector", field_selector), ("labelSelector", label_selector)) if v}
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.backoff = Backoff(backoff or BackoffPolicy())
        self.synced = asyncio.Event()
        self.resource_version = ""  # last seen; resumes the watch
        self.lists = 0  # completed lists (the first and every relist)
        self._keys: set[tuple[str, str]] = set()
        self._log = log.bind(source=health.name, path=self.path)

    async def run(self) -> None:
        """Run until cancelled. Raises :class:`Forbidden` or :class:`NotFound` (the resource is
        not readable or not served); everything else is retried here."""
        while True:
            if not self.resource_version:
                try:
                    await self._list()
                except (Forbidden, NotFound):
                    raise
                except ApiError as e:
                    self._log.warning("kube_list_failed", error=str(e))
                    self.health.down(f"list: {e}")
                    await self._pause(e)
                    continue
            try:
                await self._watch()
            except Gone:
                self._log.info("kube_watch_expired", resource_version=self.resource_version)
                self.resource_version = ""  # relist at once: the informer is now behind
            except (Forbidden, NotFound):
                raise
            except ApiError as e:
                self._log.warning("kube_watch_failed", error=str(e), resource_version=self.resource_version)
                self.health.error(f"watch: {e}")
                await self._pause(e)

    async def _pause(self, error: ApiError) -> None:
        delay = error.retry_after if error.retry_after is not None else self.backoff.next()
        await asyncio.sleep(delay)

    async def _list(self) -> None:
        accept = PARTIAL_LIST_ACCEPT if self.resource.metadata_only else JSON
        params = dict(self.selectors)
        if self.page_size > 0:
            params["limit"] = str(self.page_size)
        objects: list[dict[str, Any]] = []
        token = ""
        retries = 0
        restarted = False
        while True:
            page_params = dict(params, **({"continue": token} if token else {}))
            try:
                page = await self.client.get_json(self.path, page_params, accept=accept)
            except Gone:
                if not token or restarted:
                    raise
                # The continue token expired (compaction mid-list): start over once from scratch.
                self._log.info("kube_list_continue_expired", fetched=len(objects))
                objects, token, restarted = [], "", True
                continue
            except (Forbidden, NotFound):
                raise
            except ApiError as e:
                retries += 1
                if retries > LIST_PAGE_RETRIES or e.status == 401:
                    raise
                self._log.info("kube_list_page_retry", error=str(e), fetched=len(objects))
                self.health.error(f"list: {e}")
                await self._pause(e)  # the same continue token stays valid across a 429 or 500
                continue
            items = page.get("items") if isinstance(page, dict) else None
            meta = page.get("metadata") if isinstance(page, dict) else None
            if not isinstance(items, list) or not isinstance(meta, dict):
                raise ApiError(200, "BadResponse", f"list {self.path}: not a List object")
            objects += [o for o in items if isinstance(o, dict)]
            token = str(meta.get("continue") or "")
            if not token:
                rv = str(meta.get("resourceVersion") or "")
                break
        self._keys = {object_key(o) for o in objects}
        self._call(self.handler.replace, objects)
        self.resource_version = rv
        self.lists += 1
        self.backoff.reset()
        self.health.sync_ok(objects=len(self._keys))
        self.synced.set()
        self._log.debug("kube_listed", objects=len(objects), resource_version=rv)

    async def _watch(self) -> None:
        """One watch stream; returns when it ends (resume), raises on errors."""
        params = dict(self.selectors, resourceVersion=self.resource_version, allowWatchBookmarks="true",
                      timeoutSeconds=str(self.watch_timeout))
        accept = PARTIAL_ACCEPT if self.resource.metadata_only else JSON
        started = time.monotonic()
        events = 0
        # aclosing: leaving the loop by an exception (410, cancellation) closes the stream now, not at GC.
        async with contextlib.aclosing(self.client.watch(self.path, params, accept=accept)) as stream:
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
                        self.resource_version = str(rv)
                    continue
                if etype not in ("ADDED", "MODIFIED", "DELETED"):
                    self.health.parse_error()
                    continue
                key = object_key(obj)
                if etype == "DELETED":
                    self._keys.discard(key)
                else:
                    self._keys.add(key)
                self._call(self.handler.apply, etype, obj)
                if rv:
                    self.resource_version = str(rv)
                events += 1
                if events == 1:
                    self.backoff.reset()
                self.health.set_objects(len(self._keys))
        if events == 0 and time.monotonic() - started < HEALTHY_WATCH_SECONDS:
            await asyncio.sleep(self.backoff.next())

    def _call(self, fn: Any, *args: Any) -> None:
        try:
            fn(*args)
        except Exception:  # a handler bug must not stop the stream; it is counted and logged
            self._log.exception("kube_handler_failed")
            self.health.parse_error()
