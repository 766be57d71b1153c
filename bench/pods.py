"""Benchmark: the collector's pod store at 100,000 watched pods (target: under 150 MiB).

Realistic pods, as the API server returns them: each on its own node, with its own name, uid,
times, IP, container statuses, environment, volumes and managedFields (about 4 KB of JSON each),
in gangs of 8 of every API (Coscheduling label, Volcano and KAI annotations, native
``spec.schedulingGroup``), with Kueue's podset label and workload annotation, half of them in
JobSets, some in LeaderWorkerSet groups. The LIST arrives as JSON pages of 500, decoded one at a
time and handed to the pod sources' handlers as the informer does (each pod through its Kueue
watch and its gang's watch: the overlap the store de-duplicates). The gang index and 12,500
PodGroups are attached, so every pod event re-judges its gang, as in the collector.

    .venv/bin/python bench/pods.py [--pods 100000] [--events 20000]
    PYTHONPATH=OTHER_TREE .venv/bin/python bench/pods.py   # the same input against another tree (before/after)

Reports: the LIST's time (the handlers' work apart from orjson's decoding), the store's memory (RSS after the sync minus RSS before it, the pages
freed; and the bytes tracemalloc counts in the store, with --tracemalloc, slower), and watch
events per second on one core: pod status changes (bound, running, ready) through the store and
the gang index, and changes the store drops as irrelevant (container restarts' counters, probes).
The garbage collector runs as in the collector (``tune_gc``, and the synced objects frozen before
the events, as ``settle_gc_after_first_sync`` does).
"""

from __future__ import annotations

import argparse
import gc
import os
import time
import tracemalloc
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
import psutil

from exporter.cluster.gangs import attach_gangs
from exporter.cluster.main import tune_gc
from exporter.cluster.pods import PodStore
from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition

GANG = 8
# This process's CPU time: the development machine is shared, and wall time there measures the
# neighbours as much as the store (the LIST and event figures are CPU seconds of one core).
_clock = time.process_time
BASE = datetime(2026, 8, 20, 10, 0, 0, tzinfo=UTC)
APIS = ("coscheduling", "volcano", "kai", "native")


def _ts(seconds: int) -> str:
    return (BASE + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(i: int, *, phase: str = "Running", rv: int = 1, restarts: int = 0) -> dict[str, Any]:
    g = i // GANG
    api = APIS[g % len(APIS)]
    ns = f"team-{g % 97}"
    job = f"{api}-train-{g}"
    name = f"{job}-worker-{i % GANG}-{(i * 2654435761) % 100000:05x}"
    node = f"ip-10-{(i >> 16) & 255}-{(i >> 8) & 255}-{i & 255}.us-west-2.compute.internal"
    uid = f"{i:08x}-{(i * 7) & 0xffff:04x}-4{(i * 13) & 0xfff:03x}-8{(i * 17) & 0xfff:03x}-{(i * 2654435761) & 0xffffffffffff:012x}"
    labels = {"kueue.x-k8s.io/podset": "worker", "batch.kubernetes.io/job-name": job,
              "batch.kubernetes.io/job-completion-index": str(i % GANG), "app.kubernetes.io/name": "trainer",
              "controller-uid": f"job-{g}", "job-name": job}
    annotations = {"kueue.x-k8s.io/workload": f"job-{job}-{g % 65536:04x}",
                   "kubectl.kubernetes.io/default-container": "trainer"}
    spec: dict[str, Any] = {}
    scheduler = "default-scheduler"
    if api == "coscheduling":
        labels["scheduling.x-k8s.io/pod-group"] = job
        scheduler = "scheduler-plugins-scheduler"
    elif api == "volcano":
        annotations["scheduling.k8s.io/group-name"] = job
        scheduler = "volcano"
    elif api == "kai":
        annotations["pod-group-name"] = job
        scheduler = "kai-scheduler"
    else:
        spec["schedulingGroup"] = {"podGroupName": job}
    if g % 2 == 0:
        labels.update({"jobset.sigs.k8s.io/jobset-name": job, "jobset.sigs.k8s.io/jobset-uid": f"js-{g}",
                       "jobset.sigs.k8s.io/replicatedjob-name": "worker", "jobset.sigs.k8s.io/job-index": "0"})
    elif g % 7 == 1:
        labels.update({"leaderworkerset.sigs.k8s.io/name": job, "leaderworkerset.sigs.k8s.io/group-index": str(g % 4),
                       "leaderworkerset.sigs.k8s.io/worker-index": str(i % GANG)})
        annotations["leaderworkerset.sigs.k8s.io/size"] = str(GANG)
    created = i % 86400
    running = phase == "Running"
    env = [{"name": "MASTER_ADDR", "value": f"{job}-worker-0.{job}"}, {"name": "WORLD_SIZE", "value": str(GANG)},
           {"name": "RANK", "value": str(i % GANG)}, {"name": "NCCL_DEBUG", "value": "WARN"},
           {"name": "POD_NAME", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}]
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name, "namespace": ns, "uid": uid, "resourceVersion": str(1_000_000 + i * 3 + rv),
            "creationTimestamp": _ts(created), "generateName": f"{job}-worker-{i % GANG}-", "labels": labels,
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-{g}",
                                 "controller": True, "blockOwnerDeletion": True}],
            "managedFields": [{"manager": "kube-controller-manager", "operation": "Update", "apiVersion": "v1",
                               "time": _ts(created), "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:metadata": {"f:labels": {k: {} for k in labels}}}},
                              {"manager": "kubelet", "operation": "Update", "apiVersion": "v1", "subresource": "status",
                               "time": _ts(created + 40), "fieldsType": "FieldsV1", "fieldsV1": {"f:status": {"f:phase": {}}}}],
        },
        "spec": {
            **spec, "schedulerName": scheduler, "nodeName": node, "restartPolicy": "Never", "serviceAccountName": "trainer",
            "priorityClassName": "training-high", "priority": 10000, "terminationGracePeriodSeconds": 30,
            "containers": [{
                "name": "trainer", "image": "registry.example.com/ml/trainer:2026.11", "command": ["torchrun"],
                "args": ["--nnodes", str(GANG), "--nproc-per-node", "8", "train.py", f"--run={job}"], "env": env,
                "resources": {"limits": {"nvidia.com/gpu": "8", "memory": "1500Gi"},
                              "requests": {"nvidia.com/gpu": "8", "cpu": "90", "memory": "1500Gi"}},
                "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}, {"name": "data", "mountPath": "/data"},
                                 {"name": "kube-api-access", "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                                  "readOnly": True}],
                "imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"}],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}},
                        {"name": "data", "persistentVolumeClaim": {"claimName": f"{job}-data"}},
                        {"name": "kube-api-access", "projected": {"sources": [{"serviceAccountToken": {"path": "token"}}]}}],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        },
        "status": {
            "phase": phase, "hostIP": f"10.{(i >> 8) & 255}.{i & 255}.1", "podIP": f"100.{(i >> 16) & 255}.{(i >> 8) & 255}.{i & 255}",
            "startTime": _ts(created + 5), "qosClass": "Burstable",
            "conditions": [{"type": t, "status": "True" if running or t == "PodScheduled" else "False",
                            "lastTransitionTime": _ts(created + 10)}
                           for t in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady", "PodScheduled")],
            "containerStatuses": [{"name": "trainer", "ready": running, "restartCount": restarts, "started": running,
                                   "image": "registry.example.com/ml/trainer:2026.11",
                                   "imageID": f"registry.example.com/ml/trainer@sha256:{(i * 31) % 10**12:064x}",
                                   "containerID": f"containerd://{(i * 2654435761) % 10**15:064x}",
                                   "state": {"running": {"startedAt": _ts(created + 30)}} if running else
                                   {"waiting": {"reason": "ContainerCreating"}}}],
        },
    }


def podgroup(g: int) -> tuple[str, dict[str, Any]]:
    api = APIS[g % len(APIS)]
    ns, job = f"team-{g % 97}", f"{api}-train-{g}"
    meta = {"name": job, "namespace": ns, "uid": f"pg-{g}", "creationTimestamp": _ts(g % 86400),
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": f"job-{g}", "controller": True}]}
    if api == "coscheduling":
        return "podgroups_coscheduling", {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup", "metadata": meta,
                                          "spec": {"minMember": GANG}, "status": {"phase": "Running", "running": GANG}}
    if api == "volcano":
        return "podgroups_volcano", {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup", "metadata": meta,
                                     "spec": {"minMember": GANG, "queue": "default"}, "status": {"phase": "Running", "running": GANG}}
    if api == "kai":
        return "podgroups_kai", {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup", "metadata": meta,
                                 "spec": {"minMember": GANG, "queue": "team"}, "status": {}}
    return "podgroups_native", {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup", "metadata": meta,
                                "spec": {"schedulingPolicy": {"gang": {"minCount": GANG}}}, "status": {}}


WATCH = {"coscheduling": "pods_coscheduling", "volcano": "pods_volcano", "kai": "pods_kai", "native": "pods_kueue"}


def rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pods", type=int, default=100_000)
    ap.add_argument("--events", type=int, default=20_000)
    ap.add_argument("--tracemalloc", action="store_true", help="also count the store's bytes with tracemalloc (slower)")
    args = ap.parse_args()
    n = args.pods
    tune_gc()  # the collector's garbage collector settings, and its freeze after the first sync (below)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})  # one core
    expo = Exposition()
    store = ClusterStore(expo)
    pods = PodStore()
    gangs = attach_gangs(store, clock=lambda: 1787220000.0, pods=pods)
    gang_handlers = gangs.handlers()
    for g in range((n + GANG - 1) // GANG):
        source, obj = podgroup(g)
        gang_handlers[source].apply("ADDED", obj)
    handlers = pods.handlers()
    # The API server's pages, encoded as it sends them; each source's own LIST.
    pages: dict[str, list[bytes]] = {s: [] for s in (*WATCH.values(), "pods_jobset")}
    for source in pages:
        batch: list[dict[str, Any]] = []
        for i in range(n):
            api = APIS[(i // GANG) % len(APIS)]
            if source in (WATCH[api], "pods_kueue") or (source == "pods_jobset" and (i // GANG) % 2 == 0):
                batch.append(pod(i))
                if len(batch) == 500:
                    pages[source].append(orjson.dumps({"items": batch}))
                    batch = []
        if batch:
            pages[source].append(orjson.dumps({"items": batch}))
    delivered = sum(len(orjson.loads(p)["items"]) for ps in pages.values() for p in ps)
    json_mb = sum(len(p) for ps in pages.values() for p in ps) / 1e6
    gc.collect()
    gc.freeze()
    if args.tracemalloc:
        tracemalloc.start()
    before = rss_mib()
    t_decode = t_list = 0.0
    for source, source_pages in pages.items():
        h = handlers[source]
        t = _clock()
        h.begin_replace()
        t_list += _clock() - t
        for raw in source_pages:
            t = _clock()
            items = orjson.loads(raw)["items"]
            t_decode += _clock() - t
            t = _clock()
            for k in range(0, len(items), 50):  # the informer's hand-off slices
                h.add_page(items[k:k + 50])
            t_list += _clock() - t
            del items
        t = _clock()
        h.end_replace(True)  # the end of each LIST re-judges every gang (its pods now count, even none)
        t_list += _clock() - t
    gc.collect()
    held = rss_mib() - before
    traced = tracemalloc.get_traced_memory()[0] / 2**20 if args.tracemalloc else None
    if args.tracemalloc:
        tracemalloc.stop()
    assert len(pods.pods) == n, len(pods.pods)
    gc.freeze()  # as settle_gc_after_first_sync does: the events' collections do not rescan the synced pods
    assembled = sum(1 for g in gangs.gangs.values() if g.stage == "assembled")

    # Watch events: a gang's pods fall back to Pending and come back (its gang re-judged each time),
    # and status noise the store drops (a restart counter, a probe's transition time).
    kueue = handlers["pods_kueue"]
    changes = [pod(i % n, phase="Pending" if (i // n) % 2 == 0 else "Running", rv=2 + i // n) for i in range(args.events)]
    t = _clock()
    for obj in changes:
        kueue.apply("MODIFIED", obj)
    t_ev = _clock() - t
    untouched = range(args.events, args.events + args.events)  # still Running: only the restart counter moves
    noise = [pod(i % n, restarts=1 + i // n, rv=10 + i // n) for i in untouched]
    t = _clock()
    for obj in noise:
        kueue.apply("MODIFIED", obj)
    t_noise = _clock() - t

    print(f"pods                    {n:,} on {len(pods.gpus_bound_by_node()):,} nodes, in {len(gangs.gangs):,} gangs "
          f"({assembled:,} assembled); {delivered:,} deliveries from 5 watches ({json_mb:.0f} MB of JSON)")
    print(f"LIST                    {t_list:.2f} s to parse, store and re-judge the gangs ({delivered / t_list:,.0f} pods/s), "
          f"plus {t_decode:.2f} s of orjson decoding (the floor)")
    print(f"pod store memory        {held:.1f} MiB RSS growth ({held * 2**20 / n:,.0f} B per pod; target under 150 MiB)"
          + (f"; tracemalloc {traced:.1f} MiB" if traced is not None else ""))
    print(f"pod status event        {t_ev / len(changes) * 1e6:.0f} us -> {len(changes) / t_ev:,.0f} events/s "
          "(parse, store, gang re-judged and re-rendered)")
    print(f"irrelevant pod event    {t_noise / len(noise) * 1e6:.0f} us -> {len(noise) / t_noise:,.0f} events/s (parse, dropped)")


if __name__ == "__main__":
    main()
