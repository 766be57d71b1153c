"""Per-source health series, the node_exporter ``scrape_collector_success`` idea for streams.

Each source (a watched resource, NVML, the kubelet socket, sysfs) reports whether it is up,
when it last synced, how many errors and unparseable objects it met, and how many objects it
holds. A source that fails is data, never a failed scrape or a dead process.

Two kinds of skipped input are kept apart, because they call for different people: a *parse
error* is an object or field the source sent that gangscope cannot use (``ParseError``, or any
``ValueError`` a handler raises on purpose: the cluster's owner fixes the object), an *internal
error* is an exception of any other type escaping gangscope's own code (a bug: gangscope's
maintainers fix it). Both skip what was being handled and keep the process serving.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field

import structlog

from .exposition import Exposition, Family, format_value, topology_pairs

log = structlog.get_logger(__name__)

# Source health carries the agent's node and topology labels (SourceHealth.set_labels), like every
# agent series, so that a lost GPU source is found by rack; the collector's have none.
SOURCE_UP = Family("gangscope_source_up", "gauge", "Whether the source is served, permitted and synced (1) or not (0).",
                   ("source",), topology=True)
SOURCE_LAST_SYNC = Family(
    "gangscope_source_last_sync_timestamp_seconds", "gauge", "When the source last completed a list, poll or sample.",
    ("source",), topology=True,
)
SOURCE_ERRORS = Family("gangscope_source_errors_total", "counter", "Errors talking to the source (HTTP, gRPC, NVML, sysfs).",
                       ("source",), topology=True)
SOURCE_OBJECTS = Family("gangscope_source_objects", "gauge", "Objects currently held from the source.", ("source",), topology=True)
PARSE_ERRORS = Family(
    "gangscope_parse_errors_total", "counter", "Objects or fields from the source that could not be parsed and were skipped.",
    ("source",), topology=True,
)
FAMILIES = (SOURCE_UP, SOURCE_LAST_SYNC, SOURCE_ERRORS, SOURCE_OBJECTS, PARSE_ERRORS)
INTERNAL_ERRORS = Family(
    "gangscope_internal_errors_total", "counter",
    "Exceptions raised by gangscope's own code (bugs, not bad input) while handling an object, a sample or a request; "
    "what was being handled was skipped.", ("component",),
)


@dataclass
class InternalErrors:
    """``gangscope_internal_errors_total{component}`` of one exposition (one process; the demo runs
    several in one interpreter, hence one counter per exposition rather than a global)."""

    exposition: Exposition
    counts: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.exposition.register(INTERNAL_ERRORS)
        self._render()

    @classmethod
    def of(cls, exposition: Exposition) -> InternalErrors:
        """The counter of ``exposition``, created (and its family registered) on first use."""
        found = _INTERNAL_ERRORS.get(exposition)
        if found is None:
            found = _INTERNAL_ERRORS[exposition] = cls(exposition)
        return found

    def declare(self, component: str) -> None:
        """Export ``component`` at 0 from the start, so the first bug is an increase a rule sees."""
        if component not in self.counts:
            self.counts[component] = 0
            self._render()

    def count(self, component: str) -> None:
        self.counts[component] = self.counts.get(component, 0) + 1
        self._render()

    def _render(self) -> None:
        self.exposition.set(("internal_errors",), {
            INTERNAL_ERRORS: [INTERNAL_ERRORS.sample((c,), n) for c, n in sorted(self.counts.items())],
        })


_INTERNAL_ERRORS: weakref.WeakKeyDictionary[Exposition, InternalErrors] = weakref.WeakKeyDictionary()


@dataclass
class SourceHealth:
    """Health of one source; every mutation re-renders its five lines into the exposition."""

    name: str
    exposition: Exposition
    up: bool = False
    synced: bool = False
    last_sync: float = 0.0
    errors: int = 0
    parse_errors: int = 0
    objects: int = 0
    detail: str = "not started"
    labels: tuple[tuple[str, str], ...] = ()  # extra labels after ``source`` (the agent's node and topology)
    # Each family's ``name{labels} `` for ``labels``: a polling source renders every second.
    _prefixes: dict[Family, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        self.exposition.register(*FAMILIES)
        InternalErrors.of(self.exposition).declare(self.name)
        self._render()

    def sync_ok(self, objects: int | None = None, now: float | None = None) -> None:
        self.up = True
        self.synced = True
        self.last_sync = time.time() if now is None else now
        self.detail = "ok"
        if objects is not None:
            self.objects = objects
        self._render()

    def down(self, detail: str, error: bool = True) -> None:
        """Mark the source down (``error=False`` for an expected absence such as a CRD not installed)."""
        self.up = False
        self.detail = detail
        if error:
            self.errors += 1
        self._render()

    def error(self, detail: str) -> None:
        """An error that does not (yet) take the source down, e.g. a dropped watch stream."""
        self.errors += 1
        self.detail = detail
        self._render()

    def parse_error(self, count: int = 1) -> None:
        self.parse_errors += count
        self._render()

    def internal_error(self) -> None:
        """An exception from gangscope's code while handling this source's data: counted under
        ``gangscope_internal_errors_total{component=<source>}``, not as a parse error."""
        InternalErrors.of(self.exposition).count(self.name)

    async def guarded(self, round_: Awaitable[object]) -> None:
        """Await one round of a polling source (an NVML sample, a kubelet poll, a sysfs read);
        a bug in it is logged and counted, and the source's loop goes on to the next round."""
        try:
            await round_
        except Exception:
            log.exception("source_round_failed", source=self.name)
            self.internal_error()

    def set_objects(self, count: int) -> None:
        if count != self.objects:
            self.objects = count
            self._render()

    def set_labels(self, labels: tuple[tuple[str, str], ...]) -> None:
        """The topology labels of every health series (the agent's ``node`` and topology labels)."""
        if labels != self.labels:
            self.labels = labels
            self._prefixes.clear()
            self._render()

    def _render(self) -> None:
        prefixes = self._prefixes
        if not prefixes:
            source, topology = (self.name,), topology_pairs(self.labels)
            for fam in (SOURCE_UP, SOURCE_LAST_SYNC, SOURCE_ERRORS, SOURCE_OBJECTS, PARSE_ERRORS):
                prefixes[fam] = fam.prefix(source, topology)
        self.exposition.set(
            ("source", self.name),
            {
                SOURCE_UP: [f"{prefixes[SOURCE_UP]}{1 if self.up else 0}\n"],
                SOURCE_LAST_SYNC: [f"{prefixes[SOURCE_LAST_SYNC]}{format_value(self.last_sync)}\n"] if self.last_sync else [],
                SOURCE_ERRORS: [f"{prefixes[SOURCE_ERRORS]}{self.errors}\n"],
                SOURCE_OBJECTS: [f"{prefixes[SOURCE_OBJECTS]}{self.objects}\n"],
                PARSE_ERRORS: [f"{prefixes[PARSE_ERRORS]}{self.parse_errors}\n"],
            },
        )
