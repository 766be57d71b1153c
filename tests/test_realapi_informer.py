"""The API client and the informer against a real kube-apiserver (v1.20.2 on etcd 3.4): the
reference for what ``test_kube_informer.py`` checks against the simulated server. Each test works
in a namespace of its own; the informer's objects must equal the server's (same keys, same
resourceVersions) after every change: nothing lost, nothing invented."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from exporter.kube.backoff import BackoffPolicy
from exporter.kube.client import Forbidden, Gone, KubeClient, NotFound
from exporter.kube.discovery import served_version
from exporter.kube.informer import collection_path
from exporter.kube.resources import NODES, WORKLOADS, Resource
from kueue_objects import admitted_conditions, cond, workload
from informers import StartInformer, informers
from realapi import RealCluster, Relay, Writer
from waiting import eventually

FAST = BackoffPolicy(base=0.01, cap=0.05)
# The collector reads Nodes whole (their status carries the capacity per domain); the informer's
# metadata-only path is checked on a Node variant (tests/test_kube_informer.py does the same).
META_NODES = dataclasses.replace(NODES, metadata_only=True)
WL_API = "kueue.x-k8s.io/v1beta2"


class RecordingClient(KubeClient):
    """The project's client, noting every request and answer (the real server has no request log)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.gets: list[tuple[str, dict[str, str], Any]] = []
        self.watches: list[dict[str, str]] = []
        self.events: list[dict[str, Any]] = []

    async def get_json(self, path: str, params: Any = None, *, accept: str = "application/json", **kwargs: Any) -> Any:
        doc = await super().get_json(path, params, accept=accept, **kwargs)
        self.gets.append((path, dict(params or {}), doc))
        return doc

    async def watch(self, path: str, params: Any = None, *, accept: str = "application/json") -> AsyncIterator[dict[str, Any]]:
        self.watches.append(dict(params or {}))
        async for event in super().watch(path, params, accept=accept):
            self.events.append(event)
            yield event


def truth(real_api: RealCluster, api_version: str, kind: str, namespace: str | None) -> dict[tuple[str, str], str]:
    items = real_api.admin.list(api_version, kind, namespace)["items"]
    return {(o["metadata"].get("namespace", ""), o["metadata"]["name"]): o["metadata"]["resourceVersion"] for o in items}


@pytest.fixture
def ns(real_api: RealCluster) -> str:
    return real_api.namespace(f"inf-{uuid.uuid4().hex[:8]}")


@pytest.fixture
async def writer(real_api: RealCluster) -> AsyncIterator[Writer]:
    w = Writer(real_api)
    yield w
    w.cleanup()


@pytest.fixture
async def client(real_api: RealCluster, tmp_path: Path) -> AsyncIterator[RecordingClient]:
    c = await RecordingClient.create(real_api.kubeconfig(tmp_path / "admin"), request_timeout=10.0, watch_read_slack=2.0)
    yield c
    await c.close()


@pytest.fixture
async def start_informer(client: RecordingClient) -> AsyncIterator[StartInformer]:
    async with informers(client, backoff=FAST) as start:
        yield start


def seed(writer: Writer, ns: str, n: int) -> None:
    for i in range(n):
        writer.create(workload(f"wl-{i:03d}", ns, hosts=[], admitted_cq=None,
                               conditions=[cond("QuotaReserved", "False", "Pending", message="waiting for quota")]))


async def test_paginated_list_then_watch_follows_status_writes(real_api: RealCluster, ns: str, writer: Writer,
                                                                 client: RecordingClient, start_informer: StartInformer) -> None:
    seed(writer, ns, 23)
    r = await start_informer(namespace=ns, page_size=5)
    await r.synced()
    assert r.cache.versions() == truth(real_api, WL_API, "Workload", ns)
    pages = [(q, doc) for path, q, doc in client.gets if path.endswith(f"/namespaces/{ns}/workloads")]
    # The first list reads the watch cache (resourceVersion=0, as client-go's reflector does),
    # and this server's cache answers it whole, ignoring the limit (no continue token).
    assert [(q["limit"], q.get("resourceVersion")) for q, _ in pages] == [("5", "0")]
    assert len(pages[0][1]["items"]) == 23 and not pages[0][1]["metadata"].get("continue")
    assert r.health.up and r.health.objects == 23 and r.health.errors == 0
    await eventually(lambda: len(client.watches) == 1, timeout=5)
    assert client.watches[0]["resourceVersion"] == pages[0][1]["metadata"]["resourceVersion"]
    assert client.watches[0]["allowWatchBookmarks"] == "true"

    # ADDED; MODIFIED by Kueue's own write (server-side apply to /status); DELETED.
    writer.create(workload("new", ns, hosts=[], admitted_cq=None))
    admitted = workload("wl-001", ns, hosts=[], conditions=admitted_conditions(ready=False))
    writer.apply_status(admitted)
    writer.delete(workload("wl-002", ns))
    await eventually(lambda: r.cache.versions() == truth(real_api, WL_API, "Workload", ns), timeout=10)
    status = r.cache.get("wl-001", ns)["status"]
    assert status["admission"]["clusterQueue"] == "cq"
    assert [c["type"] for c in status["conditions"]] == ["QuotaReserved", "Admitted"]
    assert r.health.objects == 23 and r.informer.lists == 1
    kinds = [e["type"] for e in client.events if e["type"] != "BOOKMARK"]
    assert kinds == ["ADDED", "MODIFIED", "DELETED"]


async def test_status_is_not_written_by_create(real_api: RealCluster, ns: str, writer: Writer) -> None:
    """The status subresource is real: a create drops ``status`` (the simulated server keeps it),
    which is why the tests write status as Kueue does, through /status."""
    created = real_api.admin.create(workload("with-status", ns, conditions=admitted_conditions()))
    writer.track(created)
    assert "status" not in created or not created["status"].get("admission")
    patched = real_api.admin.apply_status(workload("with-status", ns, conditions=admitted_conditions()))
    assert patched["status"]["admission"]["clusterQueue"] == "cq"
    managers = {(m["manager"], m["operation"], m.get("subresource")) for m in patched["metadata"]["managedFields"]}
    assert ("kueue-admission", "Apply", "status") in managers or ("kueue-admission", "Apply", None) in managers


async def test_metadata_only_list_and_watch(real_api: RealCluster, writer: Writer, client: RecordingClient,
                                            start_informer: StartInformer) -> None:
    name = f"meta-{uuid.uuid4().hex[:8]}"
    writer.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"rack": "r1"}},
                   "spec": {"podCIDR": "10.1.0.0/24"}})
    r = await start_informer(META_NODES, "v1", label_selector="rack")
    await r.synced()
    node = r.cache.get(name)
    assert node is not None and "spec" not in node and "status" not in node
    assert node["metadata"]["labels"] == {"rack": "r1"}
    listed = next(doc for path, _, doc in client.gets if path == "/api/v1/nodes")
    assert (listed["kind"], listed["apiVersion"]) == ("PartialObjectMetadataList", "meta.k8s.io/v1")
    await eventually(lambda: len(client.watches) == 1)
    writer.update({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"rack": "r2"}},
                   "spec": {"podCIDR": "10.1.0.0/24"}})
    await eventually(lambda: (r.cache.get(name) or {}).get("metadata", {}).get("labels") == {"rack": "r2"}, timeout=10)
    event = next(e for e in client.events if e["type"] == "MODIFIED")
    assert (event["object"]["kind"], event["object"]["apiVersion"]) == ("PartialObjectMetadata", "meta.k8s.io/v1")
    assert "spec" not in event["object"]


async def test_bookmarks_advance_the_resume_point(real_api: RealCluster, ns: str, writer: Writer,
                                                   client: RecordingClient, start_informer: StartInformer) -> None:
    """The watch cache sends a BOOKMARK two seconds before a watch's timeout; with etcd's progress
    notifications it carries the store's newest revision, so after writes to *other* resources the
    informer resumes from past its own last event (and never needs a relist after a quiet spell)."""
    seed(writer, ns, 2)
    r = await start_informer(namespace=ns, watch_timeout=4)
    await r.synced()
    listed_rv = int(r.informer.resource_version)
    other = real_api.namespace(f"{ns}-other")
    for i in range(3):
        writer.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"cm-{i}", "namespace": other}})
    await eventually(lambda: any(e["type"] == "BOOKMARK" for e in client.events), timeout=15)
    mark = next(e for e in client.events if e["type"] == "BOOKMARK")["object"]
    assert (mark["kind"], mark["apiVersion"]) == ("Workload", WL_API)
    assert set(mark["metadata"]) == {"resourceVersion"} and set(mark) == {"kind", "apiVersion", "metadata"}
    await eventually(lambda: len(client.watches) >= 2, timeout=10)
    assert int(client.watches[1]["resourceVersion"]) > listed_rv
    assert r.cache.events == 0 and r.informer.lists == 1  # a bookmark is not an object


async def test_cut_streams_resume_without_relist(real_api: RealCluster, ns: str, writer: Writer, tmp_path: Path,
                                                 start_informer: StartInformer) -> None:
    seed(writer, ns, 4)
    relay = await Relay(real_api.port).start()
    via = await KubeClient.create(real_api.kubeconfig(tmp_path / "relay", port=relay.port), request_timeout=10.0)
    try:
        r = await start_informer(namespace=ns, via=via)
        await r.synced()
        for i in range(5):
            await eventually(lambda: relay.connections > 0 and bool(relay._open))
            relay.cut()
            writer.create(workload(f"after-cut-{i}", ns, hosts=[], admitted_cq=None))
        writer.delete(workload("wl-000", ns))
        await eventually(lambda: r.cache.versions() == truth(real_api, WL_API, "Workload", ns), timeout=10)
        assert r.informer.lists == 1  # the watch cache still held every event: resumed each time
        assert r.health.up
    finally:
        await via.close()
        await relay.stop()


async def test_watch_relists_after_compaction(real_api: RealCluster, ns: str, writer: Writer, tmp_path: Path,
                                              start_informer: StartInformer) -> None:
    """Through a server without a watch cache: the network goes away, objects change, etcd compacts;
    the resumed watch gets 410 (an ERROR event) and the informer lists again, without ghosts."""
    seed(writer, ns, 6)
    uncached = real_api.uncached()
    relay = await Relay(uncached.port).start()
    via = await RecordingClient.create(real_api.kubeconfig(tmp_path / "relay", port=relay.port), request_timeout=10.0)
    try:
        r = await start_informer(namespace=ns, via=via)
        await r.synced()
        await eventually(lambda: len(via.watches) == 1)
        last_seen = r.informer.resource_version
        relay.hold()
        relay.cut()
        writer.delete(workload("wl-001", ns))
        writer.create(workload("during-gap", ns, hosts=[], admitted_cq=None))
        writer.apply_status(workload("wl-002", ns, hosts=[], conditions=admitted_conditions()))
        real_api.wait_compacted(WL_API, "Workload", last_seen)
        relay.release()
        await eventually(lambda: r.informer.lists == 2, timeout=15)
        await eventually(lambda: r.cache.versions() == truth(real_api, WL_API, "Workload", ns), timeout=10)
        assert (ns, "wl-001") not in r.cache.objects
        error = next(e for e in via.events if e["type"] == "ERROR")["object"]
        assert (error["kind"], error["code"], error["reason"]) == ("Status", 410, "Expired")
        # It keeps following after the relist.
        writer.create(workload("after", ns, hosts=[], admitted_cq=None))
        await eventually(lambda: r.cache.versions() == truth(real_api, WL_API, "Workload", ns), timeout=10)
    finally:
        await via.close()
        await relay.stop()


async def test_expired_continue_token_is_410(real_api: RealCluster, ns: str, writer: Writer, client: RecordingClient) -> None:
    """The error the informer restarts a list on: a continue token older than etcd's compaction."""
    seed(writer, ns, 3)
    path = collection_path(WORKLOADS, "v1beta2", ns)
    first = await client.get_json(path, {"limit": "1"})
    token = first["metadata"]["continue"]
    writer.create(workload("moves-the-revision", ns, hosts=[], admitted_cq=None))
    real_api.wait_compacted(WL_API, "Workload", first["metadata"]["resourceVersion"])
    with pytest.raises(Gone) as err:
        await client.get_json(path, {"limit": "1", "continue": token})
    assert err.value.status == 410 and err.value.reason == "Expired"
    assert "continue parameter is too old" in err.value.message


async def test_error_statuses_are_typed(real_api: RealCluster, ns: str, client: RecordingClient, tmp_path: Path) -> None:
    """403 from RBAC with the server's message, and it comes before 404: a user without the right
    is refused even a resource that does not exist. 404 (a plain-text page, not a Status) for a
    group, version or resource that is not served; discovery then says None."""
    real_api.service_account(ns, "nobody")
    nobody = await KubeClient.create(real_api.kubeconfig(tmp_path / "nobody", real_api.token(ns, "nobody")))
    try:
        with pytest.raises(Forbidden) as forbidden:
            await nobody.get_json(collection_path(WORKLOADS, "v1beta2"), {"limit": "1"})
        assert forbidden.value.reason == "Forbidden"
        assert f'User "system:serviceaccount:{ns}:nobody" cannot list resource "workloads"' in forbidden.value.message
        with pytest.raises(Forbidden):
            await nobody.get_json("/apis/kueue.x-k8s.io/v1beta2/nonexistents")
        missing = Resource("nope", "nope.example.com", ("v1",), "things", "Thing", True)
        assert await served_version(nobody, missing) is None  # discovery is open to every user
        assert await served_version(nobody, WORKLOADS) == "v1beta2"
    finally:
        await nobody.close()
    for path in ("/apis/kueue.x-k8s.io/v1beta2/nonexistents", "/apis/kueue.x-k8s.io/v9", "/apis/nope.example.com"):
        with pytest.raises(NotFound) as not_found:
            await client.get_json(path)
        assert not_found.value.message.strip() == "404 page not found"
    with pytest.raises(NotFound) as not_found:
        await client.get_json(collection_path(WORKLOADS, "v1beta2", ns) + "/absent")
    assert (not_found.value.reason, not_found.value.message) == ("NotFound", 'workloads.kueue.x-k8s.io "absent" not found')


async def test_metadata_only_list_of_nothing(real_api: RealCluster, client: RecordingClient,
                                             start_informer: StartInformer) -> None:
    """An empty PartialObjectMetadataList says ``"items": null`` (full lists say ``[]``): a
    metadata-only source with nothing to list (no Node matches) is synced and up, not a bad answer."""
    r = await start_informer(META_NODES, "v1", label_selector=f"absent-{uuid.uuid4().hex[:6]}")
    await r.synced()
    listed = next(doc for path, _, doc in client.gets if path == "/api/v1/nodes")
    assert listed["kind"] == "PartialObjectMetadataList" and listed["items"] is None
    assert r.cache.objects == {} and r.health.up and r.health.errors == 0 and r.health.parse_errors == 0


async def test_crds_as_1_20_holds_them(real_api: RealCluster) -> None:
    """1.20 accepts Kueue's CRDs as they are and drops what it does not know (CEL rules and
    selectableFields): nothing here can check those rules, and the server says so."""
    assert any("kueue.x-k8s.io" in d and "x-kubernetes-validations" in d for d in real_api.crds_dropped)
    assert any(d.endswith("v1beta2 selectableFields") for d in real_api.crds_dropped)
    stored = real_api.admin.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/workloads.kueue.x-k8s.io")
    text = str(stored)
    assert "x-kubernetes-validations" not in text and "selectableFields" not in text
    assert [v["name"] for v in stored["spec"]["versions"] if v["storage"]] == ["v1beta2"]
    assert stored["spec"]["conversion"]["strategy"] == "None"  # no conversion webhook here: v1beta2 only
