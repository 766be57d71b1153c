"""Small builders of Kueue and Node objects for the collector tests, plus exposition helpers."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml
from prometheus_client.parser import text_string_to_metric_families

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "kueue"  # copies of the shared Kueue examples
BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
T0 = "2026-08-20T09:00:03Z"


def fixture(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((FIXTURES / name).read_text()) if d]


def cond(ctype: str, status: str, reason: str, at: str = "2026-08-20T10:00:00Z", message: str = "") -> dict[str, Any]:
    return {"type": ctype, "status": status, "reason": reason, "message": message, "lastTransitionTime": at}


def workload(name: str = "wl", ns: str = "team", *, version: str = "v1beta2", conditions: list | None = None,
             hosts: list[str] | None = None, gpus: Any = "8", count: int | None = None, queue: str = "q",
             admitted_cq: str | None = "cq", evictions: list | None = None, unhealthy: list[str] | None = None,
             active: bool = True, priority: str = "high", topology: dict[str, Any] | None = None,
             tolerations: list[dict[str, Any]] | None = None, flavor: str = "tas") -> dict[str, Any]:
    """``topology``: the pod set's spec.podSets[].topologyRequest; ``tolerations``: its pod template's."""
    hosts = hosts if hosts is not None else ["h1", "h2"]
    count = count if count is not None else max(len(hosts), 1)
    pod_spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": gpus}}}]}
    if tolerations is not None:
        pod_spec["tolerations"] = tolerations
    spec: dict[str, Any] = {
        "active": active, "queueName": queue,
        "podSets": [{"name": "main", "count": count, "template": {
            "metadata": {"labels": {"scheduling.x-k8s.io/pod-group": name}}, "spec": pod_spec}}],
    }
    if topology is not None:
        spec["podSets"][0]["topologyRequest"] = topology
    if version == "v1beta2":
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority}
    else:
        spec["priorityClassName"] = priority
    status: dict[str, Any] = {"conditions": conditions or []}
    if admitted_cq is not None:
        psa: dict[str, Any] = {"name": "main", "count": count, "flavors": {"nvidia.com/gpu": flavor}}
        if hosts:
            psa["topologyAssignment"] = _assignment(version, hosts)
        status["admission"] = {"clusterQueue": admitted_cq, "podSetAssignments": [psa]}
    if evictions:
        status["schedulingStats"] = {"evictions": evictions}
    if unhealthy:
        status["unhealthyNodes"] = [{"name": n} for n in unhealthy]
    return {
        "apiVersion": f"kueue.x-k8s.io/{version}", "kind": "Workload",
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "creationTimestamp": T0,
                     "labels": {"kueue.x-k8s.io/job-uid": f"job-uid-{name}"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": f"job-{name}",
                                          "uid": f"job-uid-{name}", "controller": True}]},
        "spec": spec, "status": status,
    }


def _assignment(version: str, hosts: list[str]) -> dict[str, Any]:
    if version == "v1beta1":
        return {"levels": [HOST], "domains": [{"values": [h], "count": 1} for h in hosts]}
    return {"levels": [HOST], "slices": [{"domainCount": len(hosts), "podCounts": {"universal": 1},
                                          "valuesPerLevel": [{"individual": {"roots": list(hosts)}}]}]}


def admitted_conditions(ready: bool = True) -> list[dict[str, Any]]:
    out = [cond("QuotaReserved", "True", "QuotaReserved", "2026-08-20T10:05:12Z"),
           cond("Admitted", "True", "Admitted", "2026-08-20T10:05:12Z")]
    if ready:
        out.append(cond("PodsReady", "True", "Started", "2026-08-20T10:07:40Z"))
    return out


def node(name: str, block: str, rack: str, hostname: str | None = None) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {
        BLOCK: block, RACK: rack, HOST: hostname or name}}}


def gpu_node(name: str, block: str, rack: str, gpus: int | str = 8, *, ready: str = "True", unschedulable: bool = False,
             taints: list[dict[str, str]] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """A GPU Node with what the capacity per domain reads: allocatable GPUs, the Ready condition,
    spec.unschedulable and taints (the GPU operator's nvidia.com/gpu taint unless ``taints`` is given)."""
    spec: dict[str, Any] = {"taints": taints if taints is not None else [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}
    if unschedulable:
        spec["unschedulable"] = True
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {BLOCK: block, RACK: rack, HOST: name, **(labels or {})}},
            "spec": spec,
            "status": {"capacity": {"cpu": "208", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "allocatable": {"cpu": "207", "nvidia.com/gpu": str(gpus), "pods": "110"},
                       "conditions": [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": ready}]}}


def flavor(name: str, topology_name: str = "default", node_labels: dict[str, str] | None = None,
           tolerations: list[dict[str, str]] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"topologyName": topology_name, "nodeLabels": node_labels or {}}
    if tolerations:
        spec["tolerations"] = tolerations
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec}


def topology(name: str = "default", levels: tuple[str, ...] = (BLOCK, RACK, HOST)) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": name},
            "spec": {"levels": [{"nodeLabel": k} for k in levels]}}


def local_queue(name: str, ns: str, cq: str) -> dict[str, Any]:
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue", "metadata": {"name": name, "namespace": ns},
            "spec": {"clusterQueue": cq}}


def modified(obj: dict[str, Any], **status: Any) -> dict[str, Any]:
    out = copy.deepcopy(obj)
    out["status"].update(status)
    return out


def series(text: str, prefix: str = "gangscope_") -> dict[tuple[str, frozenset], float]:
    """Every sample of the text exposition as {(name, labels): value}."""
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name.startswith(prefix):
                out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def family_series(exposition: Any, family: str) -> dict[tuple, float]:
    """{sorted label pairs: value} of one family of an Exposition's text page, parsed by prometheus_client."""
    out = {}
    for fam in text_string_to_metric_families(exposition.render(False).decode()):
        for s in fam.samples:
            if s.name == family:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


def sample(name: str, /, **labels: str) -> tuple[str, frozenset]:
    return (name, frozenset(labels.items()))


def cluster_queue(name: str = "cq", flavors: tuple[str, ...] = ("tas",), *, gpus: int | str = 64,
                  cohort: str = "", stop_policy: str | None = None, active: tuple[str, str, str] | None = None,
                  reserved: int | None = None, used: int | None = None, version: str = "v1beta2") -> dict[str, Any]:
    """A ClusterQueue of one resource group (nvidia.com/gpu) over ``flavors``, with the status
    Kueue's ClusterQueue controller writes (pkg/controller/core/clusterqueue_controller.go:533-544):
    ``active`` is the Active condition's (status, reason, message) as
    pkg/cache/scheduler/clusterqueue.go:311-366 (inactiveReason) words it; Ready by default."""
    spec: dict[str, Any] = {"namespaceSelector": {}, "queueingStrategy": "BestEffortFIFO", "resourceGroups": [{
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [{"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": gpus}]} for f in flavors]}]}
    if cohort:
        spec["cohortName" if version == "v1beta2" else "cohort"] = cohort
    if stop_policy is not None:
        spec["stopPolicy"] = stop_policy
    status, reason, message = active or ("True", "Ready", "Can admit new workloads")
    st: dict[str, Any] = {"conditions": [{"type": "Active", "status": status, "reason": reason, "message": message,
                                          "lastTransitionTime": "2026-08-20T09:00:00Z", "observedGeneration": 1}],
                          "pendingWorkloads": 0, "reservingWorkloads": 0, "admittedWorkloads": 0}
    if reserved is not None:
        st["flavorsReservation"] = [{"name": flavors[0], "resources": [{"name": "nvidia.com/gpu", "total": str(reserved),
                                                                        "borrowed": "0"}]}]
    if used is not None:
        st["flavorsUsage"] = [{"name": flavors[0], "resources": [{"name": "nvidia.com/gpu", "total": str(used),
                                                                  "borrowed": "0"}]}]
    return {"apiVersion": f"kueue.x-k8s.io/{version}", "kind": "ClusterQueue", "metadata": {"name": name},
            "spec": spec, "status": st}


# The Active condition as Kueue words it (pkg/cache/scheduler/clusterqueue.go:311-366):
STOPPED = ("False", "Stopped", "Can't admit new workloads: is stopped.")


def flavor_not_found(*names: str) -> tuple[str, str, str]:
    return ("False", "FlavorNotFound", f"Can't admit new workloads: references missing ResourceFlavor(s): {','.join(names)}.")
