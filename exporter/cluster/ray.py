"""Ray on Kubernetes: KubeRay's RayJobs and RayClusters, joined to their Kueue Workload, so that
Ray's own series (placement groups, tasks) line up with the job's queue, gang and GPUs.

Why: a Ray job assembles its gang twice. Kueue admits the RayJob (or a standalone RayCluster) and
its pods start; then Ray itself places the job's placement groups on those pods' resources. A
placement group that stays PENDING is a gang that cannot assemble inside Ray, with every GPU of
the cluster allocated. Ray exports that state (``ray_placement_groups{State}`` from the GCS on the
head pod, ``ray_tasks{State}``) labelled with the Ray cluster only: KubeRay's PodMonitor copies the
pod label ``ray.io/cluster`` into ``ray_io_cluster`` (ray-project/kuberay feeaf72f
config/prometheus/podMonitor.yaml:22-24, :47-51 for the head). gangscope's
``gangscope_ray_cluster_info{namespace, raycluster, workload, rayjob, head_pod}`` is the missing join: the
recording rules (alerts/generate.py ``ray_rules``) carry Ray's series to the Workload with it.

Upstream shapes (ray-project/kuberay feeaf72f):

* RayJob ``ray.io/v1`` (ray-operator/apis/ray/v1/rayjob_types.go): ``status.rayClusterName``
  (:313), ``jobStatus`` PENDING/RUNNING/STOPPED/SUCCEEDED/FAILED (:18-23, Ray's own job status),
  ``jobDeploymentStatus`` Initializing/Running/Complete/Failed/ValidationFailed/Suspending/
  Suspended/Retrying/Waiting (:49-58, KubeRay's lifecycle of cluster and submission). The RayCluster
  it creates is owned by it and labelled ``ray.io/originated-from-cr-name`` (rayjob_controller.go
  constructRayClusterForRayJob).
* RayCluster ``ray.io/v1`` (ray-operator/apis/ray/v1/raycluster_types.go:568-639): ``state`` ready/
  suspended (deprecated for conditions, still written), ``readyWorkerReplicas`` (ready worker pods),
  ``availableWorkerReplicas`` (running), ``desiredWorkerReplicas`` (sum of replicas * numOfHosts),
  ``head.podName``.

Kueue (kubernetes-sigs/kueue ff69552e): a RayJob's Workload is owned by the RayJob
(pkg/controller/jobs/rayjob/rayjob_controller.go:44 gvk, :241 the owner index), finished when
``jobDeploymentStatus`` is Failed or Complete (:221-225), pods ready when the RayCluster's state is
ready (:228-230); a RayCluster that no RayJob owns gets its own Workload, never finished (:129-132
of pkg/controller/jobs/raycluster/raycluster_controller.go), pods ready when ``state`` is ready
(:134-136). So a RayCluster's Workload is found by its own uid, else by its controller owner's.

Series: per RayCluster ``gangscope_ray_cluster_info`` (1) and ``gangscope_ray_cluster_workers``
(3: ready, available, desired); per RayJob ``gangscope_job_info`` (1, kind RayJob, as for the other
job controllers) and ``gangscope_ray_job_status`` (1, the current statuses as labels: no series per
possible state).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..exposition import Family, label_pairs
from ..fields import Problems, as_dict, as_int, as_str, named_metadata
from .jobs import JOB_INFO
from .podgroups import owner_refs
from .record_handler import RecordHandler
from .store import ClusterStore
from .workloads import Workload

KINDS = {"rayjobs": "RayJob", "rayclusters": "RayCluster"}
WORKER_STATES = ("ready", "available", "desired")

RAY_CLUSTER_INFO = Family(
    "gangscope_ray_cluster_info", "info",
    "A KubeRay RayCluster, the RayJob that created it (rayjob; empty for a standalone cluster) and the Kueue Workload "
    "that admitted it (workload empty when none): join Ray's own series on (namespace, raycluster).",
    ("namespace", "raycluster", "workload", "rayjob", "head_pod"),
)
RAY_CLUSTER_WORKERS = Family(
    "gangscope_ray_cluster_workers", "gauge",
    "Worker pods of the RayCluster by state: ready (status.readyWorkerReplicas), available (running, "
    "status.availableWorkerReplicas), desired (status.desiredWorkerReplicas).",
    ("namespace", "raycluster", "state"),
)
RAY_JOB_STATUS = Family(
    "gangscope_ray_job_status", "gauge",
    "The RayJob's current Ray job status (job_status: PENDING, RUNNING, STOPPED, SUCCEEDED, FAILED, empty before "
    "submission) and KubeRay deployment status (deployment_status: Initializing, Running, Complete, Failed, ...); 1.",
    ("namespace", "name", "raycluster", "job_status", "deployment_status"),
)
FAMILIES = (RAY_CLUSTER_INFO, RAY_CLUSTER_WORKERS, RAY_JOB_STATUS)


@dataclass(slots=True)
class RayRecord:
    """A RayJob or a RayCluster, with the fields gangscope reads."""

    kind: str
    namespace: str
    name: str
    uid: str = ""
    owner_uids: tuple[str, ...] = ()
    owner_names: tuple[tuple[str, str], ...] = ()
    cluster: str = ""  # RayJob: status.rayClusterName; RayCluster: its own name
    job_status: str = ""
    deployment_status: str = ""
    head_pod: str = ""
    workers: tuple[int | None, int | None, int | None] = (None, None, None)  # ready, available, desired
    errors: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)


def _start(kind: str, obj: Any) -> tuple[RayRecord, dict, Problems]:
    problems: Problems = []
    meta = named_metadata(obj)
    uids, names = owner_refs(meta, problems)
    rec = RayRecord(kind, as_str(meta.get("namespace"), "metadata.namespace", problems), meta["name"],
                    as_str(meta.get("uid"), "metadata.uid", problems), uids, names)
    return rec, as_dict(obj.get("status"), "status", problems), problems


def parse_rayjob(obj: Any) -> RayRecord:
    rec, status, problems = _start("RayJob", obj)
    rec.cluster = as_str(status.get("rayClusterName"), "status.rayClusterName", problems)
    rec.job_status = as_str(status.get("jobStatus"), "status.jobStatus", problems)
    rec.deployment_status = as_str(status.get("jobDeploymentStatus"), "status.jobDeploymentStatus", problems)
    rec.errors = problems
    return rec


def parse_raycluster(obj: Any) -> RayRecord:
    rec, status, problems = _start("RayCluster", obj)
    rec.cluster = rec.name
    rec.head_pod = as_str(as_dict(status.get("head"), "status.head", problems).get("podName"), "status.head.podName", problems)
    rec.workers = tuple(as_int(status.get(k), f"status.{k}", problems)  # type: ignore[assignment]
                        for k in ("readyWorkerReplicas", "availableWorkerReplicas", "desiredWorkerReplicas"))
    rec.deployment_status = as_str(status.get("state"), "status.state", problems)
    rec.errors = problems
    return rec


PARSERS: dict[str, Callable[[Any], RayRecord]] = {"rayjobs": parse_rayjob, "rayclusters": parse_raycluster}


class RayIndex:
    """RayJob and RayCluster records, their Workloads, and their series."""

    def __init__(self, store: ClusterStore) -> None:
        self.store = store
        self.exposition = store.exposition
        self.exposition.register(*FAMILIES)
        self._skip = self.exposition.filtered((*FAMILIES, JOB_INFO))  # --metric-denylist
        self.records: dict[tuple[str, str, str], RayRecord] = {}
        self._handlers = {s: RecordHandler(s, KINDS[s], PARSERS[s], self.records, self.put, self.delete) for s in PARSERS}
        store.on_workload_change.append(self._workload_changed)

    def handlers(self) -> dict[str, RecordHandler[RayRecord]]:
        return dict(self._handlers)

    def put(self, rec: RayRecord) -> None:
        self.records[rec.key] = rec
        self._render(rec)

    def delete(self, key: tuple[str, str, str]) -> None:
        if self.records.pop(key, None) is not None:
            self.exposition.delete(("ray", *key))

    def workload_of(self, rec: RayRecord) -> Workload | None:
        """The Workload that admitted the RayJob or RayCluster: owned by the object itself, else
        (a RayJob's cluster) by its controller owner."""
        for uid in (rec.uid, *rec.owner_uids[:1]):
            found = sorted((wl for wl in self.store.workloads_by_owner_uid(uid) if wl.namespace == rec.namespace),
                           key=lambda wl: wl.key) if uid else []
            if found:
                return found[0]
        return None

    def clusters_of(self, wl: Workload) -> list[RayRecord]:
        """The RayClusters a Workload admitted (explain)."""
        return [r for r in self.records.values() if r.kind == "RayCluster" and r.namespace == wl.namespace
                and (wl2 := self.workload_of(r)) is not None and wl2.key == wl.key]

    def _workload_changed(self, key: tuple[str, str]) -> None:
        for rec in [r for r in self.records.values() if r.namespace == key[0]]:
            self._render(rec)

    def _render(self, rec: RayRecord) -> None:
        wl = self.workload_of(rec)
        workload = wl.name if wl is not None else ""
        skip = self._skip  # --metric-denylist: never formatted
        out: dict[Family, list[bytes]] = {}
        if rec.kind == "RayCluster":
            job = next((name for kind, name in rec.owner_names[:1] if kind == "RayJob"), "")
            if RAY_CLUSTER_INFO not in skip:
                out[RAY_CLUSTER_INFO] = [RAY_CLUSTER_INFO.line(
                    label_pairs(RAY_CLUSTER_INFO.labels, (rec.namespace, rec.name, workload, job, rec.head_pod)), 1)]
            if RAY_CLUSTER_WORKERS not in skip:
                lead = label_pairs(("namespace", "raycluster"), (rec.namespace, rec.name))
                out[RAY_CLUSTER_WORKERS] = [RAY_CLUSTER_WORKERS.line(lead, n, (state,))
                                            for state, n in zip(WORKER_STATES, rec.workers) if n is not None]
        else:
            if JOB_INFO not in skip:
                out[JOB_INFO] = [JOB_INFO.line(label_pairs(("namespace", "kind", "name"), rec.key), 1, (workload,))]
            if RAY_JOB_STATUS not in skip:
                out[RAY_JOB_STATUS] = [RAY_JOB_STATUS.line(label_pairs(RAY_JOB_STATUS.labels, (
                    rec.namespace, rec.name, rec.cluster, rec.job_status, rec.deployment_status)), 1)]
        self.exposition.set(("ray", *rec.key), out)
