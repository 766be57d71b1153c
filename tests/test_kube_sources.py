"""Discovery and supervised sources: version preference, resources not served or forbidden
(down, the others unaffected, retried), CRDs that appear or disappear, readiness. The health
series are read back from the rendered exposition with prometheus_client's parser."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import msgspec
import pytest
import structlog
from prometheus_client.parser import text_string_to_metric_families

from exporter.exposition import Exposition
from exporter.kube.backoff import BackoffPolicy
from exporter.kube.cache import ObjectCache
from exporter.kube.client import KubeClient
from exporter.kube.discovery import served_version
from exporter.kube.resources import LOCAL_QUEUES, NODES, TOPOLOGIES, VOLCANO_PODGROUPS, WORKLOADS, Resource
from exporter.kube.sources import SourceSet, SourceSpec
from exporter.sim.apiserver import SimApiServer, make_object
from waiting import eventually

INTERVAL = 0.1


def health_series(exposition: Exposition) -> dict[tuple[str, str], float]:
    """(metric name, source) -> value from the rendered text exposition."""
    out = {}
    for family in text_string_to_metric_families(exposition.render(False).decode()):
        for s in family.samples:
            if "source" in s.labels:
                out[(s.name, s.labels["source"])] = s.value
    return out


class Harness:
    def __init__(self, client: KubeClient, resources: list[Resource]):
        self.exposition = Exposition()
        self.caches = {r.source: ObjectCache() for r in resources}
        self.set = SourceSet(client, [SourceSpec(r, self.caches[r.source]) for r in resources], self.exposition,
                             discovery_interval=INTERVAL, backoff=BackoffPolicy(base=0.01, cap=0.05), page_size=50)

    def series(self, name: str, source: str) -> float:
        return health_series(self.exposition)[(name, source)]


@pytest.fixture
async def harness(kube_client: KubeClient) -> AsyncIterator[Callable[[list[Resource]], Harness]]:
    made: list[Harness] = []

    def make(resources: list[Resource]) -> Harness:
        h = Harness(kube_client, resources)
        made.append(h)
        return h

    yield make
    for h in made:
        await h.set.stop()


async def test_served_version_prefers_the_first_listed(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    assert await served_version(kube_client, TOPOLOGIES) is None
    kube_sim.serve(TOPOLOGIES, versions=["v1alpha1"])
    assert await served_version(kube_client, TOPOLOGIES) == "v1alpha1"
    kube_sim.serve(TOPOLOGIES, versions=["v1beta1", "v1beta2"])
    assert await served_version(kube_client, TOPOLOGIES) == "v1beta2"
    # The group serves v1beta2, but only for Workloads: Topologies stay on what serves them.
    kube_sim.unserve(TOPOLOGIES, versions=["v1beta2"])
    kube_sim.serve(WORKLOADS, versions=["v1beta2"])
    assert await served_version(kube_client, TOPOLOGIES) == "v1beta1"
    assert await served_version(kube_client, NODES) is None  # core v1 exists, but no nodes here
    kube_sim.serve(NODES)
    assert await served_version(kube_client, NODES) == "v1"


async def test_forbidden_source_is_down_while_the_others_sync(kube_sim: SimApiServer, harness: Callable[[list[Resource]], Harness]) -> None:
    kube_sim.serve(WORKLOADS)
    kube_sim.serve(LOCAL_QUEUES)
    kube_sim.create(make_object(WORKLOADS, "w", "ns"))
    kube_sim.create(make_object(LOCAL_QUEUES, "lq", "ns"))
    kube_sim.forbid(LOCAL_QUEUES)
    h = harness([WORKLOADS, LOCAL_QUEUES])
    await h.set.start()
    await h.set.wait_ready(3)
    ok, detail = h.set.ready()
    assert ok and "localqueues (forbidden)" in detail
    assert h.series("gangscope_source_up", "workloads") == 1 and h.series("gangscope_source_objects", "workloads") == 1
    assert h.series("gangscope_source_up", "localqueues") == 0
    assert h.series("gangscope_source_errors_total", "localqueues") >= 1
    assert h.caches["workloads"].get("w", "ns") is not None and h.caches["localqueues"].objects == {}
    # RBAC fixed: picked up by the next discovery round.
    kube_sim.forbid(LOCAL_QUEUES, False)
    await eventually(lambda: h.caches["localqueues"].get("lq", "ns") is not None)
    assert h.series("gangscope_source_up", "localqueues") == 1
    assert h.set.sources["localqueues"].state == "synced"


async def test_crd_installed_after_start(kube_sim: SimApiServer, harness: Callable[[list[Resource]], Harness]) -> None:
    kube_sim.serve(WORKLOADS)
    h = harness([WORKLOADS, VOLCANO_PODGROUPS])
    await h.set.start()
    await h.set.wait_ready(3)
    assert "podgroups_volcano (not_served)" in h.set.ready()[1]
    assert h.series("gangscope_source_up", "podgroups_volcano") == 0
    assert h.series("gangscope_source_errors_total", "podgroups_volcano") == 0  # absence is not an error
    kube_sim.serve(VOLCANO_PODGROUPS)
    kube_sim.create(make_object(VOLCANO_PODGROUPS, "pg", "ns"))
    await eventually(lambda: h.caches["podgroups_volcano"].get("pg", "ns") is not None)
    assert h.series("gangscope_source_up", "podgroups_volcano") == 1
    assert h.set.sources["podgroups_volcano"].version == "v1beta1"


async def test_crd_deleted_then_reinstalled(kube_sim: SimApiServer, harness: Callable[[list[Resource]], Harness]) -> None:
    kube_sim.serve(WORKLOADS)
    kube_sim.serve(TOPOLOGIES, versions=["v1beta1"])
    kube_sim.create(make_object(TOPOLOGIES, "default", version="v1beta1"))
    kube_sim.create(make_object(WORKLOADS, "w", "ns"))
    h = harness([WORKLOADS, TOPOLOGIES])
    await h.set.start()
    await h.set.wait_ready(3)
    assert h.series("gangscope_source_objects", "topologies") == 1
    kube_sim.unserve(TOPOLOGIES)
    await eventually(lambda: h.set.sources["topologies"].state == "not_served")
    assert h.caches["topologies"].objects == {}  # gone with the CRD: no stale series
    assert h.series("gangscope_source_up", "topologies") == 0 and h.series("gangscope_source_objects", "topologies") == 0
    assert h.series("gangscope_source_up", "workloads") == 1
    # Re-installed at a newer version: discovered again, the preferred version is used.
    kube_sim.serve(TOPOLOGIES, versions=["v1beta2"])
    kube_sim.create(make_object(TOPOLOGIES, "default", version="v1beta2"))
    await eventually(lambda: h.caches["topologies"].get("default") is not None)
    assert h.set.sources["topologies"].version == "v1beta2"
    assert h.caches["topologies"].get("default")["apiVersion"] == "kueue.x-k8s.io/v1beta2"


async def test_ready_waits_for_every_served_source(kube_sim: SimApiServer, harness: Callable[[list[Resource]], Harness]) -> None:
    kube_sim.serve(WORKLOADS)
    kube_sim.serve(NODES)
    kube_sim.fail_next(1, 429, retry_after=0.4, match="/api/v1/nodes")
    h = harness([WORKLOADS, NODES])
    assert h.set.ready() == (False, "waiting for first sync of: workloads, nodes")
    await h.set.start()
    await eventually(lambda: h.set.sources["workloads"].state == "synced")
    # with the reason once the 429 has been answered (it may have been already)
    assert h.set.ready() in ((False, "waiting for first sync of: nodes"),
                             (False, "waiting for first sync of: nodes (list: 429 TooManyRequests: simulated 429)"))
    await h.set.wait_ready(3)
    assert h.set.ready() == (True, "2 sources synced")


async def test_discovery_errors_are_retried(kube_sim: SimApiServer, harness: Callable[[list[Resource]], Harness]) -> None:
    kube_sim.serve(WORKLOADS)
    kube_sim.fail_next(2, 500, match="/apis/kueue.x-k8s.io")
    h = harness([WORKLOADS])
    await h.set.start()
    await h.set.wait_ready(3)
    assert h.series("gangscope_source_errors_total", "workloads") == 2
    assert h.series("gangscope_source_up", "workloads") == 1


def test_duplicate_source_rejected() -> None:
    with pytest.raises(ValueError):
        SourceSet(None, [SourceSpec(WORKLOADS, ObjectCache()), SourceSpec(WORKLOADS, ObjectCache())], Exposition())  # type: ignore[arg-type]


def internal_errors(exposition: Exposition) -> dict[str, float]:
    """``gangscope_internal_errors_total`` by component, from the rendered exposition."""
    return {s.labels["component"]: s.value for family in text_string_to_metric_families(exposition.render(False).decode())
            for s in family.samples if s.name == "gangscope_internal_errors_total"}


class _NameOnly(msgspec.Struct, frozen=True):
    name: str = ""


class _DocWithoutNamespace(msgspec.Struct):
    """A document type that breaks the informer's contract (no ``metadata.namespace``): a bug of ours."""

    metadata: _NameOnly = _NameOnly()


async def test_a_bug_in_a_source_is_counted_logged_and_retried(kube_sim: SimApiServer,
                                                                harness: Callable[[list[Resource]], Harness]) -> None:
    """An exception of our own inside a source (here the informer keying a document it cannot key)
    must not end that source silently: nothing awaits its task until shutdown. It is logged,
    counted as an internal error, the source reads down, the others sync, and it is retried."""
    kube_sim.serve(WORKLOADS)
    kube_sim.serve(LOCAL_QUEUES)
    kube_sim.create(make_object(WORKLOADS, "w", "ns"))
    kube_sim.create(make_object(LOCAL_QUEUES, "lq", "ns"))
    h = harness([WORKLOADS, LOCAL_QUEUES])
    h.caches["workloads"].doc_type = _DocWithoutNamespace  # type: ignore[attr-defined]
    with structlog.testing.capture_logs() as logs:
        await h.set.start()
        await eventually(lambda: internal_errors(h.exposition).get("workloads", 0) >= 2)
    assert any(e["event"] == "kube_source_failed" and e["source"] == "workloads" for e in logs)
    assert h.series("gangscope_source_up", "workloads") == 0
    await eventually(lambda: h.series("gangscope_source_up", "localqueues") == 1)
    del h.caches["workloads"].doc_type  # type: ignore[attr-defined]  # the bug gone: the next retry lists
    await h.set.wait_ready(5)
    assert h.series("gangscope_source_up", "workloads") == 1 and h.series("gangscope_source_objects", "workloads") == 1
