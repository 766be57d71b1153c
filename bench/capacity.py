"""Benchmark: 5,000 realistic GPU Nodes and the capacity per topology domain.

Run: ``.venv/bin/python bench/capacity.py [--nodes 5000]``. Prints one table.

Each row set runs in a fresh child process, so its RSS is its own:

* **Nodes, metadata only**: what the collector kept before it read Node status (the Node LIST as
  PartialObjectMetadata: name and labels), for comparison;
* **Nodes, whole objects**: the same Nodes as the API server sends them (labels of GKE, GPU
  feature discovery and node feature discovery, annotations, managed fields, status with
  conditions, addresses, images, capacity and allocatable), each page decoded with orjson as the
  informer does and handed to the store, which keeps a trimmed record and renders the capacity
  of every domain (block, rack, host);
* **with Workloads**: the whole-Node cluster plus 20,000 admitted Workloads on 16 hosts each and
  2,000 waiting ones with topology requests (4 sizes x 2 levels), then the cost of the events
  that move the numbers: a Workload event that leaves its assignment alone, one that moves it to
  other hosts, a Node status update that changes nothing counted, a cordon, a relabel; each with
  the flush held back as the collector's timer holds it, and the one flush that renders a batch
  (dirty domains, fits of the waiting Workloads).

Nodes differ the way real ones do: own names, UIDs, IPs, boot IDs, timestamps, resource versions.
"""

from __future__ import annotations

import argparse
import gc
import multiprocessing as mp
from concurrent.futures import ProcessPoolExecutor
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson  # noqa: E402
import psutil  # noqa: E402
from collector import print_table  # noqa: E402

BLOCK, RACK, HOST = "cloud.provider.com/topology-block", "cloud.provider.com/topology-rack", "kubernetes.io/hostname"
PAGE = 500  # the informer's LIST limit
NODES_PER_RACK, RACKS_PER_BLOCK = 16, 16
T0 = 1785560000


def _ts(offset: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(T0 + offset))


def node_name(i: int) -> str:
    return f"gke-ml-a3mega-pool-{i // 64}-5d2f7a1c-{i % 64:04d}"


def gpu_node(i: int) -> dict[str, Any]:
    """One GPU Node as a GKE A3 node with the GPU operator prints it (see tests/fixtures/nodes)."""
    name = node_name(i)
    rack, block = i // NODES_PER_RACK, i // (NODES_PER_RACK * RACKS_PER_BLOCK)
    labels = {
        "beta.kubernetes.io/arch": "amd64", "beta.kubernetes.io/instance-type": "a3-megagpu-8g",
        "beta.kubernetes.io/os": "linux", "cloud.google.com/gke-accelerator": "nvidia-h100-mega-80gb",
        "cloud.google.com/gke-boot-disk": "pd-ssd", "cloud.google.com/gke-container-runtime": "containerd",
        "cloud.google.com/gke-cpu-scaling-level": "208", "cloud.google.com/gke-gpu": "true",
        "cloud.google.com/gke-logging-variant": "DEFAULT", "cloud.google.com/gke-max-pods-per-node": "110",
        "cloud.google.com/gke-nodepool": f"a3mega-pool-{i // 64}", "cloud.google.com/gke-os-distribution": "cos",
        "cloud.google.com/gke-provisioning": "reservation", "cloud.google.com/machine-family": "a3",
        "cloud.google.com/private-node": "true", "failure-domain.beta.kubernetes.io/region": "us-central1",
        "failure-domain.beta.kubernetes.io/zone": "us-central1-a", "kubernetes.io/arch": "amd64",
        HOST: name, "kubernetes.io/os": "linux", "node.kubernetes.io/instance-type": "a3-megagpu-8g",
        "topology.kubernetes.io/region": "us-central1", "topology.kubernetes.io/zone": "us-central1-a",
        BLOCK: f"block-{block}", RACK: f"rack-{rack}",
        "nvidia.com/cuda.driver.major": "550", "nvidia.com/cuda.driver.minor": "90", "nvidia.com/cuda.driver.rev": "07",
        "nvidia.com/cuda.runtime.major": "12", "nvidia.com/cuda.runtime.minor": "4",
        "nvidia.com/gfd.timestamp": str(T0 + i * 7), "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0", "nvidia.com/gpu.count": "8", "nvidia.com/gpu.deploy.container-toolkit": "true",
        "nvidia.com/gpu.deploy.dcgm": "true", "nvidia.com/gpu.deploy.dcgm-exporter": "true",
        "nvidia.com/gpu.deploy.device-plugin": "true", "nvidia.com/gpu.deploy.driver": "pre-installed",
        "nvidia.com/gpu.deploy.gpu-feature-discovery": "true", "nvidia.com/gpu.deploy.node-status-exporter": "true",
        "nvidia.com/gpu.deploy.operator-validator": "true", "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "a3-megagpu-8g", "nvidia.com/gpu.memory": "81559", "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true", "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1", "nvidia.com/gpu.sharing-strategy": "none", "nvidia.com/mig.capable": "false",
        "nvidia.com/mps.capable": "false",
        **{f"feature.node.kubernetes.io/cpu-cpuid.{f}": "true" for f in (
            "ADX", "AESNI", "AVX", "AVX2", "AVX512BW", "AVX512CD", "AVX512DQ", "AVX512F", "AVX512VL", "AVX512VNNI",
            "CMPXCHG8", "FMA3", "FXSR", "GFNI", "SHA", "VAES", "VPCLMULQDQ", "X87", "XSAVE", "AMXBF16")},
        "feature.node.kubernetes.io/cpu-model.family": "6", "feature.node.kubernetes.io/cpu-model.id": "143",
        "feature.node.kubernetes.io/cpu-model.vendor_id": "Intel", "feature.node.kubernetes.io/kernel-version.full": "6.6.93",
        "feature.node.kubernetes.io/pci-10de.present": "true", "feature.node.kubernetes.io/system-os_release.ID": "cos",
    }
    ip = f"10.{128 + i // 65536}.{(i // 256) % 256}.{i % 256}"
    resources = {"cpu": "208", "ephemeral-storage": "98831908Ki", "hugepages-1Gi": "0", "hugepages-2Mi": "0",
                 "memory": "1891465868Ki", "nvidia.com/gpu": "8", "pods": "110"}
    conditions = [{"type": t, "status": "False", "reason": r, "message": m, "lastHeartbeatTime": _ts(86400 + i),
                   "lastTransitionTime": _ts(i)} for t, r, m in (
        ("MemoryPressure", "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
        ("DiskPressure", "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
        ("PIDPressure", "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
        ("FrequentContainerdRestart", "NoFrequentContainerdRestart", "containerd is functioning properly"))]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "kubelet is posting ready status",
                       "lastHeartbeatTime": _ts(86400 + i), "lastTransitionTime": _ts(i + 21)})
    images = [{"names": [f"us-docker.pkg.dev/ml-prod/images/{img}@sha256:{(i * 7919 + k * 104729) % 16**12:012x}{'0' * 52}",
                         f"us-docker.pkg.dev/ml-prod/images/{img}:2026.08.{k}"], "sizeBytes": 1_000_000 * (k + 1) * 37}
              for k, img in enumerate(("trainer", "llama-train", "nccl-tests", "dcgm-exporter", "gpu-operator-validator",
                                       "k8s-device-plugin", "gpu-feature-discovery", "node-feature-discovery",
                                       "fluent-bit", "gke-metrics-agent", "kube-proxy", "pause", "netd",
                                       "pd-csi-driver", "gangscope", "tcpxo-daemon", "nri-device-injector",
                                       "rxdm", "gcsfuse-sidecar", "datadog-agent"))]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": f"2b9d0c6e-8f2a-4b4e-9b1f-{i:012d}", "resourceVersion": str(48_000_000 + i),
            "creationTimestamp": _ts(i), "labels": labels,
            "annotations": {
                "container.googleapis.com/instance_id": str(5_188_841_224_021_496_061 + i),
                "csi.volume.kubernetes.io/nodeid": f'{{"pd.csi.storage.gke.io":"projects/ml-prod/zones/us-central1-a/instances/{name}"}}',
                "node.alpha.kubernetes.io/ttl": "0", "node.gke.io/last-applied-node-labels": ",".join(list(labels)[:12]),
                "volumes.kubernetes.io/controller-managed-attach-detach": "true",
            },
            "managedFields": [
                {"manager": m, "operation": "Update", "apiVersion": "v1", "time": _ts(86400 + i), "fieldsType": "FieldsV1",
                 "fieldsV1": {"f:status": {"f:conditions": {f'k:{{"type":"{c}"}}': {"f:lastHeartbeatTime": {}}
                                                            for c in ("Ready", "MemoryPressure", "DiskPressure")}}}}
                for m in ("kubelet", "kube-controller-manager", "node-problem-detector", "gpu-feature-discovery")],
        },
        "spec": {"podCIDR": f"10.64.{i % 256}.0/24", "podCIDRs": [f"10.64.{i % 256}.0/24"],
                 "providerID": f"gce://ml-prod/us-central1-a/{name}",
                 "taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]},
        "status": {
            "addresses": [{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": name}],
            "allocatable": {**resources, "cpu": "207830m", "memory": "1871413900Ki", "ephemeral-storage": "47060071478"},
            "capacity": resources, "conditions": conditions, "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
            "images": images,
            "nodeInfo": {"architecture": "amd64", "bootID": f"0f4b2c1e-7a6d-4e8b-a1c9-{i:012x}",
                         "containerRuntimeVersion": "containerd://1.7.27", "kernelVersion": "6.6.93+",
                         "kubeProxyVersion": "v1.33.4-gke.1245000", "kubeletVersion": "v1.33.4-gke.1245000",
                         "machineID": f"{i:032x}", "operatingSystem": "linux", "osImage": "Container-Optimized OS from Google",
                         "systemUUID": f"4f0c9a2e-6b8d-41f3-a5c7-{i:012x}"},
        },
    }


def metadata_only(node: dict[str, Any]) -> dict[str, Any]:
    """The same Node as PartialObjectMetadata (what a metadata-only LIST returns)."""
    return {"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": node["metadata"]}


def workload(i: int, n_nodes: int, hosts: list[str] | None = None, waiting: bool = False) -> dict[str, Any]:
    """An admitted 16 x 8-GPU Workload, or a waiting one asking for 4 pods of 1, 2, 4 or 8 GPUs in a rack or a block."""
    gpus = 8 if not waiting else (1, 2, 4, 8)[i % 4]
    obj: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": f"job-train-{i:05d}-f48ba", "namespace": f"team-{i % 20}", "uid": f"wl-{i}",
                     "resourceVersion": str(i), "creationTimestamp": _ts(i)},
        "spec": {"active": True, "queueName": "queue", "podSets": [{
            "name": "main", "count": 4 if waiting else 16,
            "topologyRequest": {"required": (RACK, BLOCK)[(i // 4) % 2]},
            "template": {"spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]},
        "status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota", "message": "",
                                   "lastTransitionTime": _ts(i)}]},
    }
    if not waiting:
        first = (i * 16) % (n_nodes - 16)
        hosts = hosts or [node_name(first + k) for k in range(16)]
        prefix = "gke-ml-a3mega-pool-"
        obj["status"] = {
            "admission": {"clusterQueue": "gpu-cq", "podSetAssignments": [{
                "name": "main", "count": 16, "flavors": {"nvidia.com/gpu": "h100-tas"},
                "topologyAssignment": {"levels": [HOST], "slices": [{
                    "domainCount": len(hosts), "podCounts": {"universal": 1},
                    "valuesPerLevel": [{"individual": {"prefix": prefix, "roots": [h[len(prefix):] for h in hosts]}}]}]}}]},
            "conditions": [{"type": t, "status": "True", "reason": t, "message": "", "lastTransitionTime": _ts(i)}
                           for t in ("QuotaReserved", "Admitted")]}
    return obj


def rss() -> int:
    return psutil.Process().memory_info().rss


def _feed_list(handler: Any, payloads: list[bytes]) -> None:
    """A paged LIST as the informer hands it over: decode a page, hand it over, drop it."""
    handler.begin_replace()
    for payload in payloads:
        handler.add_page(orjson.loads(payload)["items"])
    handler.end_replace(True)


def _pages(objects: list[dict[str, Any]]) -> list[bytes]:
    return [orjson.dumps({"items": objects[k:k + PAGE]}) for k in range(0, len(objects), PAGE)]


def _nodes_only(pages: str, traced: bool) -> dict[str, float]:  # runs in a child process
    """Feed the LIST pages stored in ``pages`` (one JSON page per line, written by the parent, so
    no copy of the Nodes lives in this process before the clock) and measure what stays: RSS, or
    with ``traced`` the Python heap by tracemalloc (whose own bookkeeping inflates RSS, hence a run of its own)."""
    import tracemalloc

    from exporter.cluster.main import tune_gc
    from exporter.cluster.store import ClusterStore
    from exporter.exposition import Exposition

    tune_gc()
    topo = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
            "spec": {"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}}
    expo = Exposition()
    store = ClusterStore(expo)
    handlers = store.handlers()
    handlers["topologies"].replace([topo])
    gc.collect()
    before = rss()
    if traced:
        tracemalloc.start()
    t = time.perf_counter()
    handler = handlers["nodes"]
    handler.begin_replace()
    size = peak = 0
    with open(pages, "rb") as f:
        for line in f:
            size += len(line)
            handler.add_page(orjson.loads(line)["items"])
            del line
            peak = max(peak, rss())
    handler.end_replace(True)
    took = time.perf_counter() - t
    gc.collect()
    heap = tracemalloc.get_traced_memory()[0] if traced else 0
    tracemalloc.stop()
    return {"payload": size, "sync": took, "rss": rss() - before, "peak": peak - before, "heap": heap,
               "series": sum(expo.series_count(f.name) for f in expo.families if f.name.startswith("gangscope_domain")),
               # (run against a checkout without the capacity module, this measures its Node records alone)
            "hosts": len(store.capacity.hosts) if hasattr(store, "capacity") else 0}


def _with_workloads(n: int, n_workloads: int, n_waiting: int, events: int) -> dict[str, float]:  # runs in a child process
    from exporter.cluster.main import tune_gc
    from exporter.cluster.store import ClusterStore
    from exporter.exposition import Exposition

    tune_gc()
    expo = Exposition()
    store = ClusterStore(expo)
    h = store.handlers()
    h["topologies"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
                              "spec": {"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}}])
    h["resourceflavors"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                   "metadata": {"name": "h100-tas"}, "spec": {"topologyName": "t"}}])
    _feed_list(h["nodes"], _pages([gpu_node(i) for i in range(n)]))
    wls = [workload(i, n) for i in range(n_workloads)] + [workload(n_workloads + i, n, waiting=True) for i in range(n_waiting)]
    t = time.perf_counter()
    h["workloads"].replace(wls)
    sync = time.perf_counter() - t
    del wls
    gc.collect()
    out: dict[str, float] = {"sync": sync, "rss": rss()}
    cap = store.capacity

    def rate(objs: list[tuple[str, dict[str, Any]]], handler: Any) -> tuple[float, float]:
        """Per-event cost with the flush held back, as the collector's timer holds it, and the one
        flush that renders them all afterwards."""
        with cap.deferred():
            t = time.perf_counter()
            for kind, obj in objs:
                handler.apply(kind, obj)
            each = (time.perf_counter() - t) / len(objs)
            t = time.perf_counter()
        return each, time.perf_counter() - t  # the second: the flush as the block ends

    out["event_same"], out["flush_same"] = rate([("MODIFIED", workload(i % n_workloads, n)) for i in range(events)],
                                                h["workloads"])
    moved = [("MODIFIED", workload(i % n_workloads, n, hosts=[node_name((i * 37 + k * 5) % n) for k in range(16)]))
             for i in range(events)]
    out["event_moved"], out["flush_moved"] = rate(moved, h["workloads"])
    few = [("MODIFIED", workload(i, n, hosts=[node_name((i * 53 + k * 7) % n) for k in range(16)])) for i in range(10)]
    _, out["flush_few"] = rate(few, h["workloads"])
    heartbeat = []
    for i in range(events):
        obj = gpu_node(i % n)
        obj["status"]["conditions"][-1]["lastHeartbeatTime"] = _ts(90000 + i)
        heartbeat.append(("MODIFIED", obj))
    out["event_node_same"], out["flush_node_same"] = rate(heartbeat, h["nodes"])
    cordons = []
    for i in range(10):
        obj = gpu_node(i)
        obj["spec"]["unschedulable"] = True
        cordons.append(("MODIFIED", obj))
    out["event_cordon"], out["flush_cordon"] = rate(cordons, h["nodes"])
    relabelled = []
    for i in range(10):
        obj = gpu_node(i)
        obj["metadata"]["labels"][RACK] = "rack-moved"
        relabelled.append(("MODIFIED", obj))
    _, out["flush_relabel"] = rate(relabelled, h["nodes"])
    t = time.perf_counter()
    expo.render(False)
    out["render"] = time.perf_counter() - t
    out["series"] = sum(expo.series_count(f.name) for f in expo.families if f.name.startswith(
        ("gangscope_domain", "gangscope_workload_fit", "gangscope_fragmentation", "gangscope_domains")))
    out["waiting"] = expo.series_count("gangscope_workload_fit") // 2  # two scopes per waiting Workload
    return out


def _fit_cost(n: int, n_workloads: int, n_waiting: int, repeat: int) -> dict[str, float]:  # runs in a child process
    """The fit's cost: a full recompute (a Node cordoned: every waiting Workload's fit asked again)
    and a single Workload's change (one waiting Workload's request changed, to a request shape
    never asked before, or back to one the fits already hold), each the flush that
    renders it, the best of ``repeat``. The waiting Workloads' ClusterQueue is known (a LocalQueue
    and a ClusterQueue record) and their flavor tolerates the Nodes' GPU taint."""
    from exporter.cluster.main import tune_gc
    from exporter.cluster.store import ClusterStore
    from exporter.exposition import Exposition

    tune_gc()
    expo = Exposition()
    store = ClusterStore(expo)
    h = store.handlers()
    h["clusterqueues"].replace([{  # an active ClusterQueue of the flavor, as the ClusterQueue watch reads it
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "gpu-cq"},
        "spec": {"resourceGroups": [{"coveredResources": ["nvidia.com/gpu"], "flavors": [
            {"name": "h100-tas", "resources": [{"name": "nvidia.com/gpu", "nominalQuota": "1000000"}]}]}]},
        "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Ready", "message": "Can admit new workloads",
                                   "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}])
    h["topologies"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"},
                              "spec": {"levels": [{"nodeLabel": k} for k in (BLOCK, RACK, HOST)]}}])
    h["resourceflavors"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
                                   "metadata": {"name": "h100-tas"},
                                   "spec": {"topologyName": "t", "tolerations": [
                                       {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]}}])
    h["localqueues"].replace([{"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                               "metadata": {"name": "queue", "namespace": f"team-{t}"}, "spec": {"clusterQueue": "gpu-cq"}}
                              for t in range(20)])
    _feed_list(h["nodes"], _pages([gpu_node(i) for i in range(n)]))
    h["workloads"].replace([workload(i, n) for i in range(n_workloads)]
                           + [workload(n_workloads + i, n, waiting=True) for i in range(n_waiting)])
    cap = store.capacity
    full: list[float] = []
    single_new: list[float] = []
    single_seen: list[float] = []
    relabel: list[float] = []
    for r in range(repeat):
        moved = gpu_node(r)
        moved["metadata"]["labels"][RACK] = f"rack-moved-{r}"
        with cap.deferred():  # capacity itself changed: candidate nodes rebuilt
            h["nodes"].apply("MODIFIED", moved)
            t = time.perf_counter()
        relabel.append(time.perf_counter() - t)
        obj = gpu_node(r)
        obj["spec"]["unschedulable"] = r % 2 == 0
        with cap.deferred():  # the flush held back, as the collector's timer holds it; it runs as the block ends
            h["nodes"].apply("MODIFIED", obj)
            t = time.perf_counter()
        full.append(time.perf_counter() - t)
        wl = workload(n_workloads + r, n, waiting=True)
        for count, times in ((5 + r, single_new), (4, single_seen)):  # 5 + r pods: a shape no fit holds yet
            wl["spec"]["podSets"][0]["count"] = count
            with cap.deferred():
                h["workloads"].apply("MODIFIED", wl)
                t = time.perf_counter()
            times.append(time.perf_counter() - t)
    return {"full": min(full), "single_new": min(single_new), "single_seen": min(single_seen), "relabel": min(relabel),
            "fits": expo.series_count("gangscope_workload_fit") // 2}


def _in_child(target: Any, *args: Any) -> Any:
    """``target(*args)`` in a fresh (spawned) process: its RSS is that run's alone."""
    with ProcessPoolExecutor(1, mp_context=mp.get_context("spawn")) as pool:
        return pool.submit(target, *args).result()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nodes", type=int, default=5_000)
    p.add_argument("--workloads", type=int, default=20_000)
    p.add_argument("--waiting", type=int, default=2_000)
    p.add_argument("--events", type=int, default=5_000)
    p.add_argument("--nodes-only", action="store_true", help="only the Node rows (for a checkout without the capacity module)")
    p.add_argument("--fit-only", action="store_true", help="only the fit's cost (a full recompute, a single Workload's change)")
    a = p.parse_args()
    if a.fit_only:
        fit = _in_child(_fit_cost, a.nodes, a.workloads, a.waiting, 5)
        print_table([
            ("cluster", f"{a.nodes} Nodes, {a.workloads} admitted Workloads, {a.waiting} waiting ({fit['fits']} with a fit series)"),
            ("flush after a Node cordoned (every fit asked again)", f"{fit['full'] * 1e3:.2f} ms"),
            ("flush after a Node moved to another rack", f"{fit['relabel'] * 1e3:.2f} ms"),
            ("flush after a single waiting Workload's change, a new request shape", f"{fit['single_new'] * 1e3:.2f} ms"),
            ("... back to a request shape the fits hold", f"{fit['single_seen'] * 1e3:.2f} ms"),
        ])
        return
    with tempfile.TemporaryDirectory() as tmp:
        nodes = [gpu_node(i) for i in range(a.nodes)]
        files = {}
        for name, objs in (("meta", [metadata_only(o) for o in nodes]), ("whole", nodes)):
            files[name] = str(Path(tmp) / f"{name}.jsonl")
            Path(files[name]).write_bytes(b"\n".join(_pages(objs)) + b"\n")
        del nodes, objs
        meta = _in_child(_nodes_only, files["meta"], False)
        whole = _in_child(_nodes_only, files["whole"], False)
        meta["heap"] = _in_child(_nodes_only, files["meta"], True)["heap"]
        whole["heap"] = _in_child(_nodes_only, files["whole"], True)["heap"]
    wl = None if a.nodes_only else _in_child(_with_workloads, a.nodes, a.workloads, a.waiting, a.events)
    mib = 2**20
    rows = [
        ("nodes", f"{a.nodes} (8 GPUs each; {whole['hosts']} hosts, racks of {NODES_PER_RACK}, blocks of {RACKS_PER_BLOCK} racks)"),
        ("LIST payload, metadata only / whole", f"{meta['payload'] / 1e6:.1f} / {whole['payload'] / 1e6:.1f} MB"),
        ("Node sync, metadata only / whole", f"{meta['sync']:.2f} / {whole['sync']:.2f} s (decode, parse, capacity, render)"),
        ("RSS of the Nodes, metadata only", f"{meta['rss'] / mib:.1f} MiB ({meta['rss'] / a.nodes / 1024:.1f} KiB per node); "
                                            f"Python heap {meta['heap'] / mib:.1f} MiB"),
        ("RSS of the Nodes, whole + capacity", f"{whole['rss'] / mib:.1f} MiB ({whole['rss'] / a.nodes / 1024:.1f} KiB per node); "
                                               f"Python heap {whole['heap'] / mib:.1f} MiB, {whole['series']} domain series"),
        ("peak during the LIST, metadata / whole", f"{meta['peak'] / mib:.1f} / {whole['peak'] / mib:.1f} MiB above the start"),
    ]
    if wl is not None:
        rows += [
            ("Workloads", f"{a.workloads} admitted (16 hosts each) + {wl['waiting']} waiting with a topology request"),
            ("Workload sync with capacity", f"{wl['sync']:.2f} s; RSS {wl['rss'] / mib:.0f} MiB; {wl['series']} capacity series"),
            ("Workload event, same assignment", f"{wl['event_same'] * 1e6:.0f} us; the flush after {a.events} of them: "
                                                f"{wl['flush_same'] * 1e3:.1f} ms"),
            ("Workload event, moved to 16 other hosts", f"{wl['event_moved'] * 1e6:.0f} us; the flush after {a.events} of them: "
                                                        f"{wl['flush_moved'] * 1e3:.0f} ms"),
            ("flush after 10 Workloads moved", f"{wl['flush_few'] * 1e3:.1f} ms (their hosts' domains, every waiting fit)"),
            ("Node event, nothing counted changes", f"{wl['event_node_same'] * 1e6:.0f} us; the flush after {a.events}: "
                                                    f"{wl['flush_node_same'] * 1e3:.1f} ms"),
            ("flush after 10 Nodes cordoned", f"{wl['flush_cordon'] * 1e3:.1f} ms"),
            ("flush after 10 Nodes moved to another rack", f"{wl['flush_relabel'] * 1e3:.0f} ms (candidate nodes and fits rebuilt)"),
            ("render of the whole exposition", f"{wl['render'] * 1e3:.0f} ms"),
        ]
    print_table(rows)


if __name__ == "__main__":
    main()
