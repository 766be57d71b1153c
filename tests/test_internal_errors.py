"""Bugs are not bad input: an exception of gangscope's own code is counted in
``gangscope_internal_errors_total{component}``, a malformed object in
``gangscope_parse_errors_total{source}``, and neither stops the stream or the source's loop.

The bugs are injected where each catch-all sits (a parser, a store handler, the gang index, an
informer's handler, a polling source's round); the objects are real ones from the fixtures.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families as parse_text

from exporter.cluster.collector import build_collector
from exporter.cluster.workload_doc import WorkloadDoc
from exporter.fields import ParseError
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from exporter.kube.backoff import BackoffPolicy
from exporter.kube.cache import ObjectCache
from exporter.kube.client import KubeClient
from exporter.kube.informer import Informer
from exporter.kube.resources import WORKLOADS
from exporter.sim.apiserver import SimApiServer, make_object
from kueue_objects import admitted_conditions, workload
from waiting import eventually


def counters(expo: Exposition) -> dict[tuple[str, str], float]:
    """(metric, source or component) -> value, parsed from the rendered exposition."""
    out = {}
    for family in parse_text(expo.render(False).decode()):
        for s in family.samples:
            if s.name in ("gangscope_internal_errors_total", "gangscope_parse_errors_total"):
                out[(s.name, s.labels.get("component") or s.labels["source"])] = s.value
    return out


def collector() -> tuple[Exposition, Any, Any, dict[str, Any]]:
    expo = Exposition()
    store, handlers, gangs = build_collector(expo)
    for name, handler in handlers.items():
        handler.health = SourceHealth(name, expo)
    return expo, store, gangs, handlers


def test_every_source_starts_at_zero_internal_errors() -> None:
    """Exported from the start, so the first bug is an increase (not a series born at 1)."""
    expo, _, _, handlers = collector()
    got = counters(expo)
    assert {c for (m, c) in got if m == "gangscope_internal_errors_total"} == set(handlers)
    assert all(v == 0 for v in got.values())


def test_a_parser_bug_is_an_internal_error_and_a_bad_object_a_parse_error(monkeypatch: pytest.MonkeyPatch) -> None:
    expo, store, _, handlers = collector()
    handler = handlers["workloads"]
    good = workload("llama", ns="ml", conditions=admitted_conditions())
    real_parse = handler._parse

    def parse(obj: Any) -> Any:  # a typed document (exporter.cluster.workload_doc), or a dict
        name = obj.metadata.name if isinstance(obj, WorkloadDoc) else obj["metadata"].get("name")
        if name == "buggy":
            raise KeyError("spec")  # what a parser bug looks like: not a ParseError
        return real_parse(obj)

    monkeypatch.setattr(handler, "_parse", parse)
    handler.apply("ADDED", workload("buggy", ns="ml"))
    handler.apply("ADDED", {"metadata": {"namespace": "ml"}})  # no name: the object is bad
    handler.apply("ADDED", good)
    got = counters(expo)
    assert got[("gangscope_internal_errors_total", "workloads")] == 1
    assert got[("gangscope_parse_errors_total", "workloads")] == 1
    assert store.workload("ml", "llama") is not None  # the stream went on


def test_a_store_handler_bug_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    expo, store, _, handlers = collector()
    handler = handlers["workloads"]
    real_put = handler._put

    def put(rec: Any) -> None:
        if rec.name == "buggy":
            raise AttributeError("'NoneType' object has no attribute 'hosts'")
        real_put(rec)

    monkeypatch.setattr(handler, "_put", put)
    handler.replace([workload("buggy", ns="ml"), workload("fine", ns="ml")])
    got = counters(expo)
    assert got[("gangscope_internal_errors_total", "workloads")] == 1
    assert got[("gangscope_parse_errors_total", "workloads")] == 0
    assert store.workload("ml", "fine") is not None


def test_a_store_handler_parse_error_stays_a_parse_error(monkeypatch: pytest.MonkeyPatch) -> None:
    expo, _, _, handlers = collector()
    handler = handlers["topologies"]

    def put(rec: Any) -> None:
        raise ParseError("levels collide on one label name")

    monkeypatch.setattr(handler, "_put", put)
    handler.apply("ADDED", {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "Topology", "metadata": {"name": "t"},
                            "spec": {"levels": [{"nodeLabel": "kubernetes.io/hostname"}]}})
    got = counters(expo)
    assert got[("gangscope_parse_errors_total", "topologies")] == 1
    assert got[("gangscope_internal_errors_total", "topologies")] == 0


def test_a_gang_index_bug_is_an_internal_error(monkeypatch: pytest.MonkeyPatch) -> None:
    expo, _, gangs, handlers = collector()
    source = "podgroups_coscheduling"

    def upsert(src: str, obj: Any) -> None:
        raise TypeError("unhashable type: 'dict'")

    monkeypatch.setattr(gangs, "upsert_object", upsert)
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
          "metadata": {"name": "g", "namespace": "ml"}, "spec": {"minMember": 2}}
    handlers[source].apply("ADDED", pg)  # one event
    handlers[source].replace([pg, pg])  # a list: each object counted, the rest of the list kept going
    got = counters(expo)
    assert got[("gangscope_internal_errors_total", source)] == 3
    assert got[("gangscope_parse_errors_total", source)] == 0


async def test_informer_tells_a_handler_bug_from_a_bad_object(kube_sim: SimApiServer, kube_client: KubeClient) -> None:
    """A handler raising ValueError reports a bad object; any other exception is a bug. The watch goes on."""
    kube_sim.serve(WORKLOADS)

    class Handler(ObjectCache):
        def apply(self, event_type: str, obj: dict[str, Any]) -> None:
            name = obj["metadata"]["name"]
            if name == "bad":
                raise ValueError("cannot parse")
            if name == "buggy":
                raise RuntimeError("a bug")
            super().apply(event_type, obj)

    expo = Exposition()
    cache, health = Handler(), SourceHealth("workloads", expo)
    task = asyncio.create_task(Informer(kube_client, WORKLOADS, "v1beta2", cache, health,
                                        backoff=BackoffPolicy(base=0.01, cap=0.05)).run())
    try:
        await eventually(lambda: kube_sim.open_watches() == 1)
        for name in ("bad", "buggy", "good"):
            kube_sim.create(make_object(WORKLOADS, name, "ns"))
        await eventually(lambda: ("ns", "good") in cache.objects)
        got = counters(expo)
        assert got[("gangscope_parse_errors_total", "workloads")] == 1
        assert got[("gangscope_internal_errors_total", "workloads")] == 1
        assert health.up
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_a_polling_round_that_raises_is_counted_and_the_loop_goes_on() -> None:
    expo = Exposition()
    health = SourceHealth("fabric", expo)
    rounds: list[int] = []

    async def round_(n: int) -> None:
        rounds.append(n)
        if n == 1:
            raise IndexError("list index out of range")
        health.sync_ok()

    for n in range(3):
        await health.guarded(round_(n))
    assert rounds == [0, 1, 2] and health.up
    assert counters(expo)[("gangscope_internal_errors_total", "fabric")] == 1
    with pytest.raises(asyncio.CancelledError):  # cancellation is not a bug: it still stops the loop
        async def cancelled() -> None:
            raise asyncio.CancelledError
        await health.guarded(cancelled())
