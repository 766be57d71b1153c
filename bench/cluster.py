"""Realistic clusters for the collector benchmarks, and a realistic stream of changes to them.

Every collector benchmark (bench/collector.py, gangs.py, load.py, soak.py, churn.py, shards.py)
builds its cluster here, so a figure measured on one is a figure for the same kind of data. The
data is what a large Kueue cluster holds, not one object copied N times:

* a node pool under a block / rack / host topology (GKE-style node names: node pools of
  ``gke-<cluster>-<pool>-<hash>-<4 chars>``), racks of 32 hosts, blocks of 16 racks;
* jobs of 1 to 512 pods with a long tail (mean about 16 hosts), each placed the way Kueue's
  topology-aware scheduler places it: in one block, filling racks in order, on hosts drawn from
  the pool (running jobs on free hosts; finished jobs on hosts they held in the past), encoded in
  v1beta2's hostname-prefix slices the way Kueue encodes them (one slice per shared prefix);
* every Workload with its own creation time, its own condition times and messages (the quota a
  pending one is short of, the preemptor of an evicted one), its own owner, uid and labels;
* Workloads in every stage, in the proportions of a busy shared cluster: most finished or
  running, thousands pending (queued, inadmissible), some assembling, waiting for admission
  checks, evicted, deactivated;
* a Coscheduling PodGroup per job (a third joined by the template label, a third by the owner's
  uid, a third by the owner's name), its phase and counts matching its Workload's stage;
* the pods of the admitted jobs (:meth:`Cluster.pods`), for sources that watch pods;
* namespaces of very different sizes (a few large teams, a long tail of small ones), as sharding
  by namespace meets them.

:class:`Churn` changes such a cluster the way Kueue and the schedulers do: condition updates of
pending Workloads, admissions on newly drawn hosts, pods becoming ready, evictions, finishes,
deletions of finished jobs, new jobs, PodGroup phase changes. Everything is seeded: the same
arguments give the same cluster and the same stream.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

Obj = dict[str, Any]

BLOCK = "cloud.provider.com/topology-block"
RACK = "cloud.provider.com/topology-rack"
HOST = "kubernetes.io/hostname"
GPU = "nvidia.com/gpu"
GPUS_PER_NODE = 8
HOSTS_PER_RACK = 32
RACKS_PER_BLOCK = 16
NOW = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)

# Job sizes in hosts and how often each occurs: most jobs are small, a long tail is large (mean ~16).
SIZES = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 256, 512)
SIZE_WEIGHTS = (300, 140, 30, 110, 30, 100, 25, 90, 20, 60, 12, 40, 6, 22, 8, 2)
# Stages of the initial cluster, in proportion (pods_ready_timeout evictions and NodeFailures among "evicted").
STAGES = (("finished", 40), ("running", 33), ("queued", 9), ("inadmissible", 8), ("assembling", 3),
          ("admission_checks", 2), ("evicted", 3), ("deactivated", 2))
# Pods per host of a job (GPUs per pod = 8 / that), as training jobs request them.
PODS_PER_HOST = ((1, 80), (2, 8), (8, 12))
_SIZE_CUM = list(itertools.accumulate(SIZE_WEIGHTS))
_PPH, _PPH_CUM = [p for p, _ in PODS_PER_HOST], list(itertools.accumulate(w for _, w in PODS_PER_HOST))


def _ts(t: datetime) -> str:
    return t.replace(microsecond=0, tzinfo=None).isoformat() + "Z"


def _uid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"{h[:8]}-{h[8:12]}-4{h[13:16]}-{'89ab'[int(h[16], 16) % 4]}{h[17:20]}-{h[20:32]}"


def _cond(ctype: str, status: str, reason: str, message: str, at: datetime, generation: int = 1) -> Obj:
    return {"type": ctype, "status": status, "reason": reason, "message": message,
            "observedGeneration": generation, "lastTransitionTime": _ts(at)}


@dataclass
class Node:
    name: str
    block: str
    rack: str
    busy: bool = False


@dataclass
class Job:
    """What the generator knows about one job beyond its objects: where it sits in its life."""

    namespace: str
    name: str  # the Job's name; the Workload is job-<name>-<hash>
    stage: str
    hosts: int
    pods_per_host: int
    join: int  # 0: template label, 1: owner uid, 2: owner name
    placed: list[Node] = field(default_factory=list)
    admitted: datetime = NOW
    workload: Obj = field(default_factory=dict)
    podgroup: Obj = field(default_factory=dict)

    @property
    def pods(self) -> int:
        return self.hosts * self.pods_per_host


@dataclass
class Cluster:
    """The objects of a realistic cluster (see the module docstring) and the generator's state."""

    topology: Obj
    flavors: list[Obj]
    nodes: list[Obj]
    local_queues: list[Obj]
    jobs: list[Job]
    pool: list[Node]
    rng: random.Random
    namespaces: list[str]
    namespace_weights: list[float]  # cumulative
    made: int = 0  # jobs made so far (names stay unique across the churn)
    free: int = 0  # hosts no running job holds

    @property
    def workloads(self) -> list[Obj]:
        return [j.workload for j in self.jobs]

    @property
    def podgroups(self) -> list[Obj]:
        return [j.podgroup for j in self.jobs]

    def objects(self, podgroups: bool = True) -> list[Obj]:
        """Everything a simulated API server should serve, cluster-scoped objects first."""
        out = [self.topology, *self.flavors, *self.nodes, *self.local_queues, *self.workloads]
        return out + self.podgroups if podgroups else out

    def pods(self) -> list[Obj]:
        """The pods of every admitted, unfinished job, bound to its hosts (running or pending)."""
        out = []
        for job in self.jobs:
            if job.stage in ("running", "assembling"):
                out += _pods(job)
        return out

    def hosts_per_workload(self) -> float:
        placed = [len(j.placed) for j in self.jobs if j.placed]
        return sum(placed) / max(len(placed), 1)


def build_cluster(workloads: int = 20_000, nodes: int = 16_384, seed: int = 15, namespaces: int = 300) -> Cluster:
    """A cluster of ``workloads`` jobs on ``nodes`` hosts (see the module docstring)."""
    rng = random.Random(seed)
    blocks = max(1, nodes // (HOSTS_PER_RACK * RACKS_PER_BLOCK))
    pool: list[Node] = []
    node_objs: list[Obj] = []
    pools = [f"gke-ml-a3mega-pool-{p}-{rng.getrandbits(32):08x}-" for p in range(max(1, nodes // 1000))]
    for i in range(nodes):
        b, r = i // (HOSTS_PER_RACK * RACKS_PER_BLOCK) % blocks, i // HOSTS_PER_RACK
        name = pools[i * len(pools) // nodes] + "".join(rng.choice("abcdefghijklmnopqrstuvwxyz0123456789") for _ in range(4))
        node = Node(name, f"block-{b}", f"rack-{r}")
        pool.append(node)
        node_objs.append({"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "uid": _uid(rng), "resourceVersion": "1", "creationTimestamp": _ts(NOW - timedelta(days=60)),
            "labels": {BLOCK: node.block, RACK: node.rack, HOST: name, "nvidia.com/gpu.present": "true",
                       "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", "node.kubernetes.io/instance-type": "a3-megagpu-8g",
                       "cloud.google.com/gke-nodepool": name.rsplit("-", 2)[0]}}})
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "gpu-topology"},
                "spec": {"levels": [{"nodeLabel": BLOCK}, {"nodeLabel": RACK}, {"nodeLabel": HOST}]}}
    flavors = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "h100-tas"},
                "spec": {"nodeLabels": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}, "topologyName": "gpu-topology"}}]
    names = [f"{rng.choice(('ml', 'research', 'llm', 'vision', 'speech', 'rec', 'infra'))}-team-{i:03d}" for i in range(namespaces)]
    weights = list(itertools.accumulate(1.0 / (i + 8) for i in range(namespaces)))  # cumulative: a few large teams, a long tail
    queues = [{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
               "metadata": {"name": "training", "namespace": ns, "uid": _uid(rng)},
               "spec": {"clusterQueue": f"cq-{i % 12}"}} for i, ns in enumerate(names)]
    cluster = Cluster(topology, flavors, node_objs, queues, [], pool, rng, names, weights, free=len(pool))
    stages = [s for s, _ in STAGES]
    stage_weights = [w for _, w in STAGES]
    # Jobs holding hosts now are placed first, on free hosts, until the pool is as full as a busy
    # cluster's (92%); the rest of those drawn as running ran in the past: finished.
    drawn = rng.choices(stages, stage_weights, k=workloads)
    drawn.sort(key=lambda s: s not in HOLDING)
    for stage in drawn:
        cluster.jobs.append(new_job(cluster, stage))
    rng.shuffle(cluster.jobs)
    return cluster


HOLDING = ("running", "assembling", "admission_checks")  # stages whose job holds its hosts now
FULL = 0.92  # how full the initial pool gets


def new_job(cluster: Cluster, stage: str, created: datetime | None = None) -> Job:
    """A job in ``stage``, its Workload and PodGroup built to match (a job drawn to hold hosts
    when the pool is full enough ran in the past: finished)."""
    rng = cluster.rng
    ns = rng.choices(cluster.namespaces, cum_weights=cluster.namespace_weights)[0]
    pods_per_host = rng.choices(_PPH, cum_weights=_PPH_CUM)[0]
    hosts = rng.choices(SIZES, cum_weights=_SIZE_CUM)[0]
    hosts = max(1, min(hosts, 512 // pods_per_host))
    if stage in HOLDING and cluster.free - hosts < (1 - FULL) * len(cluster.pool):
        stage = "finished"
    cluster.made += 1
    kind = rng.choice(("llama", "mixtral", "t5", "vit", "bert", "gpt", "whisper", "sdxl", "dlrm"))
    job = Job(ns, f"{kind}-{rng.choice(('pretrain', 'sft', 'eval', 'train', 'dpo', 'ablation'))}-{cluster.made:06d}",
              stage, hosts, pods_per_host, cluster.made % 3)
    created = created or NOW - timedelta(seconds=rng.uniform(600, 7 * 86400))
    job.workload = _workload(cluster, job, created)
    if stage in ("finished", "running", "assembling", "admission_checks"):
        _admit(cluster, job, created + timedelta(seconds=rng.lognormvariate(5, 1.5)))
    if stage in ("running", "finished"):
        ready = _admitted_at(job) + timedelta(seconds=rng.uniform(30, 600))
        _set_cond(job.workload, _cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", ready))
        if stage == "finished":
            done = min(ready + timedelta(seconds=rng.lognormvariate(9, 1.2)), NOW - timedelta(seconds=60))
            _finish(cluster, job, done)
    elif stage == "admission_checks":
        _set_cond(job.workload, _cond("Admitted", "False", "Pending",
                                      "The workload has not all admission checks ready", _admitted_at(job)))
        job.workload["status"]["admissionChecks"] = [{"name": "dws-prov", "state": "Pending",
                                                      "message": "Provisioning request in progress",
                                                      "lastTransitionTime": _ts(_admitted_at(job))}]
    elif stage == "assembling":
        _set_cond(job.workload, _cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded",
                                      _admitted_at(job)))
    elif stage == "queued":
        _set_cond(job.workload, _cond("QuotaReserved", "False", "Pending",
                                      f"couldn't assign flavors to pod set main: insufficient quota for {GPU} in flavor "
                                      f"h100-tas, previously considered podsets requests (0) + current podset request "
                                      f"({job.pods * GPUS_PER_NODE // job.pods_per_host}) > maximum capacity "
                                      f"({rng.randrange(64, 4096, 8)})", created + timedelta(seconds=1)))
    elif stage == "inadmissible":
        _pending(cluster, job, created + timedelta(seconds=rng.uniform(1, 3600)))
    elif stage == "evicted":
        _admit(cluster, job, created + timedelta(seconds=rng.lognormvariate(5, 1.5)), keep=False)
        _evict(cluster, job, _admitted_at(job) + timedelta(seconds=rng.uniform(60, 86400)))
    elif stage == "deactivated":
        job.workload["spec"]["active"] = False
        _set_cond(job.workload, _cond("Evicted", "True", "Deactivated", "The workload is deactivated",
                                      created + timedelta(seconds=rng.uniform(60, 3600))))
    job.podgroup = _podgroup(job, created)
    return job


def _workload(cluster: Cluster, job: Job, created: datetime) -> Obj:
    rng = cluster.rng
    job_uid = _uid(rng)
    digest = hashlib.sha1(f"Job\nbatch\n{job.name}\n{job_uid}".encode()).hexdigest()[:5]
    labels = {"app": job.name, "batch.kubernetes.io/job-name": job.name, "batch.kubernetes.io/controller-uid": job_uid}
    if job.join == 0:
        labels["scheduling.x-k8s.io/pod-group"] = job.name
    gpus = str(GPUS_PER_NODE // job.pods_per_host)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"job-{job.name}-{digest}", "namespace": job.namespace, "uid": _uid(rng), "generation": 1,
                     "creationTimestamp": _ts(created), "labels": {"kueue.x-k8s.io/job-uid": job_uid},
                     "finalizers": ["kueue.x-k8s.io/resource-in-use"],
                     "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job.name, "uid": job_uid,
                                          "controller": True, "blockOwnerDeletion": True}]},
        "spec": {"active": True, "queueName": "training", "priority": rng.choice((0, 100, 1000, 10000)),
                 "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                      "name": rng.choice(("training-low", "training", "training-high"))},
                 "podSets": [{"name": "main", "count": job.pods,
                              "topologyRequest": {"required": BLOCK, "podIndexLabel": "batch.kubernetes.io/job-completion-index"},
                              "template": {"metadata": {"labels": labels,
                                                        "annotations": {"kueue.x-k8s.io/podset-required-topology": BLOCK}},
                                           "spec": {"restartPolicy": "Never", "tolerations": [
                                               {"key": GPU, "operator": "Exists", "effect": "NoSchedule"}],
                                               "containers": [{"name": "trainer", "image": f"registry.example.com/ml/{job.name.split('-')[0]}:2026.11",
                                                               "resources": {"requests": {"cpu": str(88 // job.pods_per_host), "memory": "1400Gi", GPU: gpus},
                                                                             "limits": {GPU: gpus}}}]}}}]},
        "status": {"conditions": []},
    }


def _set_cond(wl: Obj, cond: Obj) -> None:
    conds = [c for c in wl["status"].get("conditions", []) if c["type"] != cond["type"]]
    conds.append(cond)
    wl["status"]["conditions"] = conds


def _admitted_at(job: Job) -> datetime:
    return job.admitted


def draw_hosts(cluster: Cluster, n: int, exclusive: bool) -> list[Node]:
    """``n`` hosts in one block, filling racks in order from a random host of it; free ones for a
    job that takes them now (``exclusive``: they become busy), any for one that held them in the
    past (past jobs ran all over the pool, so their host sets differ as real ones do)."""
    rng, pool = cluster.rng, cluster.pool
    block_size = HOSTS_PER_RACK * RACKS_PER_BLOCK
    blocks = max(1, len(pool) // block_size)
    size = min(block_size, len(pool))
    for _ in range(8):
        b = rng.randrange(blocks)
        first = rng.randrange(size)
        chosen: list[Node] = []
        for k in range(size):
            node = pool[b * block_size + (first + k) % size]
            if not exclusive or not node.busy:
                chosen.append(node)
                if len(chosen) == n:
                    break
        if len(chosen) == n:
            break
    else:  # the pool is full: take what is there (a past placement, or an oversubscribed benchmark)
        chosen = rng.sample(pool, n) if n <= len(pool) else [rng.choice(pool) for _ in range(n)]
    if exclusive:
        for node in chosen:
            if not node.busy:
                node.busy = True
                cluster.free -= 1
    return sorted(chosen, key=lambda nd: (nd.block, nd.rack, nd.name))


def topology_assignment(hosts: list[Node], pods_per_host: int) -> Obj:
    """v1beta2 hostname-only assignment, one slice per shared '-'-terminated prefix (Kueue's
    TASAssignmentsEncodingByHostnamePrefix), domains in (block, rack, host) order."""
    slices: list[Obj] = []
    for node in hosts:
        prefix = node.name[: node.name.rfind("-") + 1]
        if slices and slices[-1]["valuesPerLevel"][0]["individual"]["prefix"] == prefix:
            s = slices[-1]
            s["domainCount"] += 1
            s["valuesPerLevel"][0]["individual"]["roots"].append(node.name[len(prefix):])
        else:
            slices.append({"domainCount": 1, "valuesPerLevel": [{"individual": {"prefix": prefix, "roots": [node.name[len(prefix):]]}}],
                           "podCounts": {"universal": pods_per_host}})
    return {"levels": [HOST], "slices": slices}


def _admit(cluster: Cluster, job: Job, at: datetime, keep: bool = True) -> None:
    rng = cluster.rng
    job.placed = draw_hosts(cluster, job.hosts, exclusive=job.stage in HOLDING)
    cq = f"cq-{int(job.namespace[-3:]) % 12}"
    gpus = job.pods * GPUS_PER_NODE // job.pods_per_host
    status = job.workload["status"]
    status["admission"] = {"clusterQueue": cq, "podSetAssignments": [{
        "name": "main", "count": job.pods, "flavors": {"cpu": "h100-tas", "memory": "h100-tas", GPU: "h100-tas"},
        "resourceUsage": {"cpu": str(88 * job.hosts), "memory": f"{1400 * job.pods}Gi", GPU: str(gpus)},
        "topologyAssignment": topology_assignment(job.placed, job.pods_per_host)}]}
    job.admitted = at
    _set_cond(job.workload, _cond("QuotaReserved", "True", "QuotaReserved", f"Quota reserved in ClusterQueue {cq}", at))
    _set_cond(job.workload, _cond("Admitted", "True", "Admitted", "The workload is admitted", at))
    if rng.random() < 0.15:  # preempted once before, requeued, re-admitted
        status["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": 1}]}
        _set_cond(job.workload, _cond("Requeued", "True", "Preempted", _preemption_message(cluster), at - timedelta(seconds=rng.uniform(60, 7200))))
    if not keep:
        status.pop("admission")


def _preemption_message(cluster: Cluster) -> str:
    return (f"Preempted to accommodate a workload (UID: {_uid(cluster.rng)}, JobUID: {_uid(cluster.rng)}) due to "
            f"prioritization in the ClusterQueue; preemptor path: /cq-{cluster.rng.randrange(12)}; preemptee path: /cq-{cluster.rng.randrange(12)}")


def _pending(cluster: Cluster, job: Job, at: datetime) -> None:
    rng = cluster.rng
    short = rng.randrange(8, 4096, 8)
    _set_cond(job.workload, _cond("QuotaReserved", "False", "Inadmissible",
                                  f"couldn't assign flavors to pod set main: insufficient unused quota for {GPU} in flavor "
                                  f"h100-tas, {short} more needed", at))


def _release(cluster: Cluster, job: Job) -> None:
    """The hosts of a job that held them (running, assembling) are free again."""
    if job.stage in HOLDING:
        for node in job.placed:
            node.busy = False
        cluster.free += len(job.placed)


def _finish(cluster: Cluster, job: Job, at: datetime) -> None:
    _set_cond(job.workload, _cond("Finished", "True", "JobFinished", "Job finished successfully", at))
    _release(cluster, job)
    job.stage = "finished"


def _evict(cluster: Cluster, job: Job, at: datetime) -> None:
    """Evicted (preempted, PodsReadyTimeout or NodeFailures) and requeued: admission cleared."""
    rng = cluster.rng
    reason, message = rng.choices((
        ("Preempted", _preemption_message(cluster)),
        ("PodsReadyTimeout", "Exceeded the PodsReady timeout default/" + job.workload["metadata"]["name"]),
        ("NodeFailures", "Workload was evicted as there was no replacement for a failed node: "
                         + (job.placed[0].name if job.placed else "unknown")),
    ), (70, 20, 10))[0]
    status = job.workload["status"]
    status.pop("admission", None)
    stats = status.setdefault("schedulingStats", {}).setdefault("evictions", [])
    for e in stats:
        if e["reason"] == reason:
            e["count"] += 1
            break
    else:
        stats.append({"reason": reason, "underlyingCause": "", "count": 1})
    _set_cond(job.workload, _cond("Evicted", "True", reason, message, at))
    _set_cond(job.workload, _cond("QuotaReserved", "False", "Pending", f"Previously: {message}", at))
    _set_cond(job.workload, _cond("Admitted", "False", "NoReservation", "The workload has no reservation", at))
    _set_cond(job.workload, _cond("Requeued", "True", reason, message, at))
    status["requeueState"] = {"count": rng.randint(1, 3), "requeueAt": _ts(at + timedelta(seconds=rng.choice((60, 120, 240))))}
    for cond in status["conditions"]:
        if cond["type"] == "PodsReady":
            cond.update(status="False", reason="PodsReadyTimeout" if reason == "PodsReadyTimeout" else "Stopped",
                        message="Not all pods are ready or succeeded", lastTransitionTime=_ts(at))
    _release(cluster, job)
    job.placed = []
    job.stage = "evicted"


_PHASE = {"finished": ("Finished", 0), "running": ("Running", 1), "assembling": ("Scheduling", 0.5),
          "admission_checks": ("Pending", 0), "queued": ("Pending", 0), "inadmissible": ("Pending", 0),
          "evicted": ("Pending", 0), "deactivated": ("Pending", 0)}


def _podgroup(job: Job, created: datetime) -> Obj:
    wl = job.workload["metadata"]
    owner = wl["ownerReferences"][0]
    meta: Obj = {"name": job.name if job.join != 2 else owner["name"], "namespace": job.namespace,
                 "uid": hashlib.md5(wl["uid"].encode()).hexdigest(), "creationTimestamp": _ts(created + timedelta(seconds=1)),
                 "labels": {"app": job.name}}
    if job.join == 1:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner["name"], "uid": owner["uid"], "controller": True}]
    pg = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
          "spec": {"minMember": job.pods, "scheduleTimeoutSeconds": 600}, "status": {}}
    set_podgroup_phase(job, pg)
    return pg


def set_podgroup_phase(job: Job, pg: Obj | None = None) -> None:
    pg = pg if pg is not None else job.podgroup
    if not pg:
        return
    phase, frac = _PHASE[job.stage]
    running = int(job.pods * frac)
    pg["status"] = {"phase": phase, "running": running, "succeeded": job.pods if phase == "Finished" else 0,
                    "failed": 0, "scheduled": running, "occupiedBy": f"{job.namespace}/{job.name}"}


def _pods(job: Job) -> list[Obj]:
    wl = job.workload
    md = wl["metadata"]
    tmpl = wl["spec"]["podSets"][0]["template"]["metadata"]
    out = []
    for i in range(job.pods):
        node = job.placed[i // job.pods_per_host] if job.placed else None
        labels = {**tmpl["labels"], "kueue.x-k8s.io/podset": "main", "batch.kubernetes.io/job-completion-index": str(i)}
        spec: Obj = {"containers": [{"name": "trainer", "resources": {"limits": {GPU: str(GPUS_PER_NODE // job.pods_per_host)}}}]}
        if node is not None:
            spec["nodeName"] = node.name
        out.append({"apiVersion": "v1", "kind": "Pod", "metadata": {
            "name": f"{job.name}-{i}-{md['uid'][:5]}", "namespace": job.namespace, "uid": f"{md['uid'][:24]}{i:012d}",
            "labels": labels, "annotations": {"kueue.x-k8s.io/workload": md["name"]},
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": md["ownerReferences"][0]["name"],
                                 "uid": md["ownerReferences"][0]["uid"], "controller": True}]},
            "spec": spec, "status": {"phase": "Running" if job.stage == "running" else "Pending"}})
    return out


# --- churn -------------------------------------------------------------------------------------

# What happens in a busy cluster per change, in proportion: Kueue rewriting the condition of a
# pending Workload as it retries, admitting one on new hosts, pods becoming ready, an eviction,
# a job finishing, a finished job deleted (and its PodGroup), a new job, a PodGroup's phase.
CHURN_MIX = (("pending_update", 30), ("admit", 12), ("ready", 10), ("evict", 4), ("finish", 10),
             ("delete", 11), ("create", 11), ("podgroup", 12))


@dataclass
class Change:
    """One change for the API server: ``verb`` create, update or delete of ``obj``."""

    what: str  # the CHURN_MIX kind
    verb: str
    obj: Obj


class Churn:
    """A seeded, endless stream of realistic changes to ``cluster`` (see the module docstring).

    Each :meth:`next` mutates the generator's own copy of the objects and returns the changes an
    API server would see (an admission is one Workload update; a delete removes the Workload and
    its PodGroup; a create adds both). The population stays steady: a job is created only while
    fewer jobs than the cluster started with are live, so a soak measures memory, not growth.
    """

    def __init__(self, cluster: Cluster, seed: int = 1510) -> None:
        self.cluster = cluster
        self.rng = random.Random(seed)
        self.clock = NOW
        self.by_stage: dict[str, list[Job]] = {}
        for job in cluster.jobs:
            self.by_stage.setdefault(job.stage, []).append(job)
        self.counts: dict[str, int] = {}
        self.target = self.live = len(cluster.jobs)

    def _take(self, *stages: str) -> Job | None:
        pools = [s for s in stages if self.by_stage.get(s)]
        if not pools:
            return None
        stage = self.rng.choice(pools)
        jobs = self.by_stage[stage]
        i = self.rng.randrange(len(jobs))
        jobs[i], jobs[-1] = jobs[-1], jobs[i]
        return jobs.pop()

    def _put(self, job: Job) -> None:
        self.by_stage.setdefault(job.stage, []).append(job)

    def __iter__(self) -> Iterator[list[Change]]:
        while True:
            yield self.next()

    def next(self) -> list[Change]:
        """The next change (one to three objects); never empty."""
        self.clock += timedelta(milliseconds=self.rng.randint(1, 20))
        kinds = [k for k, _ in CHURN_MIX]
        weights = [w for _, w in CHURN_MIX]
        while True:
            what = self.rng.choices(kinds, weights)[0]
            changes = getattr(self, "_" + what)()
            if changes:
                self.counts[what] = self.counts.get(what, 0) + 1
                return changes

    def _update(self, what: str, job: Job, podgroup: bool = False) -> list[Change]:
        out = [Change(what, "update", job.workload)]
        if podgroup:
            set_podgroup_phase(job)
            out.append(Change(what, "update", job.podgroup))
        return out

    def _pending_update(self) -> list[Change]:
        job = self._take("queued", "inadmissible")
        if job is None:
            return []
        job.stage = "inadmissible"
        _pending(self.cluster, job, self.clock)
        self._put(job)
        return self._update("pending_update", job)

    def _admit(self) -> list[Change]:
        job = self._take("queued", "inadmissible", "evicted")
        if job is None:
            return []
        job.stage = "assembling"
        job.workload["status"].pop("requeueState", None)
        _admit(self.cluster, job, self.clock)
        _set_cond(job.workload, _cond("PodsReady", "False", "WaitForStart", "Not all pods are ready or succeeded", self.clock))
        for cond in job.workload["status"]["conditions"]:
            if cond["type"] == "Evicted" and cond["status"] == "True":
                cond.update(status="False", reason="QuotaReserved", message="Previously: " + cond["message"])
        self._put(job)
        return self._update("admit", job, podgroup=True)

    def _ready(self) -> list[Change]:
        job = self._take("assembling", "admission_checks")
        if job is None:
            return []
        if job.stage == "admission_checks":
            job.workload["status"]["admissionChecks"][0].update(state="Ready", message="Provisioned", lastTransitionTime=_ts(self.clock))
            _set_cond(job.workload, _cond("Admitted", "True", "Admitted", "The workload is admitted", self.clock))
            job.stage = "assembling"
            self._put(job)
            return self._update("ready", job)
        job.stage = "running"
        _set_cond(job.workload, _cond("PodsReady", "True", "Started", "All pods reached readiness and the workload is running", self.clock))
        self._put(job)
        return self._update("ready", job, podgroup=True)

    def _evict(self) -> list[Change]:
        job = self._take("running", "assembling")
        if job is None:
            return []
        _evict(self.cluster, job, self.clock)
        self._put(job)
        return self._update("evict", job, podgroup=True)

    def _finish(self) -> list[Change]:
        job = self._take("running")
        if job is None:
            return []
        _finish(self.cluster, job, self.clock)
        self._put(job)
        return self._update("finish", job, podgroup=True)

    def _delete(self) -> list[Change]:
        job = self._take("finished")
        if job is None:
            return []
        self.live -= 1
        return [Change("delete", "delete", job.workload), Change("delete", "delete", job.podgroup)]

    def _create(self) -> list[Change]:
        if self.live >= self.target:
            return []
        self.live += 1
        job = new_job(self.cluster, "queued", created=self.clock)
        self._put(job)
        return [Change("create", "create", job.workload), Change("create", "create", job.podgroup)]

    def _podgroup(self) -> list[Change]:
        job = self._take("assembling", "running")
        if job is None:
            return []
        pg = job.podgroup
        if job.stage == "assembling":  # a pod more is bound
            status = pg["status"]
            status["running"] = min(job.pods, status.get("running", 0) + max(1, job.pods // 8))
            status["scheduled"] = status["running"]
        else:  # a pod restarts and comes back
            pg["status"]["running"] = max(0, job.pods - 1) if pg["status"]["running"] == job.pods else job.pods
        self._put(job)
        return [Change("podgroup", "update", pg)]
