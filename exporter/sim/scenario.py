"""A simulated GPU cluster: Nodes, a Kueue Topology, queues, Workloads in every stage, PodGroups
and Pods, plus a timeline of changes. The demo, the end-to-end test and the benchmarks use it.

Everything is plain Kubernetes JSON (dicts), exactly what the API server would return, so the
same objects can be served by the simulated API server or written to a dump for ``snapshot``.

The default scenario is 2 blocks x 2 racks x 4 nodes x 8 H100 GPUs, plus an NVL72 rack:

========================  ==========================================================
block-1 / rack-1          ``llama-train``: 4 pods x 8 GPUs, running
block-1 / rack-2          ``mixtral-sft``: admitted, gang stuck assembling (0 of 4 bound)
block-2 / rack-1          ``t5-pretrain``: partial gang, 2 of 4 pods running, 16 GPUs idle:
                          its other 2 pods cannot be placed because ``gemma-eval`` (admitted
                          without a topology request) holds the rack's other 2 nodes; that
                          one runs as Kueue shows it without ``waitForPodsReady``: no
                          ``PodsReady`` condition at all, its gang assembled
block-2 / rack-2          ``vit-large``: running, then a node fails and Kueue evicts it
                          with ``NodeFailures`` (the timeline below)
elsewhere                 queued, inadmissible (quota, a Kueue 0.14-style ``Pending``),
                          waiting for preemptions, blocked by a ProvisioningRequest admission
                          check, in backoff after a PodsReadyTimeout eviction, finished and
                          deactivated Workloads
block-3 / rack-3-1        an NVL72 rack: 4 GB200 nodes (4 GPUs each) in one chassis and NVLink
                          clique running ``llama-gb200``, one of them with a degraded fabric,
                          and a fifth node labelled into the rack whose GPUs report another
                          chassis and clique (the hardware-truth alerts); ``llama-gb200`` is
                          a JobSet that restarted 4 times and restarts again at +25 s; the
                          fifth node runs ``gemma-sft``, a Kubeflow TrainJob whose progress
                          last moved (to 62%) 40 minutes ago
block-1 / rack-1-2        ``moe-pipeline``: a Kubernetes 1.37 composite gang (a
                          CompositePodGroup of two PodGroups, v1alpha3/v1beta1), admitted
                          without a topology request on the rack ``mixtral-sft`` waits for
elsewhere                 ``vision/sam-finetune``: a KAI Scheduler gang whose queue is over
                          its limit (``OverLimit``), its two pods pending
block-4 / rack-4-1, -4-2  fragmented free space: 2 racks of 3 nodes where ``ray-tune`` (2 pods x 4
                          GPUs, preferring one rack, spread over both) and ``sd-lora`` (1 pod x
                          2 GPUs) leave 38 GPUs free, room for three 8-GPU pods but only two in
                          one rack, so ``llama-70b-sft`` (3 pods x 8 GPUs, required in one rack)
                          waits with Kueue 0.19's ``TopologyPlacementFailed``
========================  ==========================================================

Conditions, reasons and messages are the ones Kueue writes (exporter/cluster/workload_state.py
cites where); the running gangs other than ``gemma-eval`` and ``moe-pipeline`` show Kueue with
``waitForPodsReady``. The KAI, native, JobSet and TrainJob objects follow their APIs' types (the
sources are cited in exporter/cluster/podgroups.py and jobs.py): no real cluster printed a
restarting JobSet, a TrainJob's trainerStatus or a 1.37 composite gang that could be copied.
"""

from __future__ import annotations

import copy
import hashlib
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]

BLOCK_LABEL = "cloud.provider.com/topology-block"
CLIQUE_LABEL = "nvidia.com/gpu.clique"  # GPU feature discovery: <fabric cluster UUID>.<clique id>
RACK_LABEL = "cloud.provider.com/topology-rack"
HOST_LABEL = "kubernetes.io/hostname"
GPU_RESOURCE = "nvidia.com/gpu"
GPUS_PER_NODE = 8


GPU_TOLERATION = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}

def _ts(t: datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _uid(*parts: str) -> str:
    h = hashlib.sha1("/".join(parts).encode()).hexdigest()
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def gpu_uuid(node: str, index: int) -> str:
    """Deterministic GPU UUID for a simulated node's GPU, shared by the sim NVML and the sim kubelet."""
    return "GPU-" + _uid("gpu", node, str(index))


def _cond(ctype: str, status: str, reason: str, message: str, at: datetime) -> Obj:
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": 1,
        "lastTransitionTime": _ts(at),
    }


@dataclass
class Placement:
    """Which pods of a Workload run where: (node, gpu indexes) per pod that is bound and running."""

    workload: str
    namespace: str
    podgroup: str
    pods: list[tuple[str, list[int]]]


@dataclass(frozen=True)
class NodeHardware:
    """What a node's simulated NVML is: a GPU generation (exporter.sim.gpus; empty: the demo's
    --sim-profile), NVML scenarios, and for NVL72 nodes the fabric cluster, clique and chassis
    position its GPUs report."""

    profile: str = ""
    scenarios: tuple[str, ...] = ()
    cluster_uuid: str = ""
    clique_id: int = 0
    chassis_serial: str = ""
    slot: int = 0
    tray: int = 0


@dataclass
class Scenario:
    """Initial objects by resource, and a timeline of (seconds after start, event type, object)."""

    nodes: list[Obj] = field(default_factory=list)
    topologies: list[Obj] = field(default_factory=list)
    resource_flavors: list[Obj] = field(default_factory=list)
    local_queues: list[Obj] = field(default_factory=list)
    cluster_queues: list[Obj] = field(default_factory=list)
    workloads: list[Obj] = field(default_factory=list)
    podgroups: list[Obj] = field(default_factory=list)
    volcano_podgroups: list[Obj] = field(default_factory=list)
    gang_objects: list[Obj] = field(default_factory=list)  # KAI PodGroups, native Workloads/PodGroups/CompositePodGroups
    job_objects: list[Obj] = field(default_factory=list)  # JobSets, TrainJobs
    pods: list[Obj] = field(default_factory=list)
    placements: list[Placement] = field(default_factory=list)
    timeline: list[tuple[float, str, Obj]] = field(default_factory=list)
    hardware: dict[str, NodeHardware] = field(default_factory=dict)  # node -> its GPUs (default: 8 H100)
    degraded_node: str = ""  # the node whose NVML has a link down and a PCIe link down-trained
    # The training layer: (namespace, workload, tokens per second per pod) of the jobs that serve
    # their own throughput (exporter.sim.training), the moments their speed changes (seconds after
    # start, namespace, workload, new share of full speed, and (node, GPU, its new NVLink share) or
    # None), and the Ray heads (namespace, RayCluster, head pod, placement groups by state).
    training: list[tuple[str, str, float]] = field(default_factory=list)
    training_timeline: list[tuple[float, str, str, float, tuple[str, int, float] | None]] = field(default_factory=list)
    ray_heads: list[tuple[str, str, str, dict[str, int]]] = field(default_factory=list)

    def all_objects(self) -> list[Obj]:
        return [
            *self.nodes, *self.topologies, *self.resource_flavors, *self.local_queues, *self.cluster_queues,
            *self.workloads, *self.podgroups, *self.volcano_podgroups, *self.gang_objects, *self.job_objects, *self.pods,
        ]

    def node_names(self) -> list[str]:
        return [n["metadata"]["name"] for n in self.nodes]

    def gpu_pods(self, node: str) -> list[tuple[str, str, str, list[str]]]:
        """(namespace, pod, container, GPU UUIDs) of the pods bound to ``node``: the sim kubelet's answer."""
        out = []
        for p in self.pods:
            if p["spec"].get("nodeName") == node and p["status"].get("phase") == "Running":
                idx = p["metadata"]["annotations"].get("sim.gangscope.io/gpus", "")
                uuids = [gpu_uuid(node, int(i)) for i in idx.split(",") if i]
                out.append((p["metadata"]["namespace"], p["metadata"]["name"], "trainer", uuids))
        return out


def _node(name: str, block: str, rack: str, gpus: int = GPUS_PER_NODE) -> Obj:
    """A GPU Node as core/v1 defines it (no real GPU Node object with its status was found to copy:
    shared/fixtures/real/README.md): labels, the GPU operator's taint, capacity and allocatable
    with the device plugin's GPUs, and the kubelet's conditions."""
    resources = {"cpu": "208", "memory": "1981901160Ki", "ephemeral-storage": "1018410284Ki", "pods": "110",
                 GPU_RESOURCE: str(gpus)}
    heartbeat = "2026-11-30T10:00:00Z"
    conditions = [
        {"type": t, "status": "False", "reason": f"KubeletHas{r}", "message": m,
         "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-11-01T08:00:00Z"}
        for t, r, m in (("MemoryPressure", "SufficientMemory", "kubelet has sufficient memory available"),
                        ("DiskPressure", "NoDiskPressure", "kubelet has no disk pressure"),
                        ("PIDPressure", "SufficientPID", "kubelet has sufficient PID available"))
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                       "lastHeartbeatTime": heartbeat, "lastTransitionTime": "2026-11-01T08:00:00Z"})
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "uid": _uid("node", name),
            "labels": {
                BLOCK_LABEL: block,
                RACK_LABEL: rack,
                HOST_LABEL: name,
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/os": "linux",
                "node.kubernetes.io/instance-type": "a3-megagpu-8g",
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
                "nvidia.com/gpu.count": str(gpus),
            },
        },
        "spec": {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {"capacity": resources, "allocatable": {**resources, "cpu": "207", "memory": "1969318248Ki"},
                   "conditions": conditions,
                   "nodeInfo": {"kubeletVersion": "v1.33.5", "containerRuntimeVersion": "containerd://2.0.6",
                                "kernelVersion": "6.8.0-1031-gcp", "operatingSystem": "linux", "architecture": "amd64"}},
    }


def _workload(
    name: str,
    namespace: str,
    queue: str,
    pods: int,
    gpus_per_pod: int,
    created: datetime,
    *,
    podgroup: str | None = None,
    volcano: bool = False,
    priority: str = "training-high",
    topology: tuple[str, str] = ("required", BLOCK_LABEL),
) -> Obj:
    """A Job's Workload; ``topology`` is (mode, level) of its pod set's topology request, which
    Kueue copies from the pod template's annotation (kueue.x-k8s.io/podset-<mode>-topology)."""
    job_uid = _uid("job", namespace, name)
    labels = {"job-name": name, "batch.kubernetes.io/job-name": name}
    mode, level = topology
    annotations: dict[str, str] = {f"kueue.x-k8s.io/podset-{mode}-topology": level}
    if podgroup and volcano:
        annotations["scheduling.k8s.io/group-name"] = podgroup
    elif podgroup:
        labels["scheduling.x-k8s.io/pod-group"] = podgroup
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "Workload",
        "metadata": {
            "name": f"job-{name}-{job_uid[:5]}",
            "namespace": namespace,
            "uid": _uid("workload", namespace, name),
            "generation": 1,
            "creationTimestamp": _ts(created),
            "labels": {"kueue.x-k8s.io/job-uid": job_uid},
            "ownerReferences": [
                {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid, "controller": True, "blockOwnerDeletion": True}
            ],
        },
        "spec": {
            "active": True,
            "queueName": queue,
            "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": priority},
            "priority": 10000,
            "podSets": [
                {
                    "name": "main",
                    "count": pods,
                    "topologyRequest": {mode: level, "podIndexLabel": "batch.kubernetes.io/job-completion-index"},
                    "template": {
                        "metadata": {"labels": labels, "annotations": annotations},
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "trainer",
                                    "image": "registry.example.com/ml/trainer:2026.11",
                                    "resources": {
                                        "requests": {"cpu": "90", "memory": "1500Gi", GPU_RESOURCE: str(gpus_per_pod)},
                                        "limits": {GPU_RESOURCE: str(gpus_per_pod)},
                                    },
                                }
                            ],
                        },
                    },
                }
            ],
        },
        "status": {},
    }


def _admit(wl: Obj, cq: str, hosts: list[str], at: datetime, gpus_per_pod: int, tas: bool = True,
           flavor: str = "") -> None:
    """Reserve quota and admit with a v1beta2 hostname-only assignment (one pod per host); without
    ``tas``, in a flavor without a topology, so with no topology assignment; ``flavor`` overrides
    the flavor's name."""
    count = wl["spec"]["podSets"][0]["count"]
    prefix = _common_prefix(hosts)
    flavor = flavor or ("h100-tas" if tas else "h100")
    assignment: Obj = {
        "name": "main",
        "count": count,
        "flavors": {GPU_RESOURCE: flavor, "cpu": flavor, "memory": flavor},
        "resourceUsage": {GPU_RESOURCE: str(count * gpus_per_pod)},
    }
    if tas:
        assignment["topologyAssignment"] = {
            "levels": [HOST_LABEL],
            "slices": [
                {
                    "domainCount": len(hosts),
                    "valuesPerLevel": [{"individual": {"prefix": prefix, "roots": [h[len(prefix):] for h in hosts]}}],
                    "podCounts": {"universal": count // len(hosts)},
                }
            ],
        }
    wl["status"]["admission"] = {"clusterQueue": cq, "podSetAssignments": [assignment]}
    wl["status"].setdefault("conditions", []).extend(
        [
            _cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", at),
            _cond("Admitted", "True", "Admitted", "The workload is admitted", at),
        ]
    )


def _common_prefix(values: list[str]) -> str:
    prefix = values[0]
    for v in values[1:]:
        while not v.startswith(prefix):
            prefix = prefix[:-1]
    cut = prefix.rfind("-")
    return prefix[: cut + 1] if cut >= 0 else ""


def _set_cond(wl: Obj, cond: Obj) -> None:
    conds = [c for c in wl["status"].get("conditions", []) if c["type"] != cond["type"]]
    conds.append(cond)
    wl["status"]["conditions"] = conds


_QUOTA = {"nvidia.com/gpu": "0", "cpu": "2000", "memory": "16Ti", "pods": "1000"}  # a queue's covered resources


def _quota_flavor(flavor: str, gpus: int) -> Obj:
    """One flavor of a ClusterQueue's resource group: its nominal quota of every covered resource."""
    return {"name": flavor, "resources": [{"name": r, "nominalQuota": str(gpus) if r == "nvidia.com/gpu" else q}
                                          for r, q in _QUOTA.items()]}


def _cluster_queue(name: str, flavors: list[tuple[str, int]]) -> Obj:
    """An active ClusterQueue of one resource group (GPUs, CPU, memory, pods) over ``flavors``
    with their GPU quota, its status as Kueue's controller writes it."""
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name, "uid": _uid("cq", name)},
        "spec": {
            "namespaceSelector": {},
            "resourceGroups": [{"coveredResources": list(_QUOTA),
                                "flavors": [_quota_flavor(flavor, gpus) for flavor, gpus in flavors]}],
        },
        "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]},
    }


def _podgroup(name: str, namespace: str, owner_uid: str, min_member: int, phase: str, running: int, created: datetime,
              timeout: int | None = None) -> Obj:
    pg: Obj = {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": _uid("pg", namespace, name),
            "creationTimestamp": _ts(created),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": owner_uid, "controller": True}],
        },
        "spec": {"minMember": min_member},
        "status": {"phase": phase, "running": running, "succeeded": 0, "failed": 0, "occupiedBy": f"{namespace}/{name}"},
    }
    if timeout is not None:
        pg["spec"]["scheduleTimeoutSeconds"] = timeout
    return pg


def _pod(wl: Obj, index: int, node: str | None, gpus: list[int], phase: str) -> Obj:
    md = wl["metadata"]
    job = md["ownerReferences"][0]["name"]
    tmpl = wl["spec"]["podSets"][0]["template"]["metadata"]
    annotations = {
        "kueue.x-k8s.io/workload": md["name"],
        "sim.gangscope.io/gpus": ",".join(str(g) for g in gpus),
        **tmpl.get("annotations", {}),
    }
    labels = {**tmpl.get("labels", {}), "kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/job-completion-index": str(index)}
    per_pod = wl["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["limits"][GPU_RESOURCE]
    spec: Obj = {"containers": [{"name": "trainer", "image": "registry.example.com/ml/trainer:2026.11",
                                 "resources": {"limits": {GPU_RESOURCE: per_pod}, "requests": {GPU_RESOURCE: per_pod}}}],
                 "schedulerName": "scheduler-plugins-scheduler"}
    status: Obj = {"phase": phase}
    if node:
        spec["nodeName"] = node
        ready = phase == "Running"
        status["conditions"] = [{"type": "PodScheduled", "status": "True"},
                                {"type": "Ready", "status": "True" if ready else "False"}]
    else:
        status["conditions"] = [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                 "message": "0/21 nodes are available: 21 Insufficient nvidia.com/gpu."}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{job}-{index}",
            "namespace": md["namespace"],
            "uid": _uid("pod", md["namespace"], job, str(index)),
            "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": md["labels"]["kueue.x-k8s.io/job-uid"], "controller": True}],
        },
        "spec": spec,
        "status": status,
    }


def build_default(now: datetime | None = None, blocks: int = 2, racks: int = 2, nodes_per_rack: int = 4) -> Scenario:
    """The demo scenario (see the module docstring); times are relative to ``now``."""
    now = (now or datetime.now(UTC)).replace(microsecond=0)
    sc = Scenario()
    hosts: dict[tuple[int, int], list[str]] = {}
    for b in range(1, blocks + 1):
        for r in range(1, racks + 1):
            names = [f"gpu-b{b}-r{r}-n{n}" for n in range(1, nodes_per_rack + 1)]
            hosts[(b, r)] = names
            sc.nodes.extend(_node(n, f"block-{b}", f"rack-{b}-{r}") for n in names)
    sc.topologies.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "Topology",
            "metadata": {"name": "gpu-topology", "uid": _uid("topology")},
            "spec": {"levels": [{"nodeLabel": BLOCK_LABEL}, {"nodeLabel": RACK_LABEL}, {"nodeLabel": HOST_LABEL}]},
        }
    )
    sc.resource_flavors.append(
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "ResourceFlavor",
            "metadata": {"name": "h100-tas", "uid": _uid("rf")},
            # The GPU operator's taint is on every GPU node; Kueue's placement tolerates only what the
            # flavor and the pod template tolerate (kueue tas_flavor_snapshot.go:961), as real setups say.
            "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "topologyName": "gpu-topology",
                     "tolerations": [GPU_TOLERATION]},
        }
    )
    # The ClusterQueues the LocalQueues point at, as Kueue's API holds them: the fit tries only a
    # Workload's own queue's flavors (kueue flavorassigner.go:1088-1095), so without them no fit is
    # known. The GB200 flavor is added by _nvl72_rack.
    for cq, gpus in (("gpu-cluster-queue", 96), ("research-cq", 64)):
        sc.cluster_queues.append(_cluster_queue(cq, [("h100-tas", gpus)]))
    for ns, lq, cq in (("ml-team", "ml-team-queue", "gpu-cluster-queue"), ("research", "research-queue", "research-cq")):
        sc.local_queues.append(
            {
                "apiVersion": "kueue.x-k8s.io/v1beta2",
                "kind": "LocalQueue",
                "metadata": {"name": lq, "namespace": ns, "uid": _uid("lq", ns, lq)},
                "spec": {"clusterQueue": cq},
            }
        )

    def running_gang(name: str, ns: str, queue: str, cq: str, rack: tuple[int, int], created: datetime, running: int,
                     phase: str, min_member: int = 4, pods_ready: bool | None = True, timeout: int | None = None,
                     first_node: int = 0, tas: bool = True) -> Obj:
        """``pods_ready`` None: Kueue without waitForPodsReady writes no PodsReady condition."""
        wl = _workload(name, ns, queue, min_member, GPUS_PER_NODE, created, podgroup=name)
        nodes = hosts[rack][first_node:first_node + min_member]
        _admit(wl, cq, nodes, created + timedelta(minutes=2), GPUS_PER_NODE, tas=tas)
        if not tas:
            wl["spec"]["podSets"][0].pop("topologyRequest")
            wl["spec"]["podSets"][0]["template"]["metadata"]["annotations"].pop("kueue.x-k8s.io/podset-required-topology")
        if pods_ready:
            wl["status"]["conditions"].append(
                _cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", created + timedelta(minutes=4))
            )
        elif pods_ready is False:
            wl["status"]["conditions"].append(
                _cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", created + timedelta(minutes=2))
            )
        sc.workloads.append(wl)
        sc.podgroups.append(_podgroup(name, ns, wl["metadata"]["ownerReferences"][0]["uid"], min_member, phase, running,
                                      created + timedelta(minutes=2), timeout))
        bound: list[tuple[str, list[int]]] = []
        for i in range(min_member):
            node = nodes[i] if i < running else None
            gpus = list(range(GPUS_PER_NODE)) if node else []
            sc.pods.append(_pod(wl, i, node, gpus, "Running" if node else "Pending"))
            if node:
                bound.append((node, gpus))
        sc.placements.append(Placement(wl["metadata"]["name"], ns, name, bound))
        return wl

    running_gang("llama-train", "ml-team", "ml-team-queue", "gpu-cluster-queue", (1, 1), now - timedelta(hours=3), 4, "Running")
    running_gang("mixtral-sft", "ml-team", "ml-team-queue", "gpu-cluster-queue", (1, 2), now - timedelta(minutes=25), 0, "Scheduling",
                 pods_ready=False, timeout=600)
    running_gang("t5-pretrain", "research", "research-queue", "research-cq", (2, 1), now - timedelta(minutes=40), 2, "Scheduling",
                 pods_ready=False)
    vit = running_gang("vit-large", "research", "research-queue", "research-cq", (2, 2), now - timedelta(hours=1), 4, "Running")
    running_gang("gemma-eval", "research", "research-queue", "research-cq", (2, 1), now - timedelta(minutes=50), 2, "Running",
                 min_member=2, pods_ready=None, first_node=2, tas=False)

    queued = _workload("bert-finetune", "ml-team", "ml-team-queue", 2, 8, now - timedelta(minutes=3))
    _set_cond(queued, _cond("QuotaReserved", "False", "PendingEvaluation", "Workload is waiting to be evaluated by the scheduler", now - timedelta(minutes=3)))
    # Kueue 0.14-0.18 without the UnadmittedWorkloadsObservability gate: the deprecated Pending with
    # the scheduler's message (kueue pkg/scheduler/scheduler.go:1188)
    inadmissible = _workload("gpt-pretrain", "ml-team", "ml-team-queue", 16, 8, now - timedelta(hours=2))
    _set_cond(inadmissible, _cond(
        "QuotaReserved", "False", "Pending",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100-tas, 64 more needed",
        now - timedelta(hours=2)))
    # preemptions issued, waiting for the victims to release their quota (scheduler.go:294, 495)
    preempting = _workload("qwen-pretrain", "ml-team", "ml-team-queue", 4, 8, now - timedelta(minutes=4), priority="training-urgent")
    preempting["spec"]["priority"] = 100000
    _set_cond(preempting, _cond(
        "QuotaReserved", "False", "WaitingForPreemptedWorkloads",
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor h100-tas, 32 more "
        "needed. Pending the preemption of 1 workload(s)", now - timedelta(minutes=1)))
    # quota reserved, a ProvisioningRequest admission check pending after one retry (kueue#8089's shape)
    checks = _workload("sd-xl", "research", "research-queue", 2, 8, now - timedelta(minutes=10))
    _set_cond(checks, _cond("QuotaReserved", "True", "QuotaReserved", "Quota reserved in ClusterQueue research-cq", now - timedelta(minutes=8)))
    _set_cond(checks, _cond("Admitted", "False", "UnsatisfiedAdmissionChecks", "The workload has not all checks ready", now - timedelta(minutes=8)))
    checks["status"]["admissionChecks"] = [{
        "name": "dws-prov", "state": "Pending", "message": "Provisioning Request was successfully queued.",
        "lastTransitionTime": _ts(now - timedelta(minutes=3)), "requeueAfterSeconds": 60, "retryCount": 1,
    }]
    # evicted for PodsReadyTimeout, in backoff until requeueAt (workload_controller.go:579-590): the
    # job reconciler writes Requeued=False with the eviction reason (jobframework/reconciler.go:604-612)
    timed_out = _workload("whisper-asr", "research", "research-queue", 4, 8, now - timedelta(hours=1, minutes=30), podgroup="whisper-asr")
    _set_cond(timed_out, _cond("QuotaReserved", "False", "PendingEvaluation", "Exceeded the PodsReady timeout research/whisper-asr", now - timedelta(minutes=20)))
    _set_cond(timed_out, _cond("Evicted", "True", "PodsReadyTimeout", "Exceeded the PodsReady timeout research/whisper-asr", now - timedelta(minutes=20)))
    _set_cond(timed_out, _cond("Requeued", "False", "PodsReadyTimeout", "Exceeded the PodsReady timeout research/whisper-asr", now - timedelta(minutes=20)))
    timed_out["status"]["requeueState"] = {"count": 1, "requeueAt": _ts(now + timedelta(minutes=5))}
    timed_out["status"]["schedulingStats"] = {"evictions": [{"reason": "PodsReadyTimeout", "underlyingCause": "WaitForStart", "count": 1}]}
    sc.podgroups.append(_podgroup("whisper-asr", "research", timed_out["metadata"]["ownerReferences"][0]["uid"], 4, "Pending", 0,
                                  now - timedelta(hours=1)))
    finished = _workload("resnet-eval", "ml-team", "ml-team-queue", 1, 8, now - timedelta(hours=5))
    _set_cond(finished, _cond("Finished", "True", "Succeeded", "Job finished successfully", now - timedelta(hours=4)))
    deactivated = _workload("llama-ablation", "ml-team", "ml-team-queue", 2, 8, now - timedelta(hours=6))
    deactivated["spec"]["active"] = False  # as kueue#8387 prints a deactivated Workload
    _set_cond(deactivated, _cond("QuotaReserved", "False", "Pending", "The workload is deactivated", now - timedelta(hours=5)))
    _set_cond(deactivated, _cond("Evicted", "True", "Deactivated", "The workload is deactivated", now - timedelta(hours=5)))
    _set_cond(deactivated, _cond("Requeued", "False", "Deactivated", "The workload is deactivated", now - timedelta(hours=5)))
    deactivated["status"]["schedulingStats"] = {"evictions": [{"reason": "Deactivated", "underlyingCause": "", "count": 1}]}
    sc.workloads.extend([queued, inadmissible, preempting, checks, timed_out, finished, deactivated])

    _node_failure_timeline(sc, vit, hosts[(2, 2)][1], now)
    sc.degraded_node = hosts[(2, 1)][-1]
    sc.hardware[sc.degraded_node] = NodeHardware(scenarios=("degraded",))
    sc.hardware[hosts[(1, 1)][1]] = NodeHardware(scenarios=("straggler",))  # one of llama-train's GPUs lags
    _nvl72_rack(sc, now, blocks + 1)
    _fragmented_block(sc, now, blocks + 2)
    _composite_gang(sc, now, hosts[(1, 2)])
    _kai_gang(sc, now)
    _training_layer(sc, straggler=(hosts[(1, 1)][1], 5))
    return sc


def _training_layer(sc: Scenario, straggler: tuple[str, int]) -> None:
    """The jobs that report their own throughput, and when they slow down.

    At +45 s llama-train's lagging GPU (GPU 5 of ``straggler``'s node, at 30% of its peers from the
    start) falls to 10% and the job's tokens per second to 60%, in step: a hardware slowdown. At the
    same time sd-lora's tokens per second halve on healthy GPUs: a data-loading stall. The demo's
    rules compare both with the 20 s that end at +40 s (config.yaml demo.baseline_at): healthy
    throughput, so both verdicts hold for the rest of the demo. ray-tune is a RayJob whose Ray cluster has one
    placement group that stays PENDING: a gang that cannot assemble inside Ray.
    """
    sc.training += [("ml-team", "llama-train", 5200.0), ("ml-team", "sd-lora", 1800.0)]
    node, gpu = straggler
    sc.training_timeline += [(45.0, "ml-team", "llama-train", 0.6, (node, gpu, 0.1)),
                             (45.0, "ml-team", "sd-lora", 0.5, None)]
    # The gemma-sft TrainJob reports tokens per second through the Trainer status server too.
    for obj in sc.job_objects:
        if obj["kind"] == "TrainJob" and obj["metadata"]["name"] == "gemma-sft":
            obj["status"]["trainerStatus"]["metrics"].append({"name": "tokens_per_second", "value": "0"})
    wl = next(w for w in sc.workloads if w["metadata"]["name"].startswith("job-ray-tune-"))
    ref = wl["metadata"]["ownerReferences"][0]
    # Kueue's RayJob integration owns the Workload by the RayJob (kueue ff69552e
    # pkg/controller/jobs/rayjob/rayjob_controller.go:44); KubeRay names the cluster it creates
    # after the RayJob and owns it by it (kuberay feeaf72f rayjob_controller.go constructRayClusterForRayJob).
    ref.update(apiVersion="ray.io/v1", kind="RayJob")
    cluster = "ray-tune-raycluster-k7d2x"
    head = f"{cluster}-head-9wq4v"
    sc.job_objects += [
        {"apiVersion": "ray.io/v1", "kind": "RayJob",
         "metadata": {"name": "ray-tune", "namespace": "research", "uid": ref["uid"],
                      "labels": {"kueue.x-k8s.io/queue-name": "research-queue"}},
         "spec": {"entrypoint": "python tune.py", "suspend": False},
         "status": {"rayClusterName": cluster, "jobStatus": "RUNNING", "jobDeploymentStatus": "Running",
                    "rayClusterStatus": {"state": "ready", "readyWorkerReplicas": 2, "desiredWorkerReplicas": 2}}},
        {"apiVersion": "ray.io/v1", "kind": "RayCluster",
         "metadata": {"name": cluster, "namespace": "research", "uid": _uid("raycluster", "research", cluster),
                      "labels": {"ray.io/originated-from-cr-name": "ray-tune", "ray.io/originated-from-crd": "RayJob"},
                      "ownerReferences": [{"apiVersion": "ray.io/v1", "kind": "RayJob", "name": "ray-tune", "uid": ref["uid"],
                                           "controller": True, "blockOwnerDeletion": True}]},
         "spec": {"headGroupSpec": {}, "workerGroupSpecs": []},
         "status": {"state": "ready", "readyWorkerReplicas": 2, "availableWorkerReplicas": 2, "desiredWorkerReplicas": 2,
                    "head": {"podName": head}}},
    ]
    sc.ray_heads.append(("research", cluster, head, {"CREATED": 1, "PENDING": 1}))


def _fragmented_block(sc: Scenario, now: datetime, block: int) -> None:
    """Two racks of 3 nodes with their free GPUs scattered (see the module docstring).

    rack-{block}-1: n1 holds ray-tune's pod 0 (4 GPUs), n2 and n3 are empty: 20 GPUs free, two
    8-GPU pods. rack-{block}-2: n1 holds ray-tune's pod 1 (4), n2 sd-lora (2), n3 is empty: 18
    free, one 8-GPU pod. llama-70b-sft needs three 8-GPU pods in one rack of this block (a
    nodeSelector pins it here): the block has room for three, no rack for more than two, which
    Kueue 0.19+ reports as TopologyPlacementFailed, for the whole demo.
    """
    racks = [[f"gpu-b{block}-r{r}-n{n}" for n in range(1, 4)] for r in (1, 2)]
    for r, names in enumerate(racks, start=1):
        sc.nodes.extend(_node(n, f"block-{block}", f"rack-{block}-{r}") for n in names)

    def run(name: str, ns: str, queue: str, cq: str, hosts: list[str], gpus: int, created: datetime,
            podgroup: str | None = None) -> None:
        wl = _workload(name, ns, queue, len(hosts), gpus, created, podgroup=podgroup, topology=("preferred", RACK_LABEL))
        _admit(wl, cq, hosts, created + timedelta(minutes=1), gpus)
        wl["status"]["conditions"].append(_cond("PodsReady", "True", "Started",
                                                "All pods reached readiness and the workload is running",
                                                created + timedelta(minutes=3)))
        sc.workloads.append(wl)
        if podgroup:
            sc.podgroups.append(_podgroup(podgroup, ns, wl["metadata"]["ownerReferences"][0]["uid"], len(hosts), "Running",
                                          len(hosts), created + timedelta(minutes=1)))
        bound = []
        for i, host in enumerate(hosts):
            sc.pods.append(_pod(wl, i, host, list(range(gpus)), "Running"))
            bound.append((host, list(range(gpus))))
        sc.placements.append(Placement(wl["metadata"]["name"], ns, podgroup or "", bound))

    # Admitted when the racks were busier, so Kueue spread it over both (preferred, not required).
    run("ray-tune", "research", "research-queue", "research-cq", [racks[0][0], racks[1][0]], 4, now - timedelta(minutes=90),
        podgroup="ray-tune")
    run("sd-lora", "ml-team", "ml-team-queue", "gpu-cluster-queue", [racks[1][1]], 2, now - timedelta(minutes=35))
    waiting = _workload("llama-70b-sft", "ml-team", "ml-team-queue", 3, GPUS_PER_NODE, now - timedelta(minutes=30),
                        podgroup="llama-70b-sft", topology=("required", RACK_LABEL))
    # Pinned to this block (its dataset is cached on the block's local storage): without the pin,
    # the rack the +40 s NodeFailures eviction empties (vit-large's, 3 healthy nodes) would hold it
    # and its fragmentation story would end there, though no Kueue admits it in the demo.
    waiting["spec"]["podSets"][0]["template"]["spec"]["nodeSelector"] = {BLOCK_LABEL: f"block-{block}"}
    # Kueue 0.19+ with UnadmittedWorkloadsObservability: quota would fit, no rack does
    # (flavorassigner.go:866-892; the message of tas_flavor_snapshot.go:2005-2009)
    _set_cond(waiting, _cond(
        "QuotaReserved", "False", "TopologyPlacementFailed",
        'couldn\'t assign flavors to pod set main: topology "gpu-topology" allows to fit only 2 out of 3 pod(s)',
        now - timedelta(minutes=30)))
    sc.workloads.append(waiting)


NVL72_CLUSTER = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31"  # the fabric cluster UUID of GPU feature discovery's example


def _nvl72_rack(sc: Scenario, now: datetime, block: int) -> None:
    """An NVL72 rack of GB200 compute trays (4 GPUs each), and a node mislabelled into it.

    Nodes n1-n4 are trays of one chassis and one NVLink clique, labelled with the rack and with
    nvidia.com/gpu.clique as GPU feature discovery sets it; ``llama-gb200`` runs on them and n2's
    fabric reports degraded bandwidth. n5 carries the same rack and clique labels, but its GPUs
    report another chassis and clique: a node moved or miscabled, which only the hardware shows.
    """
    gpus = 4
    rack = f"rack-{block}-1"
    names = [f"gpu-b{block}-r1-n{n}" for n in range(1, 6)]
    for i, name in enumerate(names):
        node = _node(name, f"block-{block}", rack, gpus)
        labels = node["metadata"]["labels"]
        labels["nvidia.com/gpu.product"] = "NVIDIA-GB200"
        labels["node.kubernetes.io/instance-type"] = "p6e-gb200.36xlarge"
        labels["kubernetes.io/arch"] = node["status"]["nodeInfo"]["architecture"] = "arm64"
        labels[CLIQUE_LABEL] = f"{NVL72_CLUSTER}.1"
        sc.nodes.append(node)
        odd = i == 4
        sc.hardware[name] = NodeHardware(
            "gb200", ("fabric-degraded",) if i == 1 else (), NVL72_CLUSTER, 2 if odd else 1,
            "1821224099871" if odd else "1821224012345", slot=(3 if odd else 10 + i), tray=(0 if odd else i))
    sc.resource_flavors.append({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "gb200-tas", "uid": _uid("rf-gb200")},
        "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-GB200"}, "topologyName": "gpu-topology",
                 "tolerations": [GPU_TOLERATION]},
    })
    for cq in sc.cluster_queues:  # the GB200 trays are the main queue's second flavor
        if cq["metadata"]["name"] == "gpu-cluster-queue":
            cq["spec"]["resourceGroups"][0]["flavors"].append(_quota_flavor("gb200-tas", gpus * len(names)))
    created = now - timedelta(hours=2)
    wl = _workload("llama-gb200", "ml-team", "ml-team-queue", 4, gpus, created, podgroup="llama-gb200")
    _admit(wl, "gpu-cluster-queue", names[:4], created + timedelta(minutes=2), gpus, flavor="gb200-tas")
    wl["status"]["conditions"].append(
        _cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", created + timedelta(minutes=4)))
    sc.workloads.append(wl)
    sc.podgroups.append(_podgroup("llama-gb200", "ml-team", wl["metadata"]["ownerReferences"][0]["uid"], 4, "Running", 4,
                                  created + timedelta(minutes=2)))
    # llama-gb200 is a JobSet: Kueue's Workload is owned by it, its pods carry its labels.
    jobset = _jobset_of(wl, "workers", 4, created, restarts=4)
    sc.job_objects.append(jobset)
    bound = []
    for i, name in enumerate(names[:4]):
        p = _pod(wl, i, name, list(range(gpus)), "Running")
        _in_jobset(p, jobset, "workers")
        sc.pods.append(p)
        bound.append((name, list(range(gpus))))
    sc.placements.append(Placement(wl["metadata"]["name"], "ml-team", "llama-gb200", bound))
    _jobset_restart_timeline(sc, jobset, now)
    _stalled_trainjob(sc, now, names[4], gpus)


JOBSET_GROUP = "jobset.x-k8s.io/v1alpha2"


def _jobset_of(wl: Obj, replicated_job: str, pods: int, created: datetime, restarts: int) -> Obj:
    """The JobSet that owns ``wl`` (its owner reference becomes the JobSet), ready, after
    ``restarts`` restarts under its failure policy (jobset api/jobset/v1alpha2/jobset_types.go:101-288;
    the condition as pkg/controllers/failure_policy.go:244-258 and jobset_controller.go:1292-1303 write it)."""
    ref = wl["metadata"]["ownerReferences"][0]
    ref.update(apiVersion=JOBSET_GROUP, kind="JobSet")
    name, ns = ref["name"], wl["metadata"]["namespace"]
    restarted = created + timedelta(minutes=50)
    return {
        "apiVersion": JOBSET_GROUP, "kind": "JobSet",
        "metadata": {"name": name, "namespace": ns, "uid": ref["uid"], "creationTimestamp": _ts(created),
                     "labels": {"kueue.x-k8s.io/queue-name": wl["spec"]["queueName"]}},
        "spec": {"replicatedJobs": [{"name": replicated_job, "replicas": 1, "template": {"spec": {
            "parallelism": pods, "completions": pods, "completionMode": "Indexed"}}}],
                 "failurePolicy": {"maxRestarts": 10, "rules": [{"name": "restart-on-node-failure", "action": "RestartJobSet"}]},
                 "suspend": False},
        "status": {
            "restarts": restarts, "restartsCountTowardsMax": restarts,
            "conditions": [
                {"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed",
                 "lastTransitionTime": _ts(created + timedelta(minutes=2))},
                {"type": "RestartingJobSet", "status": "False", "reason": "JobsReady", "message": "all jobs are ready",
                 "lastTransitionTime": _ts(restarted)},
            ],
            "replicatedJobsStatus": [{"name": replicated_job, "ready": 1, "active": 1, "succeeded": 0, "failed": 0,
                                      "suspended": 0, "jobRestarts": [0]}],
        },
    }


def _in_jobset(pod: Obj, jobset: Obj, replicated_job: str) -> None:
    """A pod of a JobSet's child Job, labelled as the JobSet controller labels them (jobset_types.go:24-41)."""
    meta = jobset["metadata"]
    pod["metadata"]["labels"].update({"jobset.sigs.k8s.io/jobset-name": meta["name"], "jobset.sigs.k8s.io/jobset-uid": meta["uid"],
                                      "jobset.sigs.k8s.io/replicatedjob-name": replicated_job, "jobset.sigs.k8s.io/job-index": "0"})
    child = f"{meta['name']}-{replicated_job}-0"
    pod["metadata"]["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": child,
                                           "uid": _uid("job", meta["namespace"], child), "controller": True}]


def _jobset_restart_timeline(sc: Scenario, jobset: Obj, now: datetime) -> None:
    """At +25 s a worker fails and the JobSet restarts all Jobs (restarts 4 -> 5,
    RestartingJobSet True); at +45 s the Jobs are ready again."""
    restarting = copy.deepcopy(jobset)
    st = restarting["status"]
    st["restarts"] = st["restartsCountTowardsMax"] = 5
    st["conditions"][1] = {"type": "RestartingJobSet", "status": "True", "reason": "FailurePolicy_restart-on-node-failure",
                           "message": f"jobset {jobset['metadata']['name']} restarting: job "
                                      f"{jobset['metadata']['name']}-workers-0 failed", "lastTransitionTime": _ts(now + timedelta(seconds=25))}
    st["replicatedJobsStatus"][0].update(ready=0, active=0, failed=1)
    ready = copy.deepcopy(restarting)
    ready["status"]["conditions"][1] = {"type": "RestartingJobSet", "status": "False", "reason": "JobsReady",
                                        "message": "all jobs are ready", "lastTransitionTime": _ts(now + timedelta(seconds=45))}
    ready["status"]["replicatedJobsStatus"][0].update(ready=1, active=1, failed=0)
    sc.timeline.append((25.0, "MODIFIED", restarting))
    sc.timeline.append((45.0, "MODIFIED", ready))


def _stalled_trainjob(sc: Scenario, now: datetime, node: str, gpus: int) -> None:
    """``gemma-sft``: a Kubeflow TrainJob (trainer.kubeflow.org/v1alpha1, kubeflow/trainer
    pkg/apis/trainer/v1alpha1/trainjob_types.go:500-592) on one GB200 node, hung: its training
    process last reported 62% 40 minutes ago, while its pod still runs and holds the GPUs.
    Kueue's Workload is owned by the TrainJob, which owns the JobSet that owns the pod's Job."""
    created = now - timedelta(hours=3)
    wl = _workload("gemma-sft", "ml-team", "ml-team-queue", 1, gpus, created, podgroup=None)
    ref = wl["metadata"]["ownerReferences"][0]
    ref.update(apiVersion="trainer.kubeflow.org/v1alpha1", kind="TrainJob")
    _admit(wl, "gpu-cluster-queue", [node], created + timedelta(minutes=1), gpus, tas=False, flavor="gb200-tas")
    wl["spec"]["podSets"][0].pop("topologyRequest")
    wl["spec"]["podSets"][0]["name"] = "node"
    wl["status"]["admission"]["podSetAssignments"][0]["name"] = "node"
    wl["status"]["conditions"].append(_cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running",
                                            created + timedelta(minutes=3)))
    sc.workloads.append(wl)
    trainjob = {
        "apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob",
        "metadata": {"name": "gemma-sft", "namespace": "ml-team", "uid": ref["uid"], "creationTimestamp": _ts(created),
                     "labels": {"kueue.x-k8s.io/queue-name": "ml-team-queue"}},
        "spec": {"runtimeRef": {"apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime", "name": "torch-distributed"},
                 "trainer": {"numNodes": 1, "resourcesPerNode": {"limits": {GPU_RESOURCE: str(gpus)}}}, "suspend": False},
        "status": {
            "conditions": [{"type": "Suspended", "status": "False", "reason": "Resumed", "message": "TrainJob is resumed",
                            "lastTransitionTime": _ts(created + timedelta(minutes=1))}],
            "jobsStatus": [{"name": "node", "ready": 1, "active": 1, "succeeded": 0, "failed": 0, "suspended": 0}],
            "trainerStatus": {"progressPercentage": 62, "estimatedRemainingSeconds": 5400,
                              "metrics": [{"name": "loss", "value": "1.9731"}, {"name": "currentEpoch", "value": "2"}],
                              "lastUpdatedTime": _ts(now - timedelta(minutes=40))},
        },
    }
    jobset = {
        "apiVersion": JOBSET_GROUP, "kind": "JobSet",
        "metadata": {"name": "gemma-sft", "namespace": "ml-team", "uid": _uid("jobset", "ml-team", "gemma-sft"),
                     "creationTimestamp": _ts(created),
                     "ownerReferences": [{"apiVersion": "trainer.kubeflow.org/v1alpha1", "kind": "TrainJob", "name": "gemma-sft",
                                          "uid": ref["uid"], "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"replicatedJobs": [{"name": "node", "replicas": 1, "template": {"spec": {"parallelism": 1, "completions": 1}}}]},
        "status": {"restarts": 0, "replicatedJobsStatus": [{"name": "node", "ready": 1, "active": 1, "succeeded": 0, "failed": 0,
                                                            "suspended": 0}],
                   "conditions": [{"type": "Suspended", "status": "False", "reason": "ResumeJobs", "message": "jobset is resumed",
                                   "lastTransitionTime": _ts(created + timedelta(minutes=1))}]},
    }
    sc.job_objects += [trainjob, jobset]
    p = _pod(wl, 0, node, list(range(gpus)), "Running")
    p["metadata"]["labels"]["kueue.x-k8s.io/podset"] = "node"
    _in_jobset(p, jobset, "node")
    sc.pods.append(p)
    sc.placements.append(Placement(wl["metadata"]["name"], "ml-team", "", [(node, list(range(gpus)))]))


def _node_failure_timeline(sc: Scenario, wl: Obj, failed_node: str, now: datetime) -> None:
    """At +20 s a node of ``wl`` fails: the node lifecycle controller marks its Ready condition
    Unknown and taints it unreachable (kubernetes pkg/controller/nodelifecycle/
    node_lifecycle_controller.go: NodeStatusUnknown, "Kubelet stopped posting node status.";
    taints node.kubernetes.io/unreachable NoSchedule and NoExecute), and Kueue's TAS node
    controller lists it in the Workload's unhealthyNodes; at +40 s Kueue evicts the Workload with
    NodeFailures, clearing unhealthyNodes and admission (kueue pkg/workload/evict/evict.go:205-209).
    The node stays failed, so capacity, fit and the fragmentation alert see it unavailable throughout."""
    node = copy.deepcopy(next(n for n in sc.nodes if n["metadata"]["name"] == failed_node))
    at = _ts(now + timedelta(seconds=20))
    for c in node["status"]["conditions"]:
        c.update(status="Unknown", reason="NodeStatusUnknown", message="Kubelet stopped posting node status.",
                 lastTransitionTime=at)
    node["spec"]["taints"] = [*node["spec"].get("taints", []),
                              {"key": "node.kubernetes.io/unreachable", "effect": "NoSchedule", "timeAdded": at},
                              {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute", "timeAdded": at}]
    sc.timeline.append((20.0, "MODIFIED", node))
    step1 = copy.deepcopy(wl)
    step1["status"]["unhealthyNodes"] = [{"name": failed_node}]
    _set_cond(step1, _cond("PodsReady", "False", "WaitForRecovery", "At least one pod has failed, waiting for recovery", now))
    step2 = copy.deepcopy(step1)
    step2["status"].pop("unhealthyNodes")
    step2["status"].pop("admission")
    msg = f"Workload was evicted as there was no replacement for unhealthy node(s): {failed_node}"
    _set_cond(step2, _cond("Evicted", "True", "NodeFailures", msg, now + timedelta(seconds=40)))
    _set_cond(step2, _cond("QuotaReserved", "False", "PendingEvaluation", "Workload is waiting to be evaluated", now + timedelta(seconds=40)))
    _set_cond(step2, _cond("Admitted", "False", "NoReservation", "The workload has no reservation", now + timedelta(seconds=40)))
    _set_cond(step2, _cond("Requeued", "True", "NodeFailures", msg, now + timedelta(seconds=40)))
    step2["status"]["conditions"] = [c for c in step2["status"]["conditions"] if c["type"] != "PodsReady"]
    step2["status"]["schedulingStats"] = {"evictions": [{"reason": "NodeFailures", "underlyingCause": "", "count": 1}]}
    sc.timeline.append((20.0, "MODIFIED", step1))
    sc.timeline.append((40.0, "MODIFIED", step2))


NATIVE = "scheduling.k8s.io"


def _composite_gang(sc: Scenario, now: datetime, nodes: list[str]) -> None:
    """``moe-pipeline``: a Kubernetes 1.37 composite gang. Its Job's native Workload (v1beta1)
    holds a composite template of two PodGroup templates; the CompositePodGroup (v1alpha3, gang of
    2 child groups; its status stays empty in 1.37) parents two PodGroups (v1beta1, gang of 2 pods
    each, PodGroupInitiallyScheduled) whose pods name them in spec.schedulingGroup
    (kubernetes/api 10b39a39 scheduling/v1beta1/types.go:130-176, 602-785; v1alpha3/types.go:1177-1415;
    core/v1/types.go:4716). Kueue admitted it without a topology request and without waitForPodsReady,
    on the rack whose hosts it assigned to ``mixtral-sft``."""
    created = now - timedelta(minutes=90)
    ns, job = "ml-team", "moe-pipeline"
    groups = ("experts", "router")
    wl = _workload(job, ns, "ml-team-queue", 2, GPUS_PER_NODE, created)
    base = wl["spec"]["podSets"][0]
    base.pop("topologyRequest")
    base["template"]["metadata"]["annotations"].pop("kueue.x-k8s.io/podset-required-topology")
    podsets = []
    for g in groups:
        ps = copy.deepcopy(base)
        ps["name"] = g
        ps["template"]["spec"]["schedulingGroup"] = {"podGroupName": f"{job}-{g}"}
        podsets.append(ps)
    wl["spec"]["podSets"] = podsets
    _admit(wl, "gpu-cluster-queue", nodes, created + timedelta(minutes=1), GPUS_PER_NODE, tas=False)
    wl["status"]["admission"]["podSetAssignments"] = [
        {**wl["status"]["admission"]["podSetAssignments"][0], "name": g, "count": 2} for g in groups]
    sc.workloads.append(wl)
    owner = wl["metadata"]["ownerReferences"][0]
    owner_ref = {"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": owner["uid"], "controller": True}
    meta = lambda name, kind: {"name": name, "namespace": ns, "uid": _uid(kind, ns, name),  # noqa: E731
                               "creationTimestamp": _ts(created + timedelta(minutes=1)), "ownerReferences": [owner_ref]}
    sc.gang_objects.append({
        "apiVersion": f"{NATIVE}/v1beta1", "kind": "Workload", "metadata": meta(job, "native-workload"),
        "spec": {"controllerRef": {"apiGroup": "batch", "kind": "Job", "name": job}, "podGroupTemplates": [],
                 "compositePodGroupTemplates": [{
                     "name": "pipeline", "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                     "podGroupTemplates": [{"name": g, "schedulingPolicy": {"gang": {"minCount": 2}}} for g in groups]}]},
    })
    sc.gang_objects.append({
        "apiVersion": f"{NATIVE}/v1alpha3", "kind": "CompositePodGroup", "metadata": meta(job, "cpg"),
        "spec": {"workloadRef": {"workloadName": job, "templateName": "pipeline"},
                 "schedulingPolicy": {"gang": {"minGroupCount": 2}}},
        "status": {},
    })
    scheduled = _ts(created + timedelta(minutes=2))
    for k, g in enumerate(groups):
        name = f"{job}-{g}"
        sc.gang_objects.append({
            "apiVersion": f"{NATIVE}/v1beta1", "kind": "PodGroup", "metadata": meta(name, "pg"),
            "spec": {"parentCompositePodGroupName": job, "workloadRef": {"workloadName": job, "templateName": g},
                     "schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True", "reason": "Scheduled",
                                       "message": "", "observedGeneration": 1, "lastTransitionTime": scheduled}]},
        })
        bound = []
        for i in range(2):
            node = nodes[2 * k + i]
            p = _pod(wl, 2 * k + i, node, list(range(GPUS_PER_NODE)), "Running")
            p["metadata"]["name"] = f"{name}-{i}"
            p["metadata"]["uid"] = _uid("pod", ns, name, str(i))
            p["metadata"]["labels"]["kueue.x-k8s.io/podset"] = g
            p["spec"]["schedulingGroup"] = {"podGroupName": name}
            p["spec"]["schedulerName"] = "default-scheduler"
            sc.pods.append(p)
            bound.append((node, list(range(GPUS_PER_NODE))))
        sc.placements.append(Placement(wl["metadata"]["name"], ns, name, bound))


def _kai_gang(sc: Scenario, now: datetime) -> None:
    """``vision/sam-finetune``: a KAI Scheduler gang (scheduling.run.ai/v2alpha2, KAI-Scheduler
    pkg/apis/scheduling/v2alpha2/podgroup_types.go) its queue's GPU limit keeps out: the scheduler's
    typed reason OverLimit with its message (pkg/scheduler/api/unschedule_info.go:57-82) and queue
    details (pkg/scheduler/plugins/proportion/capacity_policy/max_allowed_check.go:26-44), no phase,
    as the real GB200 cluster prints a KAI PodGroup (tests/fixtures/gangs/real/kai-01). Its two pods
    name it in the pod-group-name annotation and wait, unbound."""
    created = now - timedelta(minutes=20)
    ns, name = "vision", "sam-finetune"
    message = ("vision-queue quota has reached the allowable limit of GPUs. Limit is 16 GPUs, currently 8 GPUs allocated "
               "and workload requested 16 GPUs")
    sc.gang_objects.append({
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns, "uid": _uid("kai", ns, name), "creationTimestamp": _ts(created),
                     "labels": {"kai.scheduler/queue": "vision-queue"},
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": _uid("job", ns, name),
                                          "controller": True}]},
        "spec": {"minMember": 2, "queue": "vision-queue", "priorityClassName": "train",
                 "topologyConstraint": {"topology": "gpu-topology", "requiredTopologyLevel": RACK_LABEL}},
        "status": {
            "resourcesStatus": {"requested": {GPU_RESOURCE: "16"}},
            "schedulingConditions": [{
                "type": "UnschedulableOnNodePool", "nodePool": "default", "status": "True", "transitionID": "3",
                "lastTransitionTime": _ts(created + timedelta(seconds=5)), "reason": "Unschedulable", "message": f"OverLimit: {message}",
                "reasons": [{"reason": "OverLimit", "message": message, "details": {"queueDetails": {
                    "name": "vision-queue", "queueResourceLimits": {GPU_RESOURCE: "16"},
                    "queueAllocatedResources": {GPU_RESOURCE: "8"}, "podGroupRequestedResources": {GPU_RESOURCE: "16"}}}}],
            }],
        },
    })
    for i in range(2):
        sc.pods.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"{name}-{i}", "namespace": ns, "uid": _uid("pod", ns, name, str(i)),
                         "creationTimestamp": _ts(created),
                         "labels": {"kai.scheduler/queue": "vision-queue", "batch.kubernetes.io/job-name": name},
                         "annotations": {"pod-group-name": name, "sim.gangscope.io/gpus": ""},
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name,
                                              "uid": _uid("job", ns, name), "controller": True}]},
            "spec": {"schedulerName": "kai-scheduler", "containers": [{
                "name": "trainer", "image": "registry.example.com/vision/sam:2026.11",
                "resources": {"limits": {GPU_RESOURCE: "8"}, "requests": {GPU_RESOURCE: "8"}}}]},
            "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                                                           "message": f"OverLimit: {message}"}]},
        })
