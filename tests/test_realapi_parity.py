"""The simulated API server answers as the real one, where both can run a case.

The same objects go into ``exporter/sim/apiserver.py`` and into kube-apiserver 1.20; the same
requests go to both; what the client relies on (status, content type, the shape of lists, pages,
errors, bookmarks, expired versions, selectors) must be equal. The real server is the reference:
each difference found here was fixed in the simulator (or in the client), and a new one fails.

What the simulator does not try to do, by design: write access over HTTP but to ConfigMaps (tests
and the demo write through its methods, which also set ``status`` directly), graceful deletion of pods,
admission (namespaces need not exist), RBAC beyond ``forbid()``, the "inconsistent continue"
token of an expired continue, and per-kind zero values in bookmarks of built-in kinds.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
import pytest

from exporter.kube.resources import AGENT_PODS, NAMESPACES, NODES, SHARD_CUTS, WORKLOADS
from exporter.sim.apiserver import SimApiServer
from realapi import AdminClient, RealCluster, Writer

PARTIAL = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
PARTIAL_ONE = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1,application/json"


@dataclass
class Target:
    """One server, its client and how to make a resourceVersion too old on it."""

    client: AdminClient
    ns: str
    node: str
    expire: Callable[[str], None]  # make history up to this resourceVersion unavailable

    @property
    def workloads(self) -> str:
        return f"/apis/kueue.x-k8s.io/v1beta2/namespaces/{self.ns}/workloads"

    @property
    def pods(self) -> str:
        return f"/api/v1/namespaces/{self.ns}/pods"

    def get(self, path: str, accept: str = "application/json", **params: str) -> tuple[int, str, Any]:
        r = self.client.raw("GET", path, params or None, accept)
        ctype = (r.headers.get("Content-Type") or "").split(";")[0]
        return r.status, ctype, orjson.loads(r.data) if ctype == "application/json" else r.data.decode()

    def lines(self, path: str, accept: str = "application/json", **params: str) -> list[dict[str, Any]]:
        r = self.client.raw("GET", path, {"watch": "true", **params}, accept)
        return [orjson.loads(line) for line in r.data.splitlines() if line.strip()]


def objects(ns: str, node: str) -> list[dict[str, Any]]:
    wl = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": {"name": f"wl-{i}", "namespace": ns},
           "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [
               {"name": "c", "image": "busybox"}]}}}]}} for i in range(3)]
    pods = [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{team}-{i}", "namespace": ns, "labels": {"team": team}},
             "spec": {"nodeName": node if i == 0 else f"{node}-x", "containers": [{"name": "c", "image": "busybox"}]}}
            for i, team in enumerate(("a", "b", "c"))]
    nodes = [{"apiVersion": "v1", "kind": "Node", "metadata": {"name": node, "labels": {"parity": ns}}}]
    return wl + pods + nodes


@pytest.fixture(scope="module")
def targets(real_api: RealCluster) -> Iterator[dict[str, Target]]:
    suffix = uuid.uuid4().hex[:6]
    ns, node = real_api.namespace(f"parity-{suffix}"), f"parity-{suffix}"
    writer = Writer(real_api)
    for obj in objects(ns, node):
        writer.create(obj)

    def expire_real(rv: str) -> None:
        writer.create({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": f"tick-{uuid.uuid4().hex[:6]}", "namespace": ns}})
        real_api.wait_compacted("kueue.x-k8s.io/v1beta2", "Workload", rv)

    sim = SimApiServer(bookmark_interval=0.5).start_in_thread()
    for r in (WORKLOADS, AGENT_PODS, NODES, SHARD_CUTS, NAMESPACES):
        sim.call(sim.serve, r)
    sim.call(sim.create, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for obj in objects(ns, node):
        sim.call(sim.create, obj)
    try:
        yield {"real": Target(real_api.admin, ns, node, expire_real),
               "sim": Target(AdminClient(sim.url, "", token="sim-token"), ns, node, lambda rv: sim.call(sim.compact))}
    finally:
        sim.stop_thread()
        writer.cleanup()


def digits(text: str) -> str:
    return re.sub(r"\d+", "N", text)


# --- the cases: each returns what the client may rely on ------------------------------------------


def custom_resource_pages(t: Target) -> Any:
    status, ctype, first = t.get(t.workloads, limit="2")
    _, _, last = t.get(t.workloads, limit="2", **{"continue": first["metadata"]["continue"]})
    return (status, ctype, first["kind"], sorted(first["metadata"]), first["metadata"]["remainingItemCount"],
            [sorted(i) for i in first["items"]], sorted(last["metadata"]), last["metadata"]["continue"],
            [i["metadata"]["name"] for i in first["items"] + last["items"]],
            first["metadata"]["resourceVersion"] == last["metadata"]["resourceVersion"])


def built_in_list(t: Target) -> Any:
    status, _, doc = t.get(t.pods)
    return status, doc["kind"], doc["apiVersion"], sorted(doc["metadata"]), [("kind" in i, "apiVersion" in i) for i in doc["items"]]


def metadata_only_lists(t: Target) -> Any:
    _, _, empty = t.get("/api/v1/nodes", PARTIAL, labelSelector=f"parity={t.ns}-none")
    _, _, some = t.get("/api/v1/nodes", PARTIAL, labelSelector=f"parity={t.ns}")
    _, _, one = t.get(f"/api/v1/nodes/{t.node}", PARTIAL_ONE)
    return (empty["kind"], empty["apiVersion"], empty["items"], [(i["kind"], i["apiVersion"], sorted(i)) for i in some["items"]],
            (one["kind"], sorted(one)))


def not_served(t: Target) -> Any:
    out = []
    for path in ("/apis/nope.example.com", "/apis/kueue.x-k8s.io/v9", "/apis/kueue.x-k8s.io/v1beta2/nopes", "/api/v1/nopes"):
        status, ctype, body = t.get(path)
        out.append((status, ctype, {k: v for k, v in body.items() if k != "details"} if isinstance(body, dict) else body))
    return out


def missing_object(t: Target) -> Any:
    out = []
    for path in (f"{t.workloads}/absent", "/api/v1/nodes/absent"):
        status, ctype, doc = t.get(path)
        out.append((status, ctype, doc["kind"], doc["status"], doc["reason"], doc["code"], doc["message"]))
    return out


def selectors(t: Target) -> Any:
    names = []
    for params in ({"labelSelector": "team in (a,b)"}, {"labelSelector": "team notin (a),team"},
                   {"labelSelector": "team!=b"}, {"fieldSelector": f"spec.nodeName={t.node}"}):
        names.append(sorted(i["metadata"]["name"] for i in t.get(t.pods, **params)[2]["items"]))
    return names


def expired_continue(t: Target) -> Any:
    _, _, first = t.get(t.workloads, limit="1")
    t.expire(first["metadata"]["resourceVersion"])
    status, ctype, doc = t.get(t.workloads, limit="1", **{"continue": first["metadata"]["continue"]})
    return status, ctype, doc["kind"], doc["reason"], doc["code"], doc["message"]


def expired_watch(t: Target) -> Any:
    t.expire(t.get(t.workloads)[2]["metadata"]["resourceVersion"])
    events = t.lines("/apis/kueue.x-k8s.io/v1beta2/workloads", resourceVersion="1", timeoutSeconds="2")
    status = events[0]["object"]
    return len(events), events[0]["type"], status["kind"], status["status"], status["reason"], status["code"], digits(status["message"])


def bookmarks(t: Target) -> Any:
    rv = t.get(t.workloads)[2]["metadata"]["resourceVersion"]
    out = []
    for path, accept in ((t.workloads, "application/json"), (t.pods, PARTIAL_ONE)):
        # The real server sends one two seconds before the watch's timeout.
        events = t.lines(path, accept, resourceVersion=rv, allowWatchBookmarks="true", timeoutSeconds="5")
        mark = next(e["object"] for e in events if e["type"] == "BOOKMARK")
        out.append((mark["kind"], mark["apiVersion"], mark["metadata"].keys() - {"resourceVersion"},
                    mark["metadata"].get("creationTimestamp", "absent")))
    return out


def metadata_of_the_wrong_shape(t: Target) -> Any:
    """A list asked for as one PartialObjectMetadata, an object as a list: refused, no fallback to JSON."""
    out = []
    for path, accept in ((t.workloads, PARTIAL_ONE), (f"{t.workloads}/wl-0", PARTIAL), ("/api/v1/nodes", PARTIAL_ONE),
                         (f"/api/v1/nodes/{t.node}", PARTIAL)):
        status, ctype, doc = t.get(path, accept)
        out.append((status, ctype, doc["kind"], doc.get("reason"), doc["code"], doc["message"]))
    return out


def configmap_writes(t: Target) -> Any:
    """What exporter/kube/shard_cuts.py relies on when it publishes the shards' cuts."""
    cms, name = f"/api/v1/namespaces/{t.ns}/configmaps", f"cuts-{uuid.uuid4().hex[:6]}"
    cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"cuts": "0,1"}}

    def send(method: str, path: str, body: Any) -> tuple[int, Any]:
        r = t.client.raw(method, path, body=body)
        return r.status, orjson.loads(r.data)

    def refusal(answer: tuple[int, Any]) -> tuple[Any, ...]:
        status, doc = answer
        return status, doc["kind"], doc.get("reason"), doc["code"], doc["message"].replace(name, "NAME")

    out: list[Any] = [refusal(send("PUT", f"{cms}/{name}", cm))]  # not there: an update does not create
    status, created = send("POST", cms, cm)
    out.append((status, created["kind"], created["apiVersion"], created["metadata"]["namespace"], created["data"]))
    out.append(refusal(send("POST", cms, cm)))  # already exists
    status, updated = send("PUT", f"{cms}/{name}", {**created, "data": {"cuts": "0,2"}})
    out.append((status, updated["data"], updated["metadata"]["uid"] == created["metadata"]["uid"],
                int(updated["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])))
    out.append(refusal(send("PUT", f"{cms}/{name}", {**created, "data": {"cuts": "0,3"}})))  # a stale version
    status, doc = send("PUT", f"{cms}/{name}", {**cm, "data": {"cuts": "0,4"}})  # no version: unconditional
    out.append((status, doc["data"]))
    out.append(refusal(send("PUT", f"{cms}/{name}", {**cm, "metadata": {"name": "other"}})))
    out.append(refusal(send("POST", cms, {**cm, "metadata": {"name": f"{name}-b", "namespace": "elsewhere"}})))
    out.append(refusal(send("POST", cms, {**cm, "metadata": {"name": f"{name}-c", "resourceVersion": "5"}})))
    out.append(refusal(send("POST", cms, {**cm, "metadata": {"name": f"{name}-d"}, "data": {"bad key": "v"}})))
    out.append(refusal(send("POST", cms, {**cm, "metadata": {}})))
    out.append(refusal(send("POST", f"/api/v1/namespaces/{t.ns}-absent/configmaps", cm)))
    status, doc = send("POST", cms, {**cm, "metadata": {"name": f"{name}-e"}, "data": {"n": 1}})
    out.append((status, doc["reason"]))
    listed = t.get(cms, fieldSelector=f"metadata.name={name}")[2]
    out.append([(i.get("kind"), i["metadata"]["name"] == name, i["data"]) for i in listed["items"]])
    return out


CASES = [custom_resource_pages, built_in_list, metadata_only_lists, not_served, missing_object, selectors,
         expired_continue, expired_watch, bookmarks, metadata_of_the_wrong_shape, configmap_writes]


@pytest.mark.parametrize("case", CASES, ids=[c.__name__ for c in CASES])
def test_simulated_server_answers_as_the_real_one(case: Callable[[Target], Any], targets: dict[str, Target]) -> None:
    assert case(targets["sim"]) == case(targets["real"])
