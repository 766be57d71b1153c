"""Faults of the Kubernetes API against the real collector (``exporter.cluster.main.Collector``).

Each test breaks the simulated API server in one way while objects keep changing, checks that
the collector keeps serving (a scrape answers 200 and parses with both parsers *during* the
fault), and ends with the exported per-object series equal to the truth: what ``gangscope
snapshot`` renders for the server's current objects (same handlers, fed from ``sim.objects``).
Equality of the sorted sample lines rules out lost objects, ghost objects and stale series at
once. Health series and ``gangscope_topology_evictions_total`` (which counts what was observed
since start, unknowable from a snapshot) are left out of that comparison and checked directly.

Already covered elsewhere, not repeated here: the informer alone under each fault
(tests/test_kube_informer.py: resume without relist, 410 relist, 410 on ``continue``, 429,
500 backoff timing, hang, token rotation, relist of 3,000 under churn), sources
(tests/test_kube_sources.py: forbidden at start, CRD installed after start, CRD deleted and
reinstalled at another version, discovery 5xx), and the collector following a cut stream and
an ERROR-event 410 (tests/test_collector_live.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import pytest
from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics

from exporter import loader
from exporter.cluster.collector import build_collector
from exporter.cluster.main import Collector, tune_gc
from exporter.exposition import Exposition
from exporter.kube.resources import COLLECTOR_RESOURCES, LOCAL_QUEUES, NODES, TOPOLOGIES, VOLCANO_PODGROUPS, WORKLOADS
from exporter.sim.apiserver import SimApiServer, make_object
from kueue_objects import admitted_conditions, cond, local_queue, node, series, topology, workload
from waiting import eventually
from collectors import make_collector

SERVED = (WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, NODES)
WL_PATH = "/apis/kueue.x-k8s.io/v1beta2/workloads"
# Not derivable from the server's current objects: health, exposition bookkeeping, and the
# eviction counter (observed since start).
NOT_OBJECT_STATE = ("gangscope_source_", "gangscope_parse_errors_total", "gangscope_exposition_",
                    "gangscope_topology_evictions_total", "gangscope_auth_", "gangscope_internal_errors_total",
                    "gangscope_build_info", "gangscope_shard_ordinal", "gangscope_total_shards", "process_", "python_")


# ----- truth and comparison ------------------------------------------------------------------


def object_lines(text: str) -> list[str]:
    """Sorted sample lines that describe objects (duplicates kept: a duplicate is a bug too)."""
    return sorted(line for line in text.splitlines()
                  if line and not line.startswith("#") and not line.startswith(NOT_OBJECT_STATE))


def truth(sim: SimApiServer) -> list[str]:
    """What ``gangscope snapshot`` renders for every object the server holds now."""
    expo = Exposition()
    _, handlers, _ = build_collector(expo)
    objects = []
    for r in COLLECTOR_RESOURCES:
        with contextlib.suppress(KeyError):  # not served (any more)
            objects += [("sim", o) for o in sim.objects(r)]
    with contextlib.redirect_stderr(io.StringIO()):  # feed's notes on kinds it ignores
        loader.feed(expo, handlers, objects, "truth")
    return object_lines(expo.render(False).decode())


async def scrape(port: int, openmetrics: bool = False) -> str:
    headers = {"Accept": "application/openmetrics-text; version=1.0.0"} if openmetrics else {}
    async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/metrics", headers=headers,
                                                   timeout=aiohttp.ClientTimeout(total=10)) as resp:
        assert resp.status == 200
        return await resp.text()


async def still_serving(collector: Collector, within: float = 2.0, parse: bool = True) -> dict:
    """A scrape during the fault: answered fast, complete in both formats. Returns the series
    (``parse=False``: only checks both answers are complete, for 20,000-object expositions)."""
    t0 = time.monotonic()
    text = await scrape(collector.port)
    om = await scrape(collector.port, openmetrics=True)
    assert time.monotonic() - t0 < within, "a scrape must not wait for the API server"
    assert om.endswith("# EOF\n") and text.endswith("\n")
    if not parse:
        return {}
    assert list(parse_openmetrics(om))
    return series(text)


async def converges(collector: Collector, sim: SimApiServer, timeout: float = 30.0) -> None:
    """The collector's object series reach the truth (the server's objects no longer change)."""
    deadline = time.monotonic() + timeout
    want = truth(sim)
    while True:
        got = object_lines(await scrape(collector.port))
        if got == want:
            return
        if time.monotonic() > deadline:
            missing = sorted(set(want) - set(got))
            ghosts = sorted(set(got) - set(want))
            raise AssertionError(f"not converged: {len(missing)} missing, e.g. {missing[:3]}; "
                                 f"{len(ghosts)} ghost/stale, e.g. {ghosts[:3]}")
        await asyncio.sleep(0.05)


def health(s: dict, name: str, source: str) -> float:
    return s[(name, frozenset({("source", source)}))]


def errors_total(s: dict) -> float:
    return sum(v for (n, _), v in s.items() if n == "gangscope_source_errors_total")


# ----- the cluster and the collector ---------------------------------------------------------


def seed(sim: SimApiServer) -> None:
    for r in SERVED:
        sim.serve(r)
    sim.create(topology())
    for i, (b, r) in enumerate([("b1", "r1"), ("b1", "r1"), ("b1", "r2"), ("b2", "r3")]):
        sim.create(node(f"h{i}", b, r))
    sim.create(local_queue("q", "team", "gpu-cq"))
    sim.create(workload("running", hosts=["h0", "h1"], conditions=admitted_conditions()))
    sim.create(workload("pending", admitted_cq=None, conditions=[cond("QuotaReserved", "False", "Pending")]))
    sim.create(workload("v1", version="v1beta1", hosts=["h2"], conditions=admitted_conditions(ready=False)))


StartCollector = Callable[..., Awaitable[Collector]]


@pytest.fixture
async def start_collector(kube_sim: SimApiServer, kube_sim_kubeconfig: str) -> AsyncIterator[StartCollector]:
    """Starts a collector on the seeded ``kube_sim`` (``discovery_interval`` 30 s unless given,
    so sources that are not served do not add discovery requests to the counts)."""
    started: list[Collector] = []

    async def start(*flags: str, discovery_interval: float = 30.0) -> Collector:
        collector = make_collector(kube_sim_kubeconfig, *flags, discovery_interval=discovery_interval)
        started.append(collector)
        await collector.start()
        await collector.sources.wait_ready(5)
        await eventually(lambda: kube_sim.open_watches() == len(SERVED) + sum(
            1 for r in COLLECTOR_RESOURCES if r not in SERVED and (r.group, r.plural) in kube_sim._stores))
        return collector

    seed(kube_sim)
    yield start
    for c in started:
        await c.stop()


def informer_lists(collector: Collector, source: str) -> int:
    informer = collector.sources.sources[source].informer
    return informer.lists if informer is not None else 0


# ----- faults --------------------------------------------------------------------------------


async def test_watch_streams_cut_repeatedly_mid_event(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector()
    await converges(collector, kube_sim)
    lists = kube_sim.count(WL_PATH, watch=False)
    before = errors_total(await still_serving(collector))
    # Every stream delivers two events, then half of the third, then the connection drops.
    kube_sim.drop_after_events, kube_sim.drop_mid_event = 2, True
    for i in range(12):
        kube_sim.create(workload(f"burst-{i}", hosts=[f"h{i % 4}"], conditions=admitted_conditions()))
    kube_sim.update(workload("running", hosts=["h0", "h1"], conditions=[*admitted_conditions(), cond("Finished", "True", "Succeeded")]))
    kube_sim.delete(workload("pending"))
    kube_sim.update(node("h3", "b2", "r9"))
    await still_serving(collector)
    await converges(collector, kube_sim)
    kube_sim.drop_after_events, kube_sim.drop_mid_event = None, False
    # And streams cut mid-event from outside, one change each, five times in a row.
    for i in range(5):
        watches = kube_sim.count(watch=True)
        kube_sim.create(workload(f"between-{i}", admitted_cq=None))
        assert kube_sim.drop_watches(mid_event=True) == len(SERVED)
        await eventually(lambda: kube_sim.count(watch=True) >= watches + len(SERVED)
                         and kube_sim.open_watches() == len(SERVED))
    await converges(collector, kube_sim)
    s = await still_serving(collector)
    assert errors_total(s) >= before + 6 + 5 * len(SERVED)  # every cut counted (6+ by the burst)
    assert kube_sim.count(WL_PATH, watch=False) == lists, "resumed from the last version: no relist"
    assert health(s, "gangscope_source_up", "workloads") == 1
    assert health(s, "gangscope_parse_errors_total", "workloads") == 0  # half lines are discarded, never parsed


async def test_410_gone_status_relists_without_ghosts(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector()
    await converges(collector, kube_sim)
    lists = {r.source: kube_sim.count(r.plural, watch=False) for r in (WORKLOADS, NODES)}
    # The resumed watches answer HTTP 410; meanwhile objects of three resources changed.
    kube_sim.fail_next(1, 410, match=WL_PATH)
    kube_sim.fail_next(1, 410, match="/api/v1/nodes")
    kube_sim.hang()
    kube_sim.drop_watches()
    kube_sim.delete(workload("pending"))
    kube_sim.delete(node("h2", "b1", "r2"))  # "v1" ran on h2: its upper levels become empty
    kube_sim.create(workload("gap", hosts=["h3"], conditions=admitted_conditions()))
    kube_sim.update(local_queue("q", "team", "other-cq"))
    kube_sim.hang(False)
    await converges(collector, kube_sim)
    assert informer_lists(collector, "workloads") == 2 and informer_lists(collector, "nodes") == 2
    assert kube_sim.count(WL_PATH, watch=False) == lists["workloads"] + 1
    assert collector.store.workload("team", "pending") is None and "h2" not in collector.store.nodes


async def test_429_retry_after_is_honoured_not_hammered(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector()
    await converges(collector, kube_sim)
    before = kube_sim.count(WL_PATH)
    lists = kube_sim.count(WL_PATH, watch=False)
    kube_sim.fail_next(3, 429, retry_after=0.3, match=WL_PATH)
    t0 = time.monotonic()
    kube_sim.drop_watches()
    kube_sim.create(workload("throttled", hosts=["h1"], conditions=admitted_conditions()))
    await still_serving(collector)
    await converges(collector, kube_sim)
    assert time.monotonic() - t0 >= 0.9, "three Retry-After: 0.3 waited out"
    await asyncio.sleep(0.3)  # nothing more arrives once the watch is back
    assert kube_sim.count(WL_PATH) - before == 4, "3 refused + 1 served, no retry storm"
    assert kube_sim.count(WL_PATH, watch=False) == lists and informer_lists(collector, "workloads") == 1


async def test_500s_on_every_request(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector()
    await converges(collector, kube_sim)
    before_requests = len(kube_sim.request_log)
    before_errors = errors_total(await still_serving(collector))
    kube_sim.fail_next(8, 500)
    kube_sim.drop_watches()
    kube_sim.create(workload("during-500", admitted_cq=None))
    kube_sim.update(node("h0", "b3", "r7"))
    await still_serving(collector)
    await converges(collector, kube_sim)
    await eventually(lambda: kube_sim.open_watches() == len(SERVED))  # every source back, not only the changed
    s = await still_serving(collector)
    assert errors_total(s) >= before_errors + 8
    assert len(kube_sim.request_log) - before_requests == 8 + len(SERVED), "one request per failure, then one watch each"
    assert all(health(s, "gangscope_source_up", r.source) == 1 for r in SERVED)


async def test_server_that_stops_answering_then_recovers(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector()
    await converges(collector, kube_sim)
    for state in collector.sources.sources.values():
        if state.informer is not None:  # a silent watch is abandoned after timeoutSeconds + slack = 2 s
            state.informer.watch_timeout = 1
    before = errors_total(await still_serving(collector))
    kube_sim.hang()
    kube_sim.drop_watches()
    kube_sim.create(workload("while-silent", hosts=["h2"], conditions=admitted_conditions()))
    kube_sim.delete(workload("pending"))
    # Every source's resumed watch gets no answer and times out; scrapes are answered meanwhile.
    await eventually(lambda: len([1 for s in collector.sources.sources.values() if s.health.errors >= 2]) >= len(SERVED),
                     timeout=6)
    s = await still_serving(collector, within=1.5)
    assert errors_total(s) >= before + 2 * len(SERVED)
    assert collector.store.workload("team", "pending") is not None  # nothing invented while blind
    kube_sim.hang(False)
    await converges(collector, kube_sim)


async def test_token_rotated_before_the_kubeconfig(start_collector: StartCollector, kube_sim: SimApiServer,
                                                  kube_sim_kubeconfig: str) -> None:
    """The server stops accepting the token before the new one is written (a projected token
    rotated late): every request is 401 for a while, the collector keeps serving what it has,
    and picks the new token up from the file without a relist."""
    collector = await start_collector()
    await converges(collector, kube_sim)
    lists = kube_sim.count(WL_PATH, watch=False)
    kube_sim.rotate_token("rotated")
    kube_sim.drop_watches()
    kube_sim.create(workload("after-rotation", hosts=["h3"], conditions=admitted_conditions()))
    await eventually(lambda: all(s.health.errors >= 2 for s in collector.sources.sources.values() if s.informer))
    await still_serving(collector)
    assert collector.store.workload("team", "after-rotation") is None
    kube_sim.write_kubeconfig(kube_sim_kubeconfig, token="rotated")
    await converges(collector, kube_sim)
    assert kube_sim.count(WL_PATH, watch=False) == lists


async def test_crd_appears_after_start_and_crds_disappear(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector(discovery_interval=0.2)
    await converges(collector, kube_sim)
    # Volcano installed later, with a PodGroup joined to "running" by its owner's name.
    kube_sim.serve(VOLCANO_PODGROUPS)
    kube_sim.create(make_object(VOLCANO_PODGROUPS, "job-running", "team", spec={"minMember": 2, "queue": "default"},
                                status={"phase": "Pending"}))
    # (A phase first seen without a condition is dated by the clock of whoever sees it: these
    # are dated by their creation or condition, so the snapshot can agree.)
    kube_sim.create(make_object(VOLCANO_PODGROUPS, "lonely", "team", spec={"minMember": 4},
                                status={"phase": "Inqueue", "conditions": [cond("Unschedulable", "True", "NotEnoughResources")]}))
    await converges(collector, kube_sim)
    s = await still_serving(collector)
    assert health(s, "gangscope_source_up", "podgroups_volcano") == 1
    assert any(n == "gangscope_gang_info" for n, _ in s) and any(n == "gangscope_podgroup_phase" for n, _ in s)
    # Uninstalled: its series go with it.
    kube_sim.unserve(VOLCANO_PODGROUPS)
    await converges(collector, kube_sim)
    s = await still_serving(collector)
    assert not [n for n, _ in s if n.startswith(("gangscope_podgroup_", "gangscope_gang_"))]
    assert health(s, "gangscope_source_up", "podgroups_volcano") == 0
    assert health(s, "gangscope_source_objects", "podgroups_volcano") == 0
    # The Topology CRD goes too: the levels shrink to the hostname, every series is relabelled.
    kube_sim.unserve(TOPOLOGIES)
    await converges(collector, kube_sim)
    text = await scrape(collector.port)
    assert 'rack="' not in text and 'block="' not in text
    await eventually(lambda: collector.sources.sources["topologies"].state == "not_served")


async def test_forbidden_resource_at_run_time(start_collector: StartCollector, kube_sim: SimApiServer) -> None:
    collector = await start_collector(discovery_interval=0.2)
    await converges(collector, kube_sim)
    kube_sim.forbid(LOCAL_QUEUES)
    kube_sim.drop_watches()
    await eventually(lambda: collector.sources.sources["localqueues"].state == "forbidden")
    # The other sources carry on.
    kube_sim.create(workload("while-forbidden", admitted_cq=None))
    kube_sim.update(node("h1", "b2", "r4"))
    await converges(collector, kube_sim)
    s = await still_serving(collector)
    assert health(s, "gangscope_source_up", "localqueues") == 0
    assert health(s, "gangscope_source_errors_total", "localqueues") >= 1
    assert all(health(s, "gangscope_source_up", r.source) == 1 for r in SERVED if r is not LOCAL_QUEUES)
    assert collector.sources.ready()[0], "a forbidden source does not make the collector unready"
    # Changed while unreadable, then RBAC restored: the relist brings it in.
    kube_sim.update(local_queue("q", "team", "moved-cq"))
    kube_sim.forbid(LOCAL_QUEUES, False)
    await converges(collector, kube_sim)
    s = await still_serving(collector)
    assert health(s, "gangscope_source_up", "localqueues") == 1
    assert {dict(k[1])["cluster_queue"] for k in s if k[0] == "gangscope_workload_info"
            and dict(k[1])["workload"] in ("pending", "while-forbidden")} == {"moved-cq"}


@pytest.fixture
def collector_gc() -> Iterator[None]:
    """The garbage collector thresholds ``gangscope collector`` runs with (tune_gc), restored after."""
    saved = gc.get_threshold()
    tune_gc()
    yield
    gc.set_threshold(*saved)


@pytest.mark.usefixtures("collector_gc")
async def test_relist_of_20000_objects_while_events_keep_arriving(start_collector: StartCollector,
                                                                  kube_sim: SimApiServer) -> None:
    """20,000 Workloads land at once (history compacted, streams closed): the collector relists
    them in 40 pages of 500 while creates, updates and deletes keep coming, keeps answering
    scrapes, and ends equal to the server."""
    collector = await start_collector()
    await converges(collector, kube_sim)
    n = 20_000
    stop = asyncio.Event()
    churned = {"during_relist": 0}

    async def churn() -> None:
        i = 0
        while not stop.is_set():
            kube_sim.create(workload(f"churn-{i}", ns="churn", hosts=[f"h{i % 4}"], conditions=admitted_conditions()))
            k = (i * 7919) % n
            # (still admitted: an evicted Workload keeps its last assignment's series by design,
            # which a snapshot of the current objects cannot know)
            kube_sim.apply(workload(f"bulk-{k}", ns=f"ns-{k % 50}", hosts=[f"h{(k + 1) % 4}"],
                                    conditions=admitted_conditions(ready=False), queue=f"q{i}"))
            if i % 3 == 0:
                with contextlib.suppress(KeyError):
                    kube_sim.delete(workload(f"bulk-{(i * 104729 + 1) % n}", ns=f"ns-{((i * 104729 + 1) % n) % 50}"))
            if informer_lists(collector, "workloads") < 2:
                churned["during_relist"] += 1
            i += 1
            await asyncio.sleep(0.005)

    # Each response 150 ms late: the 40 pages span at least 6 s however fast the collector parses,
    # so the scrapes below (each of a 20,000-Workload page) really land while the relist is in flight.
    kube_sim.delay = 0.15
    kube_sim.bulk_load(workload(f"bulk-{i}", ns=f"ns-{i % 50}", hosts=[f"h{i % 4}"], conditions=admitted_conditions())
                       for i in range(n))
    t0 = time.monotonic()
    lists = kube_sim.count(WL_PATH, watch=False)
    task = asyncio.create_task(churn())
    scrapes_during, slowest = 0, 0.0
    try:
        while informer_lists(collector, "workloads") < 2:
            assert time.monotonic() - t0 < 180, "relist did not finish"  # generous: a loaded CI machine
            t1 = time.monotonic()
            await still_serving(collector, within=30.0, parse=False)
            if kube_sim.count(WL_PATH, watch=False) > lists and informer_lists(collector, "workloads") < 2:
                scrapes_during += 1  # answered while the 40 pages were being fetched
                slowest = max(slowest, time.monotonic() - t1)
            await asyncio.sleep(0.05)
        relist_seconds = time.monotonic() - t0
        await asyncio.sleep(0.2)
    finally:
        kube_sim.delay = 0.0
        stop.set()
        await task
    await converges(collector, kube_sim, timeout=90)
    assert scrapes_during >= 3, "scrapes answered during the relist"
    assert churned["during_relist"] >= 5, "events arrived while the relist was running"
    assert kube_sim.count(WL_PATH, watch=False) == lists + n // 500 + 1  # 40 pages, once (+ the churn's remainder)
    assert len(collector.store.workloads) == len(kube_sim.objects(WORKLOADS)) > n * 0.6
    assert informer_lists(collector, "workloads") == 2
    print(f"\nrelist of {n} Workloads under churn: {relist_seconds:.1f} s, {churned['during_relist']} churn rounds "
          f"and {scrapes_during} scrapes (slowest {slowest * 1000:.0f} ms) during it")
