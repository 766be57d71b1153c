"""Volcano in explain: a group waiting for its queue, from the Queue object
as Volcano writes it (volcano ed72c7c8 staging/src/volcano.sh/apis/pkg/apis/scheduling/v1beta1/
types.go:350-500) and the enqueue vote of the proportion plugin (pkg/scheduler/plugins/proportion/
proportion.go:404-438): the records in, the exact sentence out; then through the collector's
handlers and explain's assembly layer; and a subGroupPolicy gang, which is not modelled."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cluster import podgroups as pg
from exporter.cluster.collector import build_collector
from exporter.cluster.volcano_queues import VolcanoQueues, parse_volcano_queue, queue_verdict
from exporter.explain import assembly_layer, resolve
from exporter.exposition import Exposition

T0 = 1787220000.0


def queue(name: str = "research", *, state: str | None = "Open", capability: dict | None = None,
          allocated: dict | None = None, deserved: dict | None = None) -> dict[str, Any]:
    """A Queue as the queue controller leaves it (status.state, status.allocated written)."""
    spec: dict[str, Any] = {"weight": 1, "reclaimable": True}
    if capability is not None:
        spec["capability"] = capability
    if deserved is not None:
        spec["deserved"] = deserved
    status: dict[str, Any] = {"allocated": allocated or {"cpu": "0", "memory": "0"}}
    if state is not None:
        status["state"] = state
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
            "metadata": {"name": name, "uid": f"q-{name}", "creationTimestamp": "2026-08-20T09:00:00Z"},
            "spec": spec, "status": status}


def group(phase: str = "Pending", min_resources: dict | None = None, queue_name: str | None = "research") -> dict[str, Any]:
    spec: dict[str, Any] = {"minMember": 4}
    if queue_name is not None:
        spec["queue"] = queue_name
    if min_resources is not None:
        spec["minResources"] = min_resources
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "train", "namespace": "ml", "uid": "pg-train", "creationTimestamp": "2026-08-20T10:00:00Z"},
            "spec": spec, "status": {"phase": phase}}


def record(obj: dict[str, Any]) -> pg.PodGroupRecord:
    [rec] = pg.PARSERS["podgroups_volcano"]("podgroups_volcano", obj)
    assert rec.errors == ()
    return rec


def queues(*objs: dict[str, Any], listed: bool = True) -> VolcanoQueues:
    q = VolcanoQueues()
    handler = q.handlers()["queues_volcano"]
    if listed:
        handler.replace(list(objs))
    else:
        for o in objs:
            handler.apply("ADDED", o)
    return q


GPU8 = {"nvidia.com/gpu": "32", "cpu": "360", "memory": "6000Gi"}
FULL = ("queue research: capability cpu=400, memory=8000Gi, nvidia.com/gpu=64, deserved none, "
        "allocated cpu=90, memory=1500Gi, nvidia.com/gpu=40")

CASES = [
    ("over the capability on GPUs",
     group(min_resources=GPU8),
     queues(queue(capability={"nvidia.com/gpu": "64", "cpu": "400", "memory": "8000Gi"},
                  allocated={"nvidia.com/gpu": "40", "cpu": "90", "memory": "1500Gi"})),
     "waiting for its queue research: minResources cpu=360, memory=6000Gi, nvidia.com/gpu=32 do not fit its capability "
     f"(cpu: 90 allocated + 360 > 400; nvidia.com/gpu: 40 allocated + 32 > 64; {FULL})", "over_capability"),
    ("fits what the queue shows",
     group(min_resources={"nvidia.com/gpu": "16"}),
     queues(queue(capability={"nvidia.com/gpu": "64"}, allocated={"nvidia.com/gpu": "40"})),
     "waiting for its queue research: minResources nvidia.com/gpu=16 fit its capability over what it has allocated, "
     "so what holds it is the scheduler's own count (groups already Inqueue, the cluster's free resources, the other "
     "queues' guarantees) (queue research: capability nvidia.com/gpu=64, deserved none, allocated nvidia.com/gpu=40)",
     "fits_capability"),
    ("a capability that does not name the resource does not limit it",
     group(min_resources={"nvidia.com/gpu": "16"}),
     queues(queue(capability={"cpu": "10"}, deserved={"nvidia.com/gpu": "8"}, allocated={"nvidia.com/gpu": "40"})),
     "waiting for its queue research: minResources nvidia.com/gpu=16 fit its capability over what it has allocated, "
     "so what holds it is the scheduler's own count (groups already Inqueue, the cluster's free resources, the other "
     "queues' guarantees) (queue research: capability cpu=10, deserved nvidia.com/gpu=8, allocated nvidia.com/gpu=40)",
     "fits_capability"),
    ("a closed queue",
     group(min_resources={"nvidia.com/gpu": "16"}),
     queues(queue(state="Closed", capability={"nvidia.com/gpu": "64"})),
     "waiting for its queue research, which is Closed: Volcano enqueues nothing from a queue that is not Open "
     "(queue research: capability nvidia.com/gpu=64, deserved none, allocated cpu=0, memory=0)", "not_open"),
    ("a queue the controller has not opened yet",
     group(min_resources={"nvidia.com/gpu": "16"}),
     queues(queue(state=None)),
     "waiting for its queue research, which is not yet Open: Volcano enqueues nothing from a queue that is not Open "
     "(queue research: capability none, deserved none, allocated cpu=0, memory=0)", "not_open"),
    ("no minResources",
     group(),
     queues(queue(capability={"nvidia.com/gpu": "64"})),
     "waiting for its queue research: the group sets no minResources, so the queue does not hold it back; Volcano's "
     "enqueue action runs each session (queue research: capability nvidia.com/gpu=64, deserved none, allocated cpu=0, "
     "memory=0)", "no_min_resources"),
]


@pytest.mark.parametrize(("obj", "qs", "text", "verdict"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_verdict_against_the_queue(obj: dict[str, Any], qs: VolcanoQueues, text: str, verdict: str) -> None:
    said, evidence = queue_verdict(record(obj), qs)
    assert said == text
    assert (evidence["found"], evidence["verdict"]) == (True, verdict)


def test_a_missing_queue_is_said_only_once_the_queues_are_listed() -> None:
    rec = record(group(queue_name="nope"))
    assert queue_verdict(rec, queues(queue())) == (
        "queue nope does not exist: Volcano does not schedule a group whose queue is missing",
        {"queue": "nope", "min_resources": {}, "found": False})
    unlisted = "waiting for its queue nope (its capacity is not watched: the queues_volcano source is off, forbidden " \
               "or not served)"
    assert queue_verdict(rec, queues(queue(), listed=False))[0] == unlisted  # a dump's Queues prove no absence
    assert queue_verdict(rec, None)[0] == unlisted


def test_the_default_queue_and_an_enqueued_group() -> None:
    rec = record(group(queue_name=None))
    assert rec.queue == "default"  # the API server's default (types.go:193)
    assert queue_verdict(record(group("Inqueue")), queues(queue()))[0] == (
        "enqueued in queue research: Volcano's job controller creates the pods of an Inqueue group "
        "(check its events if none appear)")


def test_the_handler_follows_the_queues_and_counts_bad_quantities() -> None:
    from exporter.health import SourceHealth

    q = VolcanoQueues()
    h = q.handlers()["queues_volcano"]
    expo = Exposition()
    h.health = SourceHealth("queues_volcano", expo)
    h.replace([queue("a"), queue("b", capability={"nvidia.com/gpu": "lots"})])
    assert q.names() == ["a", "b"] and q.listed
    assert q.get("b").capability == () and q.get("b").errors == ["spec.capability: bad quantity for nvidia.com/gpu: 'lots'"]
    assert h.health.parse_errors == 1
    h.apply("DELETED", queue("a"))
    h.apply("BOOKMARK", queue("c"))
    h.apply("ADDED", {"kind": "Queue", "metadata": {}})  # no name: skipped and counted
    assert q.names() == ["b"] and h.health.parse_errors == 2
    assert parse_volcano_queue(queue("p", capability={"cpu": "2"})).capability == (("cpu", "2"),)


def test_explain_names_the_queue_through_the_collector() -> None:
    """The collector's handlers feed the Queue; explain's assembly layer of the Pending group
    (no pods yet: Volcano creates them after Inqueue) says what the queue shows."""
    store, handlers, gangs = build_collector(Exposition(), watch_pods=False)
    gangs.clock = lambda: T0
    handlers["queues_volcano"].replace([queue(capability={"nvidia.com/gpu": "64"}, allocated={"nvidia.com/gpu": "60"})])
    handlers["podgroups_volcano"].replace([group(min_resources={"nvidia.com/gpu": "8"})])
    _, wl, found = resolve(store, gangs, "ml", "train")
    [g] = found
    assert g.stage == "queued"
    layer = assembly_layer(wl, found, T0, gangs)
    assert layer["summary"] == (
        "waiting for its queue research: minResources nvidia.com/gpu=8 do not fit its capability (nvidia.com/gpu: 60 "
        "allocated + 8 > 64; queue research: capability nvidia.com/gpu=64, deserved none, allocated nvidia.com/gpu=60): "
        "PodGroup train (volcano), Pending since 2026-08-20T10:00:00Z (0s), 0/4 running (PodGroup status)")
    assert layer["evidence"]["queue"]["over"] == [("nvidia.com/gpu", 60.0, 8.0, 64.0)]


def test_explain_names_what_it_does_not_model() -> None:
    """A subGroupPolicy gang with members is unknown, and explain says why (types.go:218-268)."""
    store, handlers, gangs = build_collector(Exposition())
    gangs.clock = lambda: T0
    obj = group("Running")
    obj["spec"]["subGroupPolicy"] = [{"name": "replica", "subGroupSize": 2, "matchLabelKeys": ["volcano.sh/partition-id"]}]
    handlers["podgroups_volcano"].replace([obj])
    handlers["pods_volcano"].replace([{
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": f"train-{i}", "namespace": "ml", "uid": f"p{i}", "resourceVersion": "1",
                     "annotations": {"scheduling.k8s.io/group-name": "train"}},
        "spec": {"schedulerName": "volcano", "nodeName": f"n{i}", "containers": [{"name": "c"}]},
        "status": {"phase": "Running"}} for i in range(4)])
    _, wl, found = resolve(store, gangs, "ml", "train")
    layer = assembly_layer(wl, found, T0, gangs)
    assert [g.stage for g in found] == ["unknown"]
    assert layer["summary"] == (
        "not judged: gangscope does not understand what decides this gang: PodGroup train (volcano), Running, "
        "4/4 running (live pods), not modelled: Volcano subGroupPolicy (sub-group minimums by pod labels)")


async def test_the_real_queue_crd_keeps_what_explain_reads(real_api: Any, tmp_path: Any) -> None:
    """Volcano's own Queue CRD (tests/fixtures/realapi/volcano_scheduling.volcano.sh_queues.yaml)
    on the real kube-apiserver: a cluster-scoped Queue with its status written through /status as
    the queue controller writes it, and a Pending PodGroup in it; the collector lists both, and
    explain's word is the one the records above give."""
    import uuid

    from collectors import started_collector
    from realapi import Writer
    from test_realapi_collector import collector_kubeconfig
    from waiting import eventually

    ns = real_api.namespace(f"vq{uuid.uuid4().hex[:6]}")
    name = f"research-{uuid.uuid4().hex[:6]}"
    q = queue(name, capability={"nvidia.com/gpu": "64"}, allocated={"nvidia.com/gpu": "60"})
    del q["metadata"]["uid"], q["metadata"]["creationTimestamp"]
    g = group(min_resources={"nvidia.com/gpu": "8"}, queue_name=name)
    g["metadata"] = {"name": "train", "namespace": ns}
    writer = Writer(real_api, "volcano-controllers")
    try:
        stored = writer.create(q)
        assert (stored["spec"]["capability"], stored["status"]["state"]) == ({"nvidia.com/gpu": "64"}, "Open")
        writer.create(g)
        collector = await started_collector(collector_kubeconfig(real_api, tmp_path / "kc", real_api.port))
        try:
            await eventually(lambda: collector.sources.ready()[0], timeout=15)
            assert collector.sources.sources["queues_volcano"].state == "synced"
            await eventually(lambda: (ns, "train") in {(k[1], k[2]) for k in collector.gangs.gangs}, timeout=15)
            [rec] = [gang.podgroup for k, gang in collector.gangs.gangs.items() if k[1:] == (ns, "train")]
            said, evidence = queue_verdict(rec, collector.gangs.volcano_queues)
            assert said == (f"waiting for its queue {name}: minResources nvidia.com/gpu=8 do not fit its capability "
                            f"(nvidia.com/gpu: 60 allocated + 8 > 64; queue {name}: capability nvidia.com/gpu=64, "
                            "deserved none, allocated nvidia.com/gpu=60)")
            assert evidence["verdict"] == "over_capability"
        finally:
            await collector.stop()
    finally:
        writer.cleanup()
