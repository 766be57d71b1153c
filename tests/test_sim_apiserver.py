"""The simulated API server on its own, over raw HTTP (no gangscope client in the loop), so the
informer tests stand on a server whose wire behaviour is itself checked."""

from __future__ import annotations

import asyncio
import base64
import json
import time
import urllib.request
from typing import Any

import aiohttp
import orjson
import pytest

from exporter.kube.resources import NODES, WORKLOADS, AGENT_PODS, TOPOLOGIES
from exporter.sim.apiserver import SimApiServer, make_object

WL = "/apis/kueue.x-k8s.io/v1beta2/workloads"
AUTH = {"Authorization": "Bearer sim-token"}


async def get(sim: SimApiServer, path: str, params: dict[str, str] | None = None, headers: dict[str, str] | None = None
              ) -> tuple[int, Any, dict[str, str]]:
    async with aiohttp.ClientSession() as s, s.get(sim.url + path, params=params, headers={**AUTH, **(headers or {})}) as r:
        body = await r.read()
        # A path that names nothing served gets the real server's plain-text "404 page not found".
        return r.status, orjson.loads(body) if r.content_type == "application/json" else body.decode(), dict(r.headers)


async def watch_lines(sim: SimApiServer, path: str, params: dict[str, str], count: int, headers: dict[str, str] | None = None
                      ) -> list[dict[str, Any]]:
    """The first ``count`` events of a watch stream."""
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as s:
        async with s.get(sim.url + path, params={**params, "watch": "true"}, headers={**AUTH, **(headers or {})}) as r:
            assert r.status == 200
            while len(out) < count:
                line = await asyncio.wait_for(r.content.readline(), 3)
                if not line:
                    break
                out.append(orjson.loads(line))
    return out


def seed(sim: SimApiServer, n: int, namespace: str = "team-a") -> None:
    sim.serve(WORKLOADS)
    for i in range(n):
        sim.create(make_object(WORKLOADS, f"wl-{i:03d}", namespace))


async def test_discovery_documents(kube_sim: SimApiServer) -> None:
    kube_sim.serve(WORKLOADS, versions=["v1beta1"])
    kube_sim.serve(TOPOLOGIES, versions=["v1alpha1"])
    kube_sim.serve(NODES)
    status, group, _ = await get(kube_sim, "/apis/kueue.x-k8s.io")
    assert status == 200 and group["kind"] == "APIGroup"
    assert [v["version"] for v in group["versions"]] == ["v1beta1", "v1alpha1"]
    _, resources, _ = await get(kube_sim, "/apis/kueue.x-k8s.io/v1alpha1")
    assert [r["name"] for r in resources["resources"]] == ["topologies"]
    _, core, _ = await get(kube_sim, "/api")
    assert core["versions"] == ["v1"]
    _, core_v1, _ = await get(kube_sim, "/api/v1")
    assert {"name": "nodes", "namespaced": False, "kind": "Node"}.items() <= core_v1["resources"][0].items()
    _, groups, _ = await get(kube_sim, "/apis")
    assert [g["name"] for g in groups["groups"]] == ["kueue.x-k8s.io"]
    assert (await get(kube_sim, "/apis/scheduling.x-k8s.io"))[0] == 404
    assert (await get(kube_sim, "/apis/kueue.x-k8s.io/v1beta2/workloads"))[0] == 404  # version not served


async def test_list_pagination_is_a_consistent_snapshot(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 7)
    status, page1, _ = await get(kube_sim, WL, {"limit": "3"})
    assert status == 200 and page1["kind"] == "WorkloadList"
    assert [o["metadata"]["name"] for o in page1["items"]] == ["wl-000", "wl-001", "wl-002"]
    assert page1["metadata"]["remainingItemCount"] == 4
    # Changes after the first page do not leak into later pages (same resourceVersion).
    kube_sim.delete(make_object(WORKLOADS, "wl-005", "team-a"))
    _, page2, _ = await get(kube_sim, WL, {"limit": "3", "continue": page1["metadata"]["continue"]})
    _, page3, _ = await get(kube_sim, WL, {"limit": "3", "continue": page2["metadata"]["continue"]})
    names = [o["metadata"]["name"] for o in page1["items"] + page2["items"] + page3["items"]]
    assert names == [f"wl-{i:03d}" for i in range(7)]
    assert page3["metadata"]["continue"] == ""  # a custom resource's last page says so, as the real server does
    assert page1["metadata"]["resourceVersion"] == page3["metadata"]["resourceVersion"] == "7"


async def test_continue_token_expires_after_compaction(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 4)
    _, page1, _ = await get(kube_sim, WL, {"limit": "2"})
    kube_sim.compact()
    status, body, _ = await get(kube_sim, WL, {"limit": "2", "continue": page1["metadata"]["continue"]})
    assert status == 410 and body["kind"] == "Status" and body["reason"] == "Expired" and body["code"] == 410


async def test_watch_replays_history_then_streams_live_events(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 3)
    obj = make_object(WORKLOADS, "wl-001", "team-a", spec={"active": False})

    async def later() -> None:
        await asyncio.sleep(0.1)
        kube_sim.update(obj)
        kube_sim.delete(obj)

    task = asyncio.create_task(later())
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "1"}, 4)
    await task
    assert [(e["type"], e["object"]["metadata"]["name"], e["object"]["metadata"]["resourceVersion"]) for e in events] == [
        ("ADDED", "wl-001", "2"), ("ADDED", "wl-002", "3"), ("MODIFIED", "wl-001", "4"), ("DELETED", "wl-001", "5")]
    assert events[2]["object"]["spec"] == {"active": False}


async def test_watch_from_zero_sends_current_state_and_bookmarks(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 2)
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "0", "allowWatchBookmarks": "true"}, 3)
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "BOOKMARK"]
    assert events[2]["object"]["metadata"]["resourceVersion"] == "2"
    assert events[2]["object"]["kind"] == "Workload"


async def test_watch_from_compacted_version_gets_410_error_event(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 3)
    kube_sim.compact()
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "1"}, 2)
    assert len(events) == 1 and events[0]["type"] == "ERROR"
    assert events[0]["object"]["code"] == 410 and events[0]["object"]["reason"] == "Expired"
    # From the compacted revision itself the watch is fine.
    kube_sim.create(make_object(WORKLOADS, "new", "team-a"))
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "3"}, 1)
    assert events[0]["type"] == "ADDED" and events[0]["object"]["metadata"]["name"] == "new"


async def test_timeout_seconds_ends_the_stream_cleanly(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 1)
    start = time.monotonic()
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "1", "timeoutSeconds": "0.3"}, 5)
    assert events == [] and 0.25 < time.monotonic() - start < 2


async def test_selectors_and_namespaces(kube_sim: SimApiServer) -> None:
    kube_sim.serve(AGENT_PODS)
    for i, (node, team) in enumerate([("n1", "a"), ("n2", "a"), ("n1", "b")]):
        kube_sim.create(make_object(AGENT_PODS, f"p{i}", f"ns-{team}", labels={"team": team}, spec={"nodeName": node}))
    pods = "/api/v1/pods"
    names = lambda body: [o["metadata"]["name"] for o in body["items"]]  # noqa: E731
    assert names((await get(kube_sim, pods, {"fieldSelector": "spec.nodeName=n1"}))[1]) == ["p0", "p2"]
    assert names((await get(kube_sim, pods, {"labelSelector": "team=a"}))[1]) == ["p0", "p1"]
    assert names((await get(kube_sim, pods, {"labelSelector": "team!=a", "fieldSelector": "metadata.name=p2"}))[1]) == ["p2"]
    # Set-based, as the real server reads them (explain lists the Nodes of an assignment this way).
    assert names((await get(kube_sim, pods, {"labelSelector": "team in (b,c)"}))[1]) == ["p2"]
    assert names((await get(kube_sim, pods, {"labelSelector": "team notin (b),team"}))[1]) == ["p0", "p1"]
    assert names((await get(kube_sim, pods, {"labelSelector": "team in (a, b),!absent"}))[1]) == ["p0", "p1", "p2"]
    assert names((await get(kube_sim, "/api/v1/namespaces/ns-a/pods"))[1]) == ["p0", "p1"]
    status, one, _ = await get(kube_sim, "/api/v1/namespaces/ns-b/pods/p2")
    assert status == 200 and one["spec"]["nodeName"] == "n1"
    assert (await get(kube_sim, "/api/v1/namespaces/ns-a/pods/p2"))[0] == 404


async def test_watch_selector_transitions(kube_sim: SimApiServer) -> None:
    """A pod that starts or stops matching a field selector is ADDED or DELETED for that watcher."""
    kube_sim.serve(AGENT_PODS)
    kube_sim.create(make_object(AGENT_PODS, "p", "ns", spec={}))

    async def later() -> None:
        await asyncio.sleep(0.1)
        kube_sim.update(make_object(AGENT_PODS, "p", "ns", spec={"nodeName": "n1"}))
        kube_sim.update(make_object(AGENT_PODS, "p", "ns", spec={"nodeName": "n1", "x": 1}))
        kube_sim.update(make_object(AGENT_PODS, "p", "ns", spec={"nodeName": "n2"}))

    task = asyncio.create_task(later())
    events = await watch_lines(kube_sim, "/api/v1/pods", {"resourceVersion": "1", "fieldSelector": "spec.nodeName=n1"}, 3)
    await task
    assert [e["type"] for e in events] == ["ADDED", "MODIFIED", "DELETED"]


async def test_partial_object_metadata(kube_sim: SimApiServer) -> None:
    kube_sim.serve(NODES)
    kube_sim.create(make_object(NODES, "n1", labels={"rack": "r1"}, status={"capacity": {"cpu": "64"}}))
    accept = {"Accept": "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"}
    _, body, _ = await get(kube_sim, "/api/v1/nodes", headers=accept)
    assert body["kind"] == "PartialObjectMetadataList" and body["apiVersion"] == "meta.k8s.io/v1"
    assert body["items"][0]["kind"] == "PartialObjectMetadata" and "status" not in body["items"][0]
    assert body["items"][0]["metadata"]["labels"] == {"rack": "r1"}
    kube_sim.ignore_partial_metadata = True
    _, body, _ = await get(kube_sim, "/api/v1/nodes", headers=accept)
    assert body["kind"] == "NodeList" and body["items"][0]["status"] == {"capacity": {"cpu": "64"}}


async def test_partial_metadata_of_a_list_asked_for_as_one_object_is_not_acceptable(kube_sim: SimApiServer) -> None:
    """kube-apiserver's handlers/response.go (asPartialObjectMetadata, ...List): 406, no falling
    back to the next media type of the Accept header; the metadata-only count of Workloads
    (exporter/kube/shard_cuts.py) asks for the list kind."""
    seed(kube_sim, 3)
    kube_sim.create(make_object(WORKLOADS, "other", "team-b"))
    one = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"
    many = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
    status, body, _ = await get(kube_sim, WL, headers={"Accept": one})
    assert status == 406 and body["reason"] == "NotAcceptable"
    status, body, _ = await get(kube_sim, "/apis/kueue.x-k8s.io/v1beta2/namespaces/team-a/workloads/wl-000",
                                headers={"Accept": many})
    assert status == 500 and body["message"] == "content is not a list"  # a custom resource: 1.20's own failure
    status, body, _ = await get(kube_sim, WL, {"limit": "2"}, headers={"Accept": many})
    assert status == 200 and body["kind"] == "PartialObjectMetadataList" and len(body["items"]) == 2
    assert body["metadata"]["continue"] and body["items"][0]["metadata"]["namespace"] == "team-a"
    status, body, _ = await get(kube_sim, WL, {"continue": body["metadata"]["continue"]}, headers={"Accept": many})
    assert [i["metadata"]["name"] for i in body["items"]] == ["wl-002", "other"]


async def write(sim: SimApiServer, method: str, path: str, body: Any) -> tuple[int, Any]:
    async with aiohttp.ClientSession() as s, s.request(method, sim.url + path, data=orjson.dumps(body),
                                                        headers={**AUTH, "Content-Type": "application/json"}) as r:
        return r.status, orjson.loads(await r.read())


async def test_configmaps_are_created_and_replaced_as_the_real_server_does(kube_sim: SimApiServer) -> None:
    """POST creates (201; 409 AlreadyExists after), PUT replaces (404 for none; 409 Conflict for a
    stale resourceVersion, unconditional without one); 400 for a body naming another object or
    namespace, 422 for a data key ConfigMaps refuse, 403 when writes are forbidden; a watch by
    name sees each change."""
    from exporter.kube.resources import NAMESPACES, SHARD_CUTS

    kube_sim.serve(SHARD_CUTS)
    kube_sim.serve(WORKLOADS)
    cms = "/api/v1/namespaces/gs/configmaps"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cuts"}, "data": {"a": "1"}}
    status, body = await write(kube_sim, "PUT", f"{cms}/cuts", cm)
    assert status == 404 and body["reason"] == "NotFound"
    status, created = await write(kube_sim, "POST", cms, cm)
    assert status == 201 and created["metadata"]["namespace"] == "gs" and created["metadata"]["uid"]
    status, body = await write(kube_sim, "POST", cms, cm)
    assert status == 409 and body["reason"] == "AlreadyExists"
    status, body = await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "x", "resourceVersion": "7"}})
    assert status == 500 and "resourceVersion should not be set" in body["message"]
    assert (await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "x", "namespace": "other"}}))[0] == 400
    assert (await write(kube_sim, "PUT", f"{cms}/cuts", {**cm, "metadata": {"name": "else"}}))[0] == 400
    assert (await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "y"}, "data": {"bad key": "v"}}))[0] == 422
    assert (await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "y"}, "data": {"n": 1}}))[0] == 400
    events = asyncio.create_task(watch_lines(kube_sim, cms, {"fieldSelector": "metadata.name=cuts",
                                                             "resourceVersion": created["metadata"]["resourceVersion"]}, 2))
    await asyncio.sleep(0.1)
    status, updated = await write(kube_sim, "PUT", f"{cms}/cuts", {**created, "data": {"a": "2"}})
    assert status == 200 and updated["data"] == {"a": "2"} and updated["metadata"]["uid"] == created["metadata"]["uid"]
    status, body = await write(kube_sim, "PUT", f"{cms}/cuts", {**created, "data": {"a": "3"}})  # created's version: stale
    assert status == 409 and body["reason"] == "Conflict" and "has been modified" in body["message"]
    stripped = {**created, "metadata": {"name": "cuts"}, "data": {"a": "4"}}  # no resourceVersion: unconditional
    assert (await write(kube_sim, "PUT", f"{cms}/cuts", stripped))[0] == 200
    assert [(e["type"], e["object"]["data"]["a"]) for e in await events] == [("MODIFIED", "2"), ("MODIFIED", "4")]
    kube_sim.forbid_writes(SHARD_CUTS)
    status, body = await write(kube_sim, "PUT", f"{cms}/cuts", stripped)
    assert status == 403 and "cannot update" in body["message"]
    assert (await get(kube_sim, f"{cms}/cuts"))[0] == 200, "reading is still allowed"
    assert (await write(kube_sim, "POST", WL, make_object(WORKLOADS, "w")))[0] == 405  # only ConfigMaps are written
    kube_sim.serve(NAMESPACES)  # served, the namespace must exist (NamespaceLifecycle admission)
    kube_sim.forbid_writes(SHARD_CUTS, False)
    status, body = await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "z"}})
    assert status == 404 and body["message"] == 'namespaces "gs" not found'
    kube_sim.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "gs"}})
    assert (await write(kube_sim, "POST", cms, {**cm, "metadata": {"name": "z"}}))[0] == 201


async def test_authentication_and_fault_switches(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 1)
    status, body, _ = await get(kube_sim, WL, headers={"Authorization": "Bearer wrong"})
    assert status == 401 and body["reason"] == "Unauthorized"
    kube_sim.fail_next(2, 429, retry_after=3, match="/workloads")
    assert (await get(kube_sim, "/apis"))[0] == 200  # not matched
    status, body, headers = await get(kube_sim, WL)
    assert status == 429 and headers["Retry-After"] == "3" and body["code"] == 429
    assert (await get(kube_sim, WL))[0] == 429
    assert (await get(kube_sim, WL))[0] == 200
    kube_sim.forbid(WORKLOADS)
    status, body, _ = await get(kube_sim, WL)
    assert status == 403 and body["reason"] == "Forbidden"
    assert kube_sim.count("/workloads") == 5 and kube_sim.requests[f"GET {WL}"] == 5
    kube_sim.rotate_token("fresh")
    assert (await get(kube_sim, "/apis"))[0] == 401


async def test_hang_and_delay(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 1)
    kube_sim.hang()
    task = asyncio.create_task(get(kube_sim, WL))
    await asyncio.sleep(0.2)
    assert not task.done()
    kube_sim.hang(False)
    assert (await asyncio.wait_for(task, 2))[0] == 200
    kube_sim.delay = 0.2
    start = time.monotonic()
    await get(kube_sim, WL)
    assert time.monotonic() - start >= 0.2


async def test_drop_after_events_cuts_mid_event(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 5)
    kube_sim.drop_after_events, kube_sim.drop_mid_event = 2, True
    got: list[bytes] = []
    async with aiohttp.ClientSession() as s:
        async with s.get(kube_sim.url + WL, params={"watch": "true", "resourceVersion": "0"}, headers=AUTH) as r:
            with pytest.raises(aiohttp.ClientPayloadError):
                async for chunk in r.content.iter_any():
                    got.append(chunk)
    data = b"".join(got)
    lines = data.split(b"\n")
    assert [orjson.loads(x)["object"]["metadata"]["name"] for x in lines[:2]] == ["wl-000", "wl-001"]
    assert lines[2] and not lines[2].endswith(b"}")  # half an event, then the cut


async def test_unserve_deletes_objects_and_closes_watches(kube_sim: SimApiServer) -> None:
    seed(kube_sim, 2)

    async def later() -> None:
        await asyncio.sleep(0.1)
        kube_sim.unserve(WORKLOADS)

    task = asyncio.create_task(later())
    events = await watch_lines(kube_sim, WL, {"resourceVersion": "2"}, 5)
    await task
    assert [e["type"] for e in events] == ["DELETED", "DELETED"]
    assert (await get(kube_sim, WL))[0] == 404
    assert (await get(kube_sim, "/apis/kueue.x-k8s.io"))[0] == 404
    kube_sim.serve(WORKLOADS)
    _, body, _ = await get(kube_sim, WL)
    assert body["items"] == []


async def test_token_review_and_subject_access_review(kube_sim: SimApiServer) -> None:
    kube_sim.add_token_user("scraper-token", "system:serviceaccount:monitoring:prometheus", ["system:serviceaccounts"])
    kube_sim.allow_non_resource("system:serviceaccounts", "get", "/metrics")

    async def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        async with aiohttp.ClientSession() as s, s.post(kube_sim.url + path, json=body, headers=AUTH) as r:
            assert r.status == 200
            return await r.json()

    tr = "/apis/authentication.k8s.io/v1/tokenreviews"
    review = await post(tr, {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": "scraper-token"}})
    assert review["status"] == {"authenticated": True, "user": {"username": "system:serviceaccount:monitoring:prometheus",
                                                                "groups": ["system:serviceaccounts"]}}
    assert (await post(tr, {"spec": {"token": "nope"}}))["status"] == {"authenticated": False}
    sar = "/apis/authorization.k8s.io/v1/subjectaccessreviews"
    spec = {"user": "u", "groups": ["system:serviceaccounts"], "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}
    assert (await post(sar, {"spec": spec}))["status"]["allowed"] is True
    spec["groups"] = []
    assert (await post(sar, {"spec": spec}))["status"]["allowed"] is False


def test_background_thread_and_bulk_load() -> None:
    """The benchmark mode: the server on its own thread, 20,000 objects loaded in bulk."""
    sim = SimApiServer().start_in_thread()
    try:
        sim.call(sim.serve, WORKLOADS)
        start = time.monotonic()
        n = sim.call(sim.bulk_load, (make_object(WORKLOADS, f"wl-{i:05d}", f"ns-{i % 50}") for i in range(20_000)))
        assert n == 20_000 and time.monotonic() - start < 5
        req = urllib.request.Request(sim.url + WL + "?limit=500", headers=AUTH)
        with urllib.request.urlopen(req, timeout=5) as r:
            body = json.loads(r.read())
        assert len(body["items"]) == 500 and body["metadata"]["remainingItemCount"] == 19_500
        assert json.loads(base64.urlsafe_b64decode(body["metadata"]["continue"]))["offset"] == 500
        assert body["metadata"]["resourceVersion"] == "20000"
    finally:
        sim.stop_thread()


def test_kubeconfig_loads_with_the_kubernetes_package(tmp_path: Any) -> None:
    from kubernetes.client import Configuration
    from kubernetes.config import load_kube_config

    sim = SimApiServer(token="abc")
    sim.port = 4321
    path = sim.write_kubeconfig(str(tmp_path / "kc"))
    cfg = Configuration()
    load_kube_config(config_file=path, client_configuration=cfg, persist_config=False)
    assert cfg.host == "http://127.0.0.1:4321"
    assert cfg.api_key["BearerToken"] == "Bearer abc"


async def test_visibility_endpoints_refuse_as_kueue_does(kube_sim: SimApiServer) -> None:
    """Kueue's visibility API (pkg/visibility/storage/pending_workloads_cq.go:73 and _lq.go:77):
    404 for a ClusterQueue or LocalQueue it does not know; the LocalQueue endpoint exists only
    under a namespace, the ClusterQueue endpoint only without one; items paged by limit/offset."""
    from exporter.kube.resources import LOCAL_QUEUES, QUEUE_POSITIONS, QUEUE_POSITIONS_LOCAL
    from kueue_objects import local_queue, workload

    for r in (WORKLOADS, LOCAL_QUEUES, QUEUE_POSITIONS, QUEUE_POSITIONS_LOCAL):
        kube_sim.serve(r)
    kube_sim.create(local_queue("q", "team", "cq"))
    for i in range(3):
        kube_sim.create(workload(f"w{i}", admitted_cq=None, queue="q"))
    base = "/apis/visibility.kueue.x-k8s.io/v1beta2"
    status, _, _ = await get(kube_sim, f"{base}/clusterqueues/nope/pendingworkloads")
    assert status == 404
    status, _, _ = await get(kube_sim, f"{base}/namespaces/team/localqueues/nope/pendingworkloads")
    assert status == 404
    status, _, _ = await get(kube_sim, f"{base}/localqueues/q/pendingworkloads")  # not namespaced: no such path
    assert status == 404
    status, _, _ = await get(kube_sim, f"{base}/namespaces/team/clusterqueues/cq/pendingworkloads")
    assert status == 404
    status, body, _ = await get(kube_sim, f"{base}/namespaces/team/localqueues/q/pendingworkloads", {"limit": "2", "offset": "1"})
    assert status == 200
    assert [(i["metadata"]["name"], i["positionInClusterQueue"], i["positionInLocalQueue"]) for i in body["items"]] == [
        ("w1", 1, 1), ("w2", 2, 2)]
