"""The informer handler of a source whose objects parse into keyed records of one kind: the job
controllers (JobSet, TrainJob, LeaderWorkerSet), KubeRay (RayJob, RayCluster) and Volcano's
Queues.

Why one class: each of these sources does the same four things with its objects (parse, put or
delete the record in its index, drop on a relist what the LIST no longer holds, count objects and
parse problems on the source's health), and a fault in one index's join must be counted and
logged as a bug without losing the informer's next event. Only the parser and the index differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Generic, Protocol, TypeVar

import structlog

from ..fields import ParseError
from ..health import SourceHealth

log = structlog.get_logger(__name__)

Key = tuple[str, str, str]  # (namespace, kind, name)


class KeyedRecord(Protocol):
    """What the handler reads of a record: its key and what its parser could not read."""

    @property
    def key(self) -> Key: ...

    @property
    def errors(self) -> list[str]: ...


R = TypeVar("R", bound=KeyedRecord)


class RecordHandler(Generic[R]):
    """Informer handler of one source: ``parse`` turns an object into a record (raising
    ``ParseError`` when it cannot name it), ``put``/``delete`` keep the index, ``records`` is the
    index's record map (read only, for relists and the object count of this ``kind``); an index
    that keeps ``kind_counts`` (kind -> records held) spares the count a scan of every record on
    every event; ``on_replaced`` is told when a LIST has been applied (an index that may say
    "does not exist" only once it has seen one)."""

    def __init__(self, source: str, kind: str, parse: Callable[[Any], R], records: Mapping[Key, Any],
                 put: Callable[[R], None], delete: Callable[[Key], None],
                 kind_counts: Mapping[str, int] | None = None, on_replaced: Callable[[], None] | None = None) -> None:
        self.source, self.kind = source, kind
        self._parse_object, self._records, self._put, self._delete = parse, records, put, delete
        self._kind_counts, self._on_replaced = kind_counts, on_replaced
        self.health: SourceHealth | None = None

    def replace(self, objects: Iterable[Any]) -> None:
        seen = set()
        for obj in objects:
            rec = self._parse(obj)
            if rec is not None:
                seen.add(rec.key)
                self._guarded(self._put, rec)
        for key in [k for k in self._records if k[1] == self.kind and k not in seen]:
            self._guarded(self._delete, key)
        if self._on_replaced is not None:
            self._on_replaced()
        self._count()

    def apply(self, event_type: str, obj: Any) -> None:
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        rec = self._parse(obj)
        if rec is None:
            return
        if event_type == "DELETED":
            self._guarded(self._delete, rec.key)
        else:
            self._guarded(self._put, rec)
        self._count()

    def _parse(self, obj: Any) -> R | None:
        try:
            rec = self._parse_object(obj)
        except ParseError as exc:
            self._problem(1, str(exc), obj)
            return None
        if rec.errors:
            self._problem(len(rec.errors), "; ".join(rec.errors[:3]), obj)
        return rec

    def _problem(self, n: int, detail: str, obj: Any) -> None:
        meta = obj.get("metadata") if isinstance(obj, dict) else None
        log.warning("object_parse_problems", source=self.source, count=n, detail=detail[:500],
                    object=meta.get("name") if isinstance(meta, dict) else None)
        if self.health is not None:
            self.health.parse_error(n)

    def _guarded(self, fn: Callable[..., None], *args: Any) -> None:
        try:
            fn(*args)
        except Exception:
            log.exception("record_handler_failed", source=self.source)
            if self.health is not None:
                self.health.internal_error()

    def _count(self) -> None:
        if self.health is None:
            return
        if self._kind_counts is not None:
            self.health.set_objects(self._kind_counts.get(self.kind, 0))
        else:
            self.health.set_objects(sum(1 for k in self._records if k[1] == self.kind))
