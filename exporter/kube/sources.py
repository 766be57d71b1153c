"""Every watched resource as a supervised source: discover, inform, mark down, retry. Never exits.

Usage (the collector and the agent)::

    sources = SourceSet(client, [
        SourceSpec(WORKLOADS, workload_handler),
        SourceSpec(NODES, node_handler),
        SourceSpec(AGENT_PODS, pod_handler, field_selector=f"spec.nodeName={node}"),
    ], exposition, discovery_interval=args.discovery_interval)
    await sources.start()          # one task per source
    ready = sources.ready          # -> (bool, detail), for ServerConfig(ready=...)
    ...
    await sources.stop()           # cancels and waits

Per source the loop is: find the served version (:func:`.discovery.served_version`); if none,
the source is down (``gangscope_source_up 0``, not counted as an error: a CRD that is not
installed is a fact, not a fault) and discovery runs again every ``discovery_interval`` (a failed
discovery request, such as a 5xx, retries sooner, with backoff); if
served, an :class:`~.informer.Informer` lists and watches it. A 404 from the informer (the CRD was
deleted or the version dropped) empties the handler (``replace([])``: the objects are gone with
their CRD) and goes back to discovery, so a CRD installed later, or re-installed, is picked up.
A 403 (RBAC) marks the source down as an error and is retried every ``discovery_interval``.
Sources are independent: one forbidden or missing resource never affects the others.

``ready()`` is True once every *served* source has completed its first list (sources not served
or forbidden do not hold readiness back: they are visible as down in the health series).

A :class:`~.scope.Scope` (namespaces, denylist, shard) narrows every namespaced source and none
of the cluster-scoped ones, so a source added to :mod:`.resources` later is scoped (and sharded)
by its ``namespaced`` flag alone. :meth:`SourceSet.set_scope` changes it at run time (a resharded
StatefulSet): the namespaced sources list again within the new scope, whose complete list
replaces what their handlers held, so the namespaces that left the shard go and those that
joined arrive, and nothing else moves.
"""

from __future__ import annotations

import asyncio
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import structlog

from ..exposition import Exposition
from ..health import SourceHealth
from .backoff import Backoff, BackoffPolicy
from .client import ApiError, Forbidden, KubeClient, NotFound, report_failure
from .discovery import served_version
from .informer import EventHandler, Informer
from .resources import Resource
from .scope import Scope

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class SourceSpec:
    """A resource to watch and the handler fed with its objects (optionally narrowed)."""

    resource: Resource
    handler: EventHandler
    namespace: str | None = None
    field_selector: str | None = None
    label_selector: str | None = None


@dataclass
class SourceState:
    """Where one source stands (read :attr:`state`, :attr:`version`, :attr:`synced_once`)."""

    spec: SourceSpec
    health: SourceHealth
    phase: str = "discovering"  # discovering, not_served, forbidden, error, syncing
    version: str | None = None
    informer: Informer | None = None
    holds_objects: bool = False  # the handler may hold objects from an earlier informer
    _synced_before: bool = False

    @property
    def state(self) -> str:
        """discovering, not_served, forbidden, error, syncing or synced."""
        if self.informer is not None and self.informer.synced.is_set():
            return "synced"
        return self.phase

    @property
    def synced_once(self) -> bool:
        return self._synced_before or (self.informer is not None and self.informer.synced.is_set())

    def retire_informer(self) -> None:
        if self.informer is not None and self.informer.lists > 0:
            self._synced_before = self.holds_objects = True
        self.informer = None


class SourceSet:
    """Supervises one informer per :class:`SourceSpec`; see the module docstring."""

    def __init__(self, client: KubeClient, specs: Iterable[SourceSpec], exposition: Exposition, *,
                 discovery_interval: float = 60.0, backoff: BackoffPolicy | None = None,
                 page_size: int = 500, watch_timeout: int = 300, scope: Scope | None = None):
        self.client = client
        self.scope = scope or Scope()
        self.discovery_interval = discovery_interval
        self.backoff = backoff
        self.page_size = page_size
        self.watch_timeout = watch_timeout
        self.sources: dict[str, SourceState] = {}
        for spec in specs:
            name = spec.resource.source
            if name in self.sources:
                raise ValueError(f"source {name!r} given twice")
            self.sources[name] = SourceState(spec, SourceHealth(name, exposition))
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._starter: asyncio.Task[None] | None = None

    async def start(self, first: Collection[str] = (), first_limit: float = 30.0, last: Collection[str] = ()) -> None:
        """One task per source, started in up to three stages: the sources named in ``first``
        (those the others' records depend on: the collector's Nodes and Topologies, which place
        every Workload) alone; the others once each of them has listed or is known down, or
        after ``first_limit`` seconds; those named in ``last`` (the collector's PodGroups, which
        join the Workloads) once every earlier one has, likewise. So the dependents are parsed
        and rendered once, not rendered and then rendered again when the Nodes arrive, and each
        gang is judged once, with its Workload already there."""
        names = list(self.sources)
        stages = [[n for n in names if n in first], [n for n in names if n not in first and n not in last],
                  [n for n in names if n in last and n not in first]]
        stages = [stage for stage in stages if stage]
        self._tasks = {name: asyncio.create_task(self._supervise(self.sources[name]), name=f"source:{name}")
                       for name in stages[0]} if stages else {}
        if len(stages) > 1:
            self._starter = asyncio.create_task(self._start_after(stages, first_limit), name="sources:after-first")

    async def _start_after(self, stages: list[list[str]], limit: float) -> None:
        loop = asyncio.get_running_loop()
        for stage in stages[1:]:
            deadline = loop.time() + limit
            while loop.time() < deadline and not all(
                    self.sources[n].synced_once or self.sources[n].phase in ("not_served", "forbidden", "error")
                    for n in self._tasks):
                await asyncio.sleep(0.02)
            for name in stage:
                if name not in self._tasks:  # set_scope may have started it
                    self._tasks[name] = asyncio.create_task(self._supervise(self.sources[name]), name=f"source:{name}")

    async def stop(self) -> None:
        if self._starter is not None:
            self._starter.cancel()
            await asyncio.gather(self._starter, return_exceptions=True)
            self._starter = None
        for task in self._tasks.values():
            task.cancel()
        await asyncio.gather(*self._tasks.values(), return_exceptions=True)
        self._tasks = {}

    async def set_scope(self, scope: Scope) -> None:
        """Watch the namespaced sources within ``scope`` from now on (see the module docstring):
        each one's informer is replaced by one that lists the new scope; cluster-scoped sources
        are left alone. Readiness holds until every restarted source has listed again."""
        if scope == self.scope:
            return
        self.scope = scope
        started = bool(self._tasks)
        restart = [name for name, s in self.sources.items() if s.spec.resource.namespaced]
        for name in restart:
            task = self._tasks.pop(name, None)
            if task is not None:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
            state = self.sources[name]
            state.retire_informer()
            state._synced_before = False
            if started:
                self._tasks[name] = asyncio.create_task(self._supervise(state), name=f"source:{name}")

    async def run(self) -> None:
        """Start and run until cancelled."""
        await self.start()
        try:
            await asyncio.gather(*self._tasks.values())
        finally:
            await self.stop()

    def ready(self) -> tuple[bool, str]:
        waiting, absent = [], []
        for name, s in self.sources.items():
            if s.synced_once:
                continue
            if s.phase in ("not_served", "forbidden"):
                absent.append(f"{name} ({s.phase})")
            else:
                waiting.append(name)
        if waiting:  # grouped by why, so that one unreachable API server reads as one reason
            why: dict[str, list[str]] = {}
            for name in waiting:
                detail = self.sources[name].health.detail
                why.setdefault("" if detail in ("not started", "ok", "") else detail, []).append(name)
            return False, "waiting for first sync of: " + "; ".join(
                ", ".join(names) + (f" ({reason})" if reason else "") for reason, names in why.items())
        detail = f"{len(self.sources) - len(absent)} sources synced"
        return True, detail + ("; down: " + ", ".join(absent) if absent else "")

    async def wait_ready(self, timeout: float | None = None, poll: float = 0.02) -> None:
        """Wait until :meth:`ready` (tests, benchmarks, the demo)."""
        async with asyncio.timeout(timeout):
            while not self.ready()[0]:
                await asyncio.sleep(poll)

    async def _supervise(self, s: SourceState) -> None:
        spec, health = s.spec, s.health
        slog = log.bind(source=health.name)
        # Discovery failures (API server down, 5xx) retry with backoff, at most every interval.
        errors = Backoff(self.backoff or BackoffPolicy())
        while True:
            s.retire_informer()
            try:
                version = await served_version(self.client, spec.resource)
            except ApiError as e:
                s.phase = "error"
                report_failure(self.client, slog, "kube_discovery_failed", health.name, e)
                health.down(f"discovery: {e}")
                await asyncio.sleep(min(e.retry_after or errors.next(), self.discovery_interval))
                continue
            errors.reset()
            if version is None:
                self._empty(s)
                if s.phase != "not_served":
                    slog.info("kube_source_not_served", versions=",".join(spec.resource.versions))
                s.phase = "not_served"
                health.down(f"not served (looked for {spec.resource.plural}.{spec.resource.group or 'core'} "
                            f"{'/'.join(spec.resource.versions)})", error=False)
                await asyncio.sleep(self.discovery_interval)
                continue
            s.version = version
            if s.phase != "forbidden":
                # A forbidden source stays so while it is asked again (every discovery_interval),
                # until a list succeeds: readiness must not flap at each retry (seen against a real
                # API server, tests/test_realapi_rbac.py).
                s.phase = "syncing"
            slog.info("kube_source_served", version=version)
            s.informer = Informer(self.client, spec.resource, version, spec.handler, health,
                                  namespace=spec.namespace, field_selector=spec.field_selector,
                                  label_selector=spec.label_selector, page_size=self.page_size,
                                  watch_timeout=self.watch_timeout, backoff=self.backoff, scope=self.scope)
            try:
                await s.informer.run()
            except NotFound:
                # The CRD (or this version) went away: its objects went with it. Rediscover now;
                # if it is really gone the loop above waits discovery_interval.
                listed = s.informer.lists > 0
                s.retire_informer()
                slog.info("kube_source_gone", version=version)
                self._empty(s)
                health.down(f"{version} no longer served", error=False)
                s.phase = "discovering"
                if not listed:  # discovery and LIST disagree: do not spin between them
                    await asyncio.sleep(self.discovery_interval)
            except Forbidden as e:
                s.retire_informer()
                slog.warning("kube_source_forbidden", error=str(e))
                s.phase = "forbidden"
                health.down(f"forbidden: {e.message}")
                await asyncio.sleep(self.discovery_interval)
            except Exception as e:  # a bug of ours (the informer's, a decoder's): counted, the source retried
                # Nothing awaits this task until shutdown: an exception escaping it would end the
                # source silently while every other one went on.
                s.retire_informer()
                slog.exception("kube_source_failed")
                health.internal_error()
                s.phase = "error"
                health.down(f"internal error: {type(e).__name__}: {e}")
                await asyncio.sleep(errors.next())

    @staticmethod
    def _empty(s: SourceState) -> None:
        if s.holds_objects:
            s.holds_objects = False
            try:
                s.spec.handler.replace([])
            except Exception:
                log.exception("kube_handler_failed", source=s.health.name)
                s.health.internal_error()
            s.health.set_objects(0)


async def run_sources(client: KubeClient, specs: Iterable[SourceSpec], exposition: Exposition,
                      discovery_interval: float = 60.0) -> None:
    """Run a :class:`SourceSet` until cancelled (for callers that need neither ready() nor stop())."""
    await SourceSet(client, specs, exposition, discovery_interval=discovery_interval).run()
