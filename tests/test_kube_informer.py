"""The informer against the simulated API server over real HTTP: every fault ends with the
informer's objects equal to the server's (same keys, same resourceVersions): nothing lost,
nothing invented."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.kube.backoff import BackoffPolicy
from exporter.kube.cache import ObjectCache
from exporter.kube.client import KubeClient
from exporter.kube.informer import Informer, object_key
from exporter.kube.resources import AGENT_PODS, NODES, WORKLOADS, Resource
from exporter.sim.apiserver import SimApiServer, make_object
from informers import StartInformer, informers
from waiting import eventually

# No resource gangscope reads is metadata-only today (Nodes are read whole since the capacity per
# domain needs their status); the informer's PartialObjectMetadata path is tested on a Node variant.
META_NODES = dataclasses.replace(NODES, metadata_only=True)

WL = "/apis/kueue.x-k8s.io/v1beta2/workloads"
FAST = BackoffPolicy(base=0.01, cap=0.05)


def truth(sim: SimApiServer, resource: Resource) -> dict[tuple[str, str], str]:
    out = {}
    for o in sim.objects(resource):
        meta = o["metadata"]
        out[(meta.get("namespace", ""), meta["name"])] = meta["resourceVersion"]
    return out


@pytest.fixture
async def start_informer(kube_client: KubeClient) -> AsyncIterator[StartInformer]:
    async with informers(kube_client, backoff=FAST, page_size=5) as start:
        yield start


def seed(sim: SimApiServer, n: int) -> None:
    sim.serve(WORKLOADS)
    for i in range(n):
        sim.create(make_object(WORKLOADS, f"wl-{i:03d}", f"ns-{i % 3}"))


async def test_paginated_list_then_watch(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 23)
    r = await start_informer(page_size=5)
    await r.synced()
    assert r.cache.versions() == truth(kube_sim, WORKLOADS)
    lists = [q for m, p, q in kube_sim.request_log if p == WL and "watch" not in q]
    assert len(lists) == 5 and all(q["limit"] == "5" for q in lists)
    assert ["continue" in q for q in lists] == [False, True, True, True, True]
    assert r.health.up and r.health.objects == 23 and r.health.errors == 0
    await eventually(lambda: kube_sim.open_watches() == 1)
    watch = [q for m, p, q in kube_sim.request_log if "watch" in q][0]
    assert watch["resourceVersion"] == "23" and watch["allowWatchBookmarks"] == "true"
    kube_sim.create(make_object(WORKLOADS, "new", "ns-0"))
    kube_sim.update(make_object(WORKLOADS, "wl-001", "ns-1", spec={"active": False}))
    kube_sim.delete(make_object(WORKLOADS, "wl-002", "ns-2"))
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))
    assert r.cache.get("wl-001", "ns-1")["spec"] == {"active": False}
    assert r.health.objects == 23 and r.informer.lists == 1


async def test_resume_after_dropped_streams_without_relist(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 4)
    r = await start_informer()
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.drop_after_events, kube_sim.drop_mid_event = 2, True  # every stream cut inside its 3rd event
    for i in range(20):
        kube_sim.create(make_object(WORKLOADS, f"burst-{i:02d}", "ns-0"))
        if i % 5 == 0:
            kube_sim.update(make_object(WORKLOADS, "wl-000", "ns-0", spec={"i": i}))
    kube_sim.delete(make_object(WORKLOADS, "wl-003", "ns-0"))
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))
    assert r.informer.lists == 1  # resumed from the last version every time, never relisted
    watches = [q["resourceVersion"] for m, p, q in kube_sim.request_log if "watch" in q]
    assert len(watches) >= 10 and watches == sorted(watches, key=int)
    assert r.health.errors >= 9 and r.health.up  # each cut counted, the source stays up
    assert r.cache.get("wl-000", "ns-0")["spec"] == {"i": 15}


async def test_410_relists_without_lost_or_ghost_objects(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 10)
    r = await start_informer()
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    # The stream goes away and the server stops answering; meanwhile objects change and etcd compacts.
    kube_sim.hang()
    kube_sim.drop_watches()
    await eventually(lambda: kube_sim.count(WL, watch=True) == 2)
    kube_sim.delete(make_object(WORKLOADS, "wl-004", "ns-1"))
    kube_sim.delete(make_object(WORKLOADS, "wl-005", "ns-2"))
    kube_sim.create(make_object(WORKLOADS, "late", "ns-0"))
    kube_sim.update(make_object(WORKLOADS, "wl-006", "ns-0", spec={"v": 2}))
    kube_sim.compact()
    kube_sim.hang(False)
    await eventually(lambda: r.informer.lists == 2)
    assert r.cache.versions() == truth(kube_sim, WORKLOADS)
    assert ("ns-1", "wl-004") not in r.cache.objects and r.cache.replaces == 2
    assert r.health.objects == 9
    # And it keeps following after the relist.
    kube_sim.create(make_object(WORKLOADS, "after", "ns-0"))
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))


async def test_410_on_continue_restarts_the_list(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 12)
    kube_sim.delay = 0.1

    async def compact_during_second_page() -> None:
        await eventually(lambda: kube_sim.count(WL) >= 2)  # the 2nd page request is in its delay
        kube_sim.compact()

    task = asyncio.create_task(compact_during_second_page())
    r = await start_informer(page_size=5)
    await asyncio.wait_for(r.informer.synced.wait(), 5)
    await task
    first_pages = [q for m, p, q in kube_sim.request_log if p == WL and "continue" not in q and "watch" not in q]
    assert len(first_pages) == 2
    assert r.cache.versions() == truth(kube_sim, WORKLOADS) and r.informer.lists == 1


async def test_429_retry_after_is_honoured(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 3)
    kube_sim.fail_next(3, 429, retry_after=0.25, match=WL)
    start = time.monotonic()
    r = await start_informer(page_size=0)
    await r.synced()
    elapsed = time.monotonic() - start
    # Backoff alone (10-50 ms) would have retried far sooner: the server's 0.25 s was waited out.
    assert elapsed >= 0.7
    assert kube_sim.count(WL, watch=False) == 4  # 3 refused + 1 served: not hammered
    assert r.cache.versions() == truth(kube_sim, WORKLOADS)


async def test_500s_back_off_exponentially(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 3)
    kube_sim.fail_next(4, 500, match=WL)
    start = time.monotonic()
    r = await start_informer(backoff=BackoffPolicy(base=0.05, cap=1.0, jitter=0.0), page_size=0)
    await r.synced()
    assert time.monotonic() - start >= 0.05 + 0.1 + 0.2 + 0.4 - 0.01
    assert kube_sim.count(WL, watch=False) == 5
    assert r.health.errors == 4 and r.health.up
    # Success resets the backoff: the next failure waits the base again.
    assert r.informer.backoff.attempts == 0


async def test_server_that_stops_answering_then_recovers(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    seed(kube_sim, 3)
    r = await start_informer(watch_timeout=1)
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.hang()
    kube_sim.drop_watches()
    kube_sim.create(make_object(WORKLOADS, "during", "ns-0"))
    # The resumed watch gets no answer; the client gives up after timeoutSeconds + slack (2 s).
    await eventually(lambda: r.health.errors >= 2, timeout=30)
    kube_sim.hang(False)
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS), timeout=30)


async def test_token_rotation_401_then_success(kube_sim: SimApiServer, kube_sim_kubeconfig: str,
                                               start_informer: StartInformer) -> None:
    seed(kube_sim, 3)
    r = await start_informer()
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.rotate_token("rotated-token")
    kube_sim.write_kubeconfig(kube_sim_kubeconfig, token="rotated-token")
    kube_sim.drop_watches()
    kube_sim.create(make_object(WORKLOADS, "after-rotation", "ns-0"))
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))
    assert r.informer.lists == 1  # the 401 was retried with the reloaded token, no relist needed
    statuses = kube_sim.count(WL, watch=True)
    assert statuses == 3  # first watch, 401, retried with the new token


async def test_metadata_only_nodes(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    kube_sim.serve(META_NODES)
    kube_sim.create(make_object(META_NODES, "gpu-1", labels={"rack": "r1"}, status={"capacity": {"nvidia.com/gpu": "8"}}))
    r = await start_informer(META_NODES, "v1")
    await r.synced()
    node = r.cache.get("gpu-1")
    assert node["kind"] == "PartialObjectMetadata" and "status" not in node and node["metadata"]["labels"] == {"rack": "r1"}
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.update(make_object(META_NODES, "gpu-1", labels={"rack": "r2"}, status={}))
    await eventually(lambda: r.cache.get("gpu-1")["metadata"]["labels"] == {"rack": "r2"})
    assert r.cache.get("gpu-1")["kind"] == "PartialObjectMetadata"
    accepts = [h for h in kube_sim.request_log if h[1] == "/api/v1/nodes"]
    assert len(accepts) == 2


async def test_metadata_only_accepts_full_objects(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    kube_sim.serve(META_NODES)
    kube_sim.ignore_partial_metadata = True
    kube_sim.create(make_object(META_NODES, "gpu-1", labels={"rack": "r1"}))
    r = await start_informer(META_NODES, "v1")
    await r.synced()
    node = r.cache.get("gpu-1")  # a full NodeList item: no kind, as typed lists are written
    assert "kind" not in node and node["metadata"]["labels"] == {"rack": "r1"} and node["metadata"]["name"] == "gpu-1"


async def test_field_selector_follows_pods_moving_to_and_from_a_node(kube_sim: SimApiServer,
                                                                    start_informer: StartInformer) -> None:
    kube_sim.serve(AGENT_PODS)
    kube_sim.create(make_object(AGENT_PODS, "a", "ns", spec={"nodeName": "n1"}))
    kube_sim.create(make_object(AGENT_PODS, "b", "ns", spec={"nodeName": "n2"}))
    kube_sim.create(make_object(AGENT_PODS, "c", "ns", spec={}))
    r = await start_informer(AGENT_PODS, "v1", field_selector="spec.nodeName=n1")
    await r.synced()
    assert set(r.cache.objects) == {("ns", "a")}
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.update(make_object(AGENT_PODS, "c", "ns", spec={"nodeName": "n1"}))  # scheduled here
    kube_sim.delete(make_object(AGENT_PODS, "a", "ns"))
    await eventually(lambda: set(r.cache.objects) == {("ns", "c")})
    assert r.health.objects == 1


async def test_handler_exception_is_counted_not_fatal(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    seed(kube_sim, 2)

    class Fussy(ObjectCache):
        def apply(self, event_type: str, obj: dict[str, Any]) -> None:
            if obj["metadata"]["name"] == "bad":
                raise ValueError("cannot parse")
            super().apply(event_type, obj)

    cache, health = Fussy(), SourceHealth("workloads", Exposition())
    task = asyncio.create_task(Informer(kube_client, WORKLOADS, "v1beta2", cache, health, backoff=FAST).run())
    try:
        await eventually(lambda: kube_sim.open_watches() == 1)
        kube_sim.create(make_object(WORKLOADS, "bad", "ns"))
        kube_sim.create(make_object(WORKLOADS, "good", "ns"))
        await eventually(lambda: ("ns", "good") in cache.objects)
        assert health.parse_errors == 1 and health.up
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_relist_while_events_keep_arriving(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    """A large paginated relist (after a 410) while creates, updates and deletes keep coming:
    the list is a consistent snapshot and the watch replays everything after it."""
    kube_sim.serve(WORKLOADS)
    kube_sim.bulk_load(make_object(WORKLOADS, f"wl-{i:04d}", f"ns-{i % 7}") for i in range(3000))
    r = await start_informer(page_size=100)
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    stop = asyncio.Event()

    async def churn() -> None:
        i = 0
        while not stop.is_set():
            kube_sim.create(make_object(WORKLOADS, f"churn-{i:04d}", "ns-0"))
            n = (i * 7) % 3000
            kube_sim.apply(make_object(WORKLOADS, f"wl-{n:04d}", f"ns-{n % 7}", spec={"i": i}))
            if i % 3 == 0:
                n = (i * 11 + 1) % 3000
                with contextlib.suppress(KeyError):  # already deleted earlier
                    kube_sim.delete(make_object(WORKLOADS, f"wl-{n:04d}", f"ns-{n % 7}"))
            i += 1
            await asyncio.sleep(0.002)

    # The stream is cut while the server is unresponsive, something changes and etcd compacts:
    # the resumed watch gets 410 and the informer relists ~3000 objects in 30 pages.
    kube_sim.hang()
    kube_sim.drop_watches()
    kube_sim.create(make_object(WORKLOADS, "during-gap", "ns-0"))
    kube_sim.compact()
    kube_sim.delay = 0.005  # 30 pages take > 0.15 s: the churn certainly overlaps the relist
    task = asyncio.create_task(churn())
    kube_sim.hang(False)
    await eventually(lambda: r.informer.lists == 2, timeout=30)
    await asyncio.sleep(0.1)
    stop.set()
    await task
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))
    assert r.informer.lists == 2 and r.health.objects == len(truth(kube_sim, WORKLOADS))
    assert sum(1 for _, name in truth(kube_sim, WORKLOADS) if name.startswith("churn-")) > 20
    assert r.cache.events > 20  # changes made during the list arrived through the watch


async def test_unreadable_kubeconfig_during_rotation_is_retried(kube_sim: SimApiServer, kube_sim_kubeconfig: str,
                                                                start_informer: StartInformer) -> None:
    seed(kube_sim, 2)
    r = await start_informer()
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.rotate_token("next")
    with open(kube_sim_kubeconfig, "w") as f:
        f.write("clusters: [unterminated")  # caught mid-rewrite
    kube_sim.drop_watches()
    await eventually(lambda: r.health.errors >= 3)
    assert not r.task.done()
    kube_sim.write_kubeconfig(kube_sim_kubeconfig, token="next")
    kube_sim.create(make_object(WORKLOADS, "later", "ns-0"))
    await eventually(lambda: r.cache.versions() == truth(kube_sim, WORKLOADS))


class PagedCache(ObjectCache):
    """An ObjectCache that takes LISTs page by page (the informer's paged protocol) and records
    each call, with how many LIST requests the server had seen when a page was handed over."""

    def __init__(self, sim: SimApiServer) -> None:
        super().__init__()
        self.sim = sim
        self.calls: list[Any] = []
        self.at_end: list[tuple[bool, set[tuple[str, str]]]] = []
        self.on_page: Callable[[], None] = lambda: None
        self._seen: set[tuple[str, str]] | None = None

    def begin_replace(self) -> None:
        self.calls.append("begin")
        self._seen = set()

    def add_page(self, objects: list[dict[str, Any]]) -> None:
        assert self._seen is not None
        self.calls.append(("page", len(objects), self.sim.count(WL, watch=False)))
        for o in objects:
            self.objects[object_key(o)] = o
            self._seen.add(object_key(o))
        self.on_page()

    def end_replace(self, complete: bool) -> None:
        assert self._seen is not None
        if complete:
            self.objects = {k: o for k, o in self.objects.items() if k in self._seen}
            self.replaces += 1
        self._seen = None
        self.calls.append(("end", complete))
        self.at_end.append((complete, set(self.objects)))


async def test_paged_handler_gets_each_page_as_it_arrives(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    seed(kube_sim, 23)
    cache, health = PagedCache(kube_sim), SourceHealth("workloads", Exposition())
    informer = Informer(kube_client, WORKLOADS, "v1beta2", cache, health, backoff=FAST, page_size=5)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 3)
        assert cache.calls[0] == "begin" and cache.calls[-1] == ("end", True)
        pages = [c for c in cache.calls if c[0] == "page"]
        assert sum(n for _, n, _ in pages) == 23 and all(n <= 5 for _, n, _ in pages)
        # The first page was parsed while the rest of the list was still to be fetched (at most
        # the next page requested ahead): objects are not collected until the list ends.
        assert pages[0][2] <= 2 < pages[-1][2]
        assert cache.versions() == truth(kube_sim, WORKLOADS) and cache.replaces == 1
        assert health.objects == 23 and informer.lists == 1
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_failed_paged_relist_deletes_nothing(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    """A relist that fails after its first page keeps every object (the pages it missed might
    hold them); the next complete relist deletes what is really gone, once."""
    seed(kube_sim, 10)
    cache, health = PagedCache(kube_sim), SourceHealth("workloads", Exposition())
    informer = Informer(kube_client, WORKLOADS, "v1beta2", cache, health, backoff=FAST, page_size=5)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), 3)
        await eventually(lambda: kube_sim.open_watches() == 1)
        gone = ("ns-2", "wl-008")  # deleted on the server below, so absent from the relist
        assert gone in cache.objects

        def fail_rest_of_relist() -> None:
            if cache.calls.count("begin") == 2 and len(cache.at_end) == 1:
                cache.on_page = lambda: None
                kube_sim.fail_next(6, 500, match=WL)  # the prefetched page 2 and all its retries

        kube_sim.hang()
        kube_sim.drop_watches()
        kube_sim.delete(make_object(WORKLOADS, "wl-008", "ns-2"))
        kube_sim.compact()
        kube_sim.delay = 0.05  # page 2 is waiting in the server when page 1 is handed over
        cache.on_page = fail_rest_of_relist
        kube_sim.hang(False)
        await eventually(lambda: informer.lists == 2, timeout=30)
        complete = [c for c, _ in cache.at_end]
        assert complete == [True, False, True]
        assert gone in cache.at_end[1][1]  # the failed relist deleted nothing
        assert gone not in cache.objects and cache.replaces == 2
        assert cache.versions() == truth(kube_sim, WORKLOADS) and health.objects == 9
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_resource_gone_midway_through_first_paged_list_leaves_nothing(kube_sim: SimApiServer,
                                                                          kube_client: KubeClient) -> None:
    """404 on page 2 of the first list (the CRD was removed): the objects of page 1 went with it."""
    from exporter.kube.client import NotFound

    seed(kube_sim, 10)
    cache, health = PagedCache(kube_sim), SourceHealth("workloads", Exposition())
    informer = Informer(kube_client, WORKLOADS, "v1beta2", cache, health, backoff=FAST, page_size=5)

    def unserve() -> None:
        cache.on_page = lambda: None
        kube_sim.unserve(WORKLOADS)

    kube_sim.delay = 0.05  # page 2 is waiting in the server when page 1 is handed over
    cache.on_page = unserve
    with pytest.raises(NotFound):
        await asyncio.wait_for(informer.run(), 3)
    assert [c for c, _ in cache.at_end] == [False, True] and cache.objects == {}
    assert informer.lists == 0 and not informer.synced.is_set()


async def test_reads_the_watch_cache_first_and_consistently_after_410(kube_sim: SimApiServer,
                                                                     start_informer: StartInformer) -> None:
    """client-go's reflector (relistResourceVersion): the first LIST at resourceVersion=0 (served
    from the API server's watch cache), continued pages with the token alone, and a relist after
    410 at resourceVersion="" (a consistent read)."""
    seed(kube_sim, 12)
    r = await start_informer(page_size=5)
    await r.synced()
    first = [q for _, p, q in kube_sim.request_log if p == WL and "watch" not in q]
    assert [q.get("resourceVersion") for q in first] == ["0", None, None]
    await eventually(lambda: kube_sim.open_watches() == 1)
    kube_sim.hang()
    kube_sim.drop_watches()
    kube_sim.create(make_object(WORKLOADS, "while-away", "ns-0"))
    kube_sim.compact()
    kube_sim.hang(False)
    await eventually(lambda: r.informer.lists == 2)
    relist = [q for _, p, q in kube_sim.request_log if p == WL and "watch" not in q][3:]
    assert relist and relist[0].get("resourceVersion") is None and "continue" not in relist[0]
    assert r.cache.versions() == truth(kube_sim, WORKLOADS)


async def test_watch_timeouts_are_jittered(kube_sim: SimApiServer, start_informer: StartInformer) -> None:
    """timeoutSeconds uniformly in [watch_timeout, 2 * watch_timeout], as client-go spreads
    reconnections (reflector.go: minWatchTimeout .. 2*minWatchTimeout)."""
    seed(kube_sim, 2)
    r = await start_informer(watch_timeout=100)
    await r.synced()
    await eventually(lambda: kube_sim.open_watches() == 1)
    for _ in range(12):
        kube_sim.drop_watches()
        n = kube_sim.count(WL, watch=True)
        await eventually(lambda: kube_sim.count(WL, watch=True) > n)
    timeouts = [int(q["timeoutSeconds"]) for _, p, q in kube_sim.request_log if "watch" in q]
    assert all(100 <= t <= 200 for t in timeouts) and len(set(timeouts)) > 3
