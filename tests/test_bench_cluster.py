"""The benchmarks' cluster generator (bench/cluster.py) makes what the benchmarks claim it makes.

Every benchmark figure in the README rests on it: each Workload its own hosts, times and
messages, placed within one block, jobs of 1 to 512 pods, every PodGroup joined, a change
stream that the collector takes without a parse error.
"""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import orjson

from exporter.cluster.collector import build_collector
from exporter.exposition import Exposition
from exporter.health import InternalErrors, SourceHealth

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import HOST, SIZES, Churn, build_cluster, topology_assignment  # noqa: E402


def test_a_cluster_as_the_benchmarks_describe_it() -> None:
    cluster = build_cluster(1500, nodes=2048, seed=11, namespaces=60)
    expo = Exposition()
    store, handlers, gangs = build_collector(expo)
    healths = {name: SourceHealth(name, expo) for name in ("topologies", "nodes", "workloads", "podgroups_coscheduling")}
    for name, h in healths.items():
        handlers[name].health = h
    handlers["topologies"].replace([cluster.topology])
    handlers["nodes"].replace(orjson.loads(orjson.dumps(cluster.nodes)))
    handlers["workloads"].replace(orjson.loads(orjson.dumps(cluster.workloads)))
    handlers["podgroups_coscheduling"].replace(orjson.loads(orjson.dumps(cluster.podgroups)))
    assert all(h.parse_errors == 0 for h in healths.values())
    assert len(store.workloads) == 1500 and all(not w.problems for w in store.workloads.values())
    assert sum(1 for g in gangs.gangs.values() if g.workload is not None) == 1500, "every PodGroup joins its Workload"
    stages = Counter(j.stage for j in cluster.jobs)
    assert set(stages) >= {"finished", "running", "queued", "inadmissible", "assembling", "evicted", "deactivated"}
    # Own hosts, own times: nothing is a copy.
    placed = [j for j in cluster.jobs if j.placed]
    host_sets = {tuple(n.name for n in j.placed) for j in placed}
    assert len(host_sets) > 0.9 * len(placed)  # single hosts of a 2,048-node pool coincide now and then
    created = {w["metadata"]["creationTimestamp"] for w in cluster.workloads}
    assert len(created) > 0.95 * len(cluster.workloads)
    messages = {c["message"] for w in cluster.workloads for c in w["status"]["conditions"] if c["type"] == "QuotaReserved"}
    assert len(messages) > 200
    # Racks fill inside one block; sizes span 1 to 512 pods with a long tail around 16 hosts.
    assert all(len({n.block for n in j.placed}) == 1 for j in placed)
    pods = [j.pods for j in cluster.jobs]
    assert min(pods) == 1 and max(pods) <= 512 and 8 < cluster.hosts_per_workload() < 24
    assert Counter(j.hosts for j in cluster.jobs).most_common(1)[0][0] == SIZES[0]
    # Kueue's encoding expands back to the job's hosts in order (the store's placement agrees).
    job = max(placed, key=lambda j: j.hosts)
    wl = store.workload(job.namespace, job.workload["metadata"]["name"])
    assert [d.values[0] for a in wl.assignments for d in a.domains] == [n.name for n in job.placed]
    assert topology_assignment(job.placed, job.pods_per_host)["levels"] == [HOST]
    assert {dict(p)["rack"] for a in wl.last_assignments for p, _ in store.placement(wl, a)} == {n.rack for n in job.placed}
    # The collector's page of this cluster lints clean (a gauge named like a histogram's _count once did not).
    text = expo.render(False)
    assert b"gangscope_workload_requeues{" in text
    lint = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True)
    assert lint.returncode == 0, lint.stdout.decode()[:2000] + lint.stderr.decode()[:2000]


def test_the_change_stream_is_realistic_and_clean() -> None:
    cluster = build_cluster(800, nodes=1024, seed=5, namespaces=40)
    expo = Exposition()
    store, handlers, _ = build_collector(expo)
    health = SourceHealth("workloads", expo)
    handlers["workloads"].health = health
    handlers["nodes"].replace(orjson.loads(orjson.dumps(cluster.nodes)))
    handlers["workloads"].replace(orjson.loads(orjson.dumps(cluster.workloads)))
    handlers["podgroups_coscheduling"].replace(orjson.loads(orjson.dumps(cluster.podgroups)))
    churn = Churn(cluster, seed=9)
    verbs = {"create": "ADDED", "update": "MODIFIED", "delete": "DELETED"}
    route = {"Workload": handlers["workloads"], "PodGroup": handlers["podgroups_coscheduling"]}
    for _ in range(3000):
        for change in churn.next():
            route[change.obj["kind"]].apply(verbs[change.verb], orjson.loads(orjson.dumps(change.obj)))
    assert health.parse_errors == 0 and InternalErrors.of(expo).counts.get("workloads", 0) == 0
    assert set(churn.counts) == {"pending_update", "admit", "ready", "evict", "finish", "delete", "create", "podgroup"}
    live = sum(len(jobs) for jobs in churn.by_stage.values())
    assert live == len(store.workloads) == churn.live <= len(cluster.jobs) and churn.counts["create"] > 0
    stages = Counter(w.stage for w in store.workloads.values())
    assert stages["evicting"] + stages["queued"] + stages["inadmissible"] > 0 and stages["running"] > 0
