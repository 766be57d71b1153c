"""Every Kueue object real clusters, Kueue's docs and its e2e/envtest runs printed (tests/fixtures/
kueue/real, provenance in its SOURCES.md) through ``gangscope snapshot`` and ``gangscope explain``,
and the statuses no real cluster printed as Kueue's tests and KEP-10852 write them
(tests/fixtures/kueue/kueue-written-v1beta2.yaml: typed reasons, a deactivation with its cause,
admission checks in Retry and Ready, a backoff).

The expectations are decoded by hand from each file, not produced by gangscope: which conditions
the object carries, what Kueue means by them (exporter/cluster/workload_state.py cites the Kueue
code), what its admission checks, evictions, requeue state and topology assignment say. Most of
these clusters ran Kueue without ``waitForPodsReady``: none of their admitted Workloads carries
``PodsReady``, and they must read as running.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import structlog

from exporter import explain, snapshot
from kueue_objects import FIXTURES, series

REAL = FIXTURES / "real"


@pytest.fixture(autouse=True)
def _reset_logging():
    yield
    structlog.reset_defaults()  # the commands configure structlog on a captured stream


@dataclass
class W:
    """What one Workload of a file must export."""

    stage: str
    pending: tuple[str, str] | None = None  # (reason, category) of gangscope_workload_pending_reason
    cluster_queue: str = ""
    gpus: float = 0
    checks: dict[str, str] = field(default_factory=dict)  # check -> state
    check_times: dict[str, int] = field(default_factory=dict)  # check -> lastTransitionTime, epoch seconds
    evictions: dict[tuple[str, str], int] = field(default_factory=dict)
    requeue: tuple[int, int] | None = None  # (count, requeueAt epoch seconds)
    pods: dict[tuple[str, tuple[tuple[str, str], ...]], int] = field(default_factory=dict)  # (podset, path) -> pods
    verdict: tuple[str, str | None] = ("running", None)  # explain's (status, layer)
    says: str = ""  # in explain's summary of the deciding layer
    requests: dict[tuple[str, str, str], float] = field(default_factory=dict)  # (podset, mode, level) -> value
    past: int | None = None  # status.accumulatedPastExecutionTimeSeconds (v1beta1: ...Exexcution...)


def host(*values: tuple[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(values)


ADMISSION = ("held", "admission")
EXPECTED: dict[str, dict[tuple[str, str], W]] = {
    # admitted, no PodsReady (no waitForPodsReady on that cluster): running
    "kueue-10306-e2e-jaxjob-admitted-v1beta2.yaml": {
        ("jax-e2e-wnm7m", "jaxjob-jax-simple-ed526"): W("running", cluster_queue="jax-cq-jax-e2e-wnm7m",
                                                         says="Kueue writes no PodsReady here")},
    # GPUs only in limits: 1 pod x 2
    "kueue-1726-gpu-admitted-v1beta1.yaml": {
        ("pgrunt", "job-ml-job-annotator-gt-webface-gpu-ff6d8"): W("running", cluster_queue="cq-all-resources", gpus=2)},
    # QuotaReserved, MultiKueue check Pending, no Admitted condition (Kueue of that time writes none)
    "kueue-1787-multikueue-check-pending-v1beta1.yaml": {
        ("default", "jobset-sleep-job-hjksj-83145"): W(
            "admission_checks", ("UnsatisfiedAdmissionChecks", "admission_check"), "cluster-queue",
            checks={"sample-multikueue": "Pending"}, check_times={"sample-multikueue": 1709546723}, verdict=ADMISSION,
            says="admission check sample-multikueue is Pending")},
    "kueue-2182-finished-no-template-v1beta1.yaml": {
        ("jobs", "job-2ubekr94fbs28fshqol59hnkvn5o75u9m04o7p1dlbfhgebldqh0-1553e"): W(
            "finished", verdict=("finished", None), says="finished (JobFinished)")},
    # ProvisioningRequest check Ready: admitted, running, 1 GPU
    "kueue-2213-dws-admitted-gpu-v1beta1.yaml": {
        ("kueue-dws", "pod-dws-pod-4e884"): W("running", cluster_queue="dws-cluster-queue", gpus=1,
                                              checks={"dws-prov": "Ready"}, check_times={"dws-prov": 1715954575})},
    # no status at all: not yet evaluated; the ClusterQueue comes from the printed LocalQueue
    "kueue-2391-unattempted-gpu-v1beta1.yaml": {
        ("rbenes", "job-ml-job-online-filtering-6-4f6f9f6-9a073"): W(
            "queued", ("PendingEvaluation", "evaluation"), "cq-all-resources", gpus=4, verdict=ADMISSION,
            says="queued in cq-all-resources (queue lq-all-resources): waiting to be evaluated")},
    "kueue-4224-admitted-cpu-v1beta1.yaml": {("default", "job-action"): W("running", cluster_queue="queue")},
    # Kueue 0.11's Pending with a TAS message; its LocalQueue was printed without a namespace (skipped)
    # its Topology's levels name the request's key: the label name rdma_local_block_id
    "kueue-5039-tas-inadmissible-v1beta1.yaml": {
        ("default", "job-tas-sample-preferredk2854-590e0"): W(
            # the legacy Pending with the placement's message: the placement verdict, as for TopologyPlacementFailed
            "inadmissible", ("Pending", "capacity"), verdict=("held", "placement"),
            says="Kueue: no topology placement: couldn't assign flavors to pod set main: no topology domains at level",
            requests={("main", "preferred", "rdma_local_block_id"): 1})},
    "kueue-5711-rayjob-admitted-v1beta1.yaml": {
        ("default", "rayjob-rayjob-sample-l58qx-52ced"): W("running", cluster_queue="cq-test")},
    "kueue-8101-tas-trainjob-v1beta2.yaml": {},  # printed without metadata.namespace: skipped, counted
    # deactivated: Evicted Deactivated, counted once in schedulingStats
    "kueue-8387-deactivated-v1beta2.yaml": {
        ("default", "pytorchjob-pytorch-simple-dfbe0"): W(
            "deactivated", ("Deactivated", "policy"), evictions={("Deactivated", ""): 1}, verdict=ADMISSION,
            says="deactivated (spec.active is false) (Deactivated: The workload is deactivated)", past=93)},
    # v1beta1 spells it accumulatedPastExexcutionTimeSeconds (apis/kueue/v1beta1/workload_types.go:418)
    "kueue-8387-finished-deactivated-v1beta1.yaml": {
        ("default", "pytorchjob-job-suspend-test-cea58"): W(
            "finished", evictions={("Deactivated", ""): 1}, verdict=("finished", None), says="finished (Succeeded)",
            past=103)},
    # conditions elided by the reporter: Kueue's own workload.Status calls that pending; the
    # assignment is still exported (hostname only: no Topology in the file)
    "kueue-8635-tas-mpijob-v1beta2.yaml": {
        ("e2e-tas-mpijob-k5zkv", "mpijob-ranks-mpi-podsetgroup-cf81d"): W(
            "queued", ("PendingEvaluation", "evaluation"), "cluster-queue", verdict=ADMISSION,
            pods={("launcher", host(("host", "kind-worker"))): 1, ("worker", host(("host", "kind-worker2"))): 1,
                  ("worker", host(("host", "kind-worker3"))): 1, ("worker", host(("host", "kind-worker4"))): 1},
            # no Topology in the file: the level is named by its node label key
            requests={("launcher", "required", "cloud.provider.com/topology-block"): 1,
                      ("worker", "required", "cloud.provider.com/topology-block"): 1})},
    "kueue-9383-etcd-finished-v1beta1.json": {
        ("default", "job-sample-job-mgkpr-2981a"): W("finished", cluster_queue="cluster-queue", verdict=("finished", None))},
    "kueue-9871-partial-no-name-v1beta2.yaml": {},  # metadata only, no name: skipped, counted
    "kueue-9896-envtest-admission-check-v1beta2.yaml": {
        ("core-465w2", "job-low-7a228"): W(
            "admission_checks", ("UnsatisfiedAdmissionChecks", "admission_check"), "cq", checks={"ac": "Pending"},
            check_times={"ac": 1773678524}, verdict=ADMISSION, says="admission check ac is Pending")},
    "kueue-9923-envtest-inadmissible-v1beta2.yaml": {
        ("tas-4n5z4", "limits-pnly"): W("inadmissible", ("Pending", "capacity"), verdict=ADMISSION,
                                        says="Workload no longer fits after processing another workload",
                                        requests={("worker", "preferred", "cloud.provider.com/topology-block"): 1})},
    # GKE's four TAS levels, all stored in the assignment; the worker set's empty domains (a Kueue bug) export nothing
    "kueue-frag-3494-gke-4level-domains-v1beta1.yaml": {
        ("frag", "frag-3494-mpijob"): W(
            "queued", ("PendingEvaluation", "evaluation"), "tas-cluster-queue", verdict=ADMISSION,
            pods={("launcher", host(("block", "e2382b4746ceeed246a7dc78750ae29f"),
                                    ("subblock", "9339de12ef53a7fad2d4b45ffadc8ac4"),
                                    ("gce_topology_host", "a38840ea668bd0baaea716ae16331daa"),
                                    ("host", "gke-tas-kueue-test-tas-node-pool-47374fa0-0czr"))): 1})},
    "kueue-frag-3887-kwok-hostname-domains-v1beta1.yaml": {
        ("frag", "frag-3887-pytorchjob-a"): W(
            "queued", ("PendingEvaluation", "evaluation"), "tas-cluster-queue", verdict=ADMISSION,
            pods={("master", host(("host", "kwok-node-10"))): 1, ("worker", host(("host", "kwok-node-10"))): 1,
                  ("worker", host(("host", "kwok-node-11"))): 1, ("worker", host(("host", "kwok-node-8"))): 1}),
        ("frag", "frag-3887-pytorchjob-b"): W(
            "queued", ("PendingEvaluation", "evaluation"), "tas-cluster-queue", verdict=ADMISSION,
            pods={("master", host(("host", "node-0201"))): 1,
                  **{("worker", host(("host", f"node-02{i:02d}"))): 1 for i in range(1, 16)}})},
    # Kueue 0.4: Admitted without QuotaReserved, PodsReady False with the old reason PodsReady
    "kueue-frag-707-podsready-json-v1beta1.yaml": {
        ("default", "job-sample-job-qmjh2-a999a"): W("assembling", cluster_queue="cluster-queue",
                                                     verdict=("held", "assembly"), says="admitted but pods not ready"),
        ("default", "job-sample-job-rmxz4-ed723"): W("assembling", cluster_queue="cluster-queue",
                                                     verdict=("held", "assembly"), says="admitted but pods not ready")},
    "kueue-frag-admission-checks.yaml": {
        ("frag", "frag-2121-dws"): W(
            "admission_checks", ("UnsatisfiedAdmissionChecks", "admission_check"), "dws-cluster-queue",
            checks={"dws-prov": "Pending"}, check_times={"dws-prov": 1714766519}, verdict=ADMISSION,
            says="admission check dws-prov is Pending"),
        # no conditions printed: pending per Kueue's Status; the Rejected check is named
        ("frag", "frag-2349-tekton"): W(
            "queued", ("PendingEvaluation", "evaluation"), "cluster-queue", checks={"sample-multikueue": "Rejected"},
            check_times={"sample-multikueue": 1751636654}, verdict=ADMISSION,
            says='admission check sample-multikueue is Rejected (No multikueue adapter found for owner kind '
                 '"tekton.dev/v1, Kind=PipelineRun")'),
        ("frag", "frag-6035-rayjob"): W(
            "evicting", None, "ml-infra", checks={"lilypad-gpu-capacity-check": "Pending"},
            check_times={"lilypad-gpu-capacity-check": 1752691273}, verdict=ADMISSION,
            says="being evicted (DeactivatedDueToAdmissionCheck): The workload is deactivated due to Admission check(s)"),
        ("frag", "frag-8089-dws-tas"): W(
            "evicting", None, "dws-cluster-queue", checks={"dws-prov": "Pending"}, check_times={"dws-prov": 1768914265},
            evictions={("AdmissionCheck", ""): 1}, verdict=ADMISSION,
            says="being evicted (AdmissionCheck): At least one admission check is false"),
        ("frag", "frag-5134-ac-retry"): W(
            "evicting", None, "admission-check-cq", checks={"check1": "Pending", "check2": "Pending"},
            check_times={"check1": 1745755920, "check2": 1745755920}, verdict=ADMISSION)},
    # the docs' kind cluster output; no Node in the file, so block and rack are unknown
    "kueue-frag-docs-tas-kind-v1beta2.yaml": {
        ("default", "frag-docs-tas-required"): W(
            "queued", ("PendingEvaluation", "evaluation"), "tas-cluster-queue", verdict=ADMISSION,
            pods={("main", host(("block", ""), ("rack", ""), ("host", "kind-worker"))): 7,
                  ("main", host(("block", ""), ("rack", ""), ("host", "kind-worker2"))): 3}),
        ("default", "frag-docs-tas-unconstrained"): W(
            "queued", ("PendingEvaluation", "evaluation"), "tas-cluster-queue", verdict=ADMISSION,
            pods={("main", host(("block", ""), ("rack", ""), ("host", "kind-worker2"))): 4,
                  ("main", host(("block", ""), ("rack", ""), ("host", "kind-worker8"))): 2})},
    "kueue-frag-docs-troubleshooting-v1beta2.yaml": {
        # "insufficient quota for ... in ClusterQueue": above the queue's quota, not a wait (v0.8.0:flavorassigner.go:603)
        ("my-namespace", "frag-docs-pending-quota"): W(
            "inadmissible", ("Pending", "configuration"), verdict=ADMISSION, says="cannot be admitted as configured"),
        ("my-namespace", "frag-docs-missing-localqueue"): W(
            "inadmissible", ("Inadmissible", "configuration"), verdict=ADMISSION, says="LocalQueue user-queue doesn't exist"),
        # preempted, then re-evaluated by the scheduler: its own quota message, not the eviction's
        ("my-namespace", "frag-docs-preempted"): W(
            "inadmissible", ("Pending", "capacity"), verdict=ADMISSION, says="9 more needed")},
    "kueue-frag-preemption-v1beta1.yaml": {
        ("frag", "frag-4935-wl1"): W(
            "evicting", None, checks={"check1": "Pending", "check2": "Pending"},
            check_times={"check1": 1745431148, "check2": 1745431148}, verdict=ADMISSION, says="being evicted (Preempted)"),
        ("frag", "frag-5648-slice"): W("finished", verdict=("finished", None))},
}
WRITTEN = "kueue-written-v1beta2.yaml"
KW = "kueue-written"


def typed(reason: str, category: str, stage: str = "inadmissible", says: str = "") -> W:
    return W(stage, (reason, category), gpus=8, verdict=ADMISSION, says=says or f"({reason})")


EXPECTED[WRITTEN] = {
    (KW, "typed-waiting-for-quota"): typed("WaitingForQuota", "capacity", says="waiting for capacity (WaitingForQuota)"),
    (KW, "typed-misconfigured"): typed("Misconfigured", "configuration", says="cannot be admitted as configured (this "
                                       "will not clear by itself) (Misconfigured): LocalQueue local-queue doesn't exist"),
    (KW, "typed-no-matching-flavor"): typed("NoMatchingFlavor", "configuration"),
    (KW, "typed-pending-evaluation"): typed("PendingEvaluation", "evaluation", "queued", says="waiting to be evaluated"),
    (KW, "typed-exceeds-max-quota"): typed("ExceedsMaxQuota", "configuration"),
    # the quota is there, the topology is not: placement holds it
    (KW, "typed-topology-placement-failed"): W("inadmissible", ("TopologyPlacementFailed", "capacity"), gpus=8,
                                               verdict=("held", "placement"), says="no topology domain fits"),
    (KW, "typed-waiting-for-preempted"): typed("WaitingForPreemptedWorkloads", "preemption", "preempting",
                                               says="waiting for preempted workloads to release their quota"),
    (KW, "typed-suspended"): typed("Suspended", "policy", "held", says="held by policy (Suspended): ClusterQueue cq is inactive"),
    (KW, "typed-on-hold"): typed("OnHold", "policy", "held"),
    (KW, "typed-admission-gated"): typed("AdmissionGated", "policy", "held"),
    (KW, "typed-waiting-for-pods-ready"): typed("WaitingForPodsReady", "policy", "held"),
    (KW, "deactivated-requeuing-limit"): W(
        "deactivated", ("Deactivated", "policy"), "q1", gpus=8, evictions={("Deactivated", "RequeuingLimitExceeded"): 1},
        verdict=ADMISSION, says="deactivated (spec.active is false) (DeactivatedDueToRequeuingLimitExceeded: The "
                                "workload is deactivated due to exceeding the maximum number of re-queuing retries)"),
    (KW, "checks-retry-and-ready"): W(
        "admission_checks", ("UnsatisfiedAdmissionChecks", "admission_check"), "q1", gpus=8,
        checks={"check-1": "Retry", "check-2": "Ready", "check-3": "Retry"},
        check_times={"check-1": 1787216520, "check-2": 1787216520, "check-3": 1787216520}, verdict=ADMISSION,
        says="admission check check-1 is Retry (infrastructure not prepared), retried 1x, next retry 2026-08-20T09:03:00Z"),
    (KW, "backoff-pods-ready-timeout"): W(
        "backoff", ("PodsReadyTimeout", "backoff"), gpus=8, evictions={("PodsReadyTimeout", "WaitForStart"): 1},
        requeue=(1, 4070908800), verdict=ADMISSION,
        says="in backoff after an eviction (PodsReadyTimeout): Exceeded the PodsReady timeout "
             "kueue-written/backoff-pods-ready-timeout; back in the queue at 2099-01-01T00:00:00Z; requeued 1x"),
}


def path_of(name: str) -> Path:
    return REAL / name if (REAL / name).exists() else FIXTURES / name


# Objects the collector reads but cannot use, counted as parse errors per source.
PARSE_ERRORS = {
    "kueue-8101-tas-trainjob-v1beta2.yaml": {"workloads": 1},
    "kueue-9871-partial-no-name-v1beta2.yaml": {"workloads": 1},
    "kueue-5039-tas-inadmissible-v1beta1.yaml": {"localqueues": 1},
}


def test_every_kueue_file_is_covered() -> None:
    assert sorted(p.name for p in REAL.iterdir() if p.name.startswith("kueue-")) == sorted(
        [*(n for n in EXPECTED if n != WRITTEN), "kueue-4861-topology-without-spec.yaml", "kueue-707-clusterqueue-v1beta1.yaml"])


def run_snapshot(capfdbinary: pytest.CaptureFixture[bytes], path: Path) -> dict:
    parser = argparse.ArgumentParser()
    snapshot.add_arguments(parser)
    assert snapshot.run(parser.parse_args(["--from-file", str(path)])) == 0
    return series(capfdbinary.readouterr().out.decode())


def of(s: dict, family: str, ns: str, name: str) -> dict[frozenset, float]:
    return {k[1] - {("namespace", ns), ("workload", name)}: v for k, v in s.items()
            if k[0] == family and ("namespace", ns) in k[1] and ("workload", name) in k[1]}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_snapshot_exports_what_the_object_says(name: str, capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    s = run_snapshot(capfdbinary, path_of(name))
    expected = EXPECTED[name]
    assert {(dict(k[1])["namespace"], dict(k[1])["workload"]) for k in s if k[0] == "gangscope_workload_info"} == set(expected)
    errors = {dict(k[1])["source"]: v for k, v in s.items() if k[0] == "gangscope_parse_errors_total" and v}
    assert errors == PARSE_ERRORS.get(name, {})
    for (ns, wl), w in expected.items():
        stages = of(s, "gangscope_workload_stage", ns, wl)
        assert [(dict(k)["stage"], v) for k, v in stages.items()] == [(w.stage, 1)], (ns, wl)  # the current stage only
        pending = [(dict(k)["reason"], dict(k)["category"]) for k in of(s, "gangscope_workload_pending_reason", ns, wl)]
        assert pending == ([w.pending] if w.pending else []), (ns, wl)
        info = dict(next(iter(of(s, "gangscope_workload_info", ns, wl))))
        assert info["cluster_queue"] == w.cluster_queue, (ns, wl)
        assert of(s, "gangscope_workload_requested_gpus", ns, wl) == {frozenset(): w.gpus}
        checks = {(d["check"], d["state"]): v for d, v in ((dict(k), v) for k, v in of(s, "gangscope_workload_admission_check", ns, wl).items())}
        assert checks == {(c, state): 1 for c, state in w.checks.items()}, (ns, wl)  # each check's current state
        times = {dict(k)["check"]: v for k, v in of(s, "gangscope_workload_admission_check_transition_timestamp_seconds", ns, wl).items()}
        assert times == w.check_times
        evictions = {(dict(k)["reason"], dict(k)["underlying_cause"]): v for k, v in of(s, "gangscope_workload_evictions_total", ns, wl).items()}
        assert evictions == w.evictions
        requeue = (of(s, "gangscope_workload_requeues", ns, wl), of(s, "gangscope_workload_requeue_at_timestamp_seconds", ns, wl))
        assert requeue == (({frozenset(): w.requeue[0]}, {frozenset(): w.requeue[1]}) if w.requeue else ({}, {}))
        pods = {(dict(k)["podset"], tuple((a, v) for a, v in sorted(k) if a != "podset")): v
                for k, v in of(s, "gangscope_workload_topology_pods", ns, wl).items()}
        assert pods == {(ps, tuple(sorted(path))): n for (ps, path), n in w.pods.items()}, (ns, wl)
        assert not of(s, "gangscope_workload_pods_ready_timestamp_seconds", ns, wl), "no real Workload here reached PodsReady"
        requests = {(d["podset"], d["mode"], d["level"]): v
                    for d, v in ((dict(k), v) for k, v in of(s, "gangscope_workload_topology_request", ns, wl).items())}
        assert requests == w.requests, (ns, wl)  # a request naming only podIndexLabel places by nothing: no series
        past = of(s, "gangscope_workload_past_execution_seconds", ns, wl)
        assert past == ({frozenset(): w.past} if w.past is not None else {}), (ns, wl)


def test_gke_four_level_topology_is_accepted(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    s = run_snapshot(capfdbinary, REAL / "kueue-frag-3494-gke-4level-domains-v1beta1.yaml")
    assert s[("gangscope_source_objects", frozenset({("source", "topologies")}))] == 1
    assert not [k for k in s if k[0] == "gangscope_topology_unresolved_workloads"]


def test_topology_without_spec_is_a_topology_without_levels(capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    """kueue#4861: the API server served a Topology without spec and Kueue crashed on it."""
    s = run_snapshot(capfdbinary, REAL / "kueue-4861-topology-without-spec.yaml")
    assert s[("gangscope_source_objects", frozenset({("source", "topologies")}))] == 1
    assert s[("gangscope_parse_errors_total", frozenset({("source", "topologies")}))] == 0


CASES = [(name, ns, wl) for name, wls in sorted(EXPECTED.items()) for ns, wl in wls]


@pytest.mark.parametrize(("name", "ns", "wl"), CASES, ids=[f"{n}:{w}" for n, _, w in CASES])
def test_explain_says_what_the_object_says(name: str, ns: str, wl: str, capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    explain.add_arguments(parser)
    assert explain.run(parser.parse_args([f"{ns}/{wl}", "--from-file", str(path_of(name)), "--output", "json"])) == 0
    doc = json.loads(capsys.readouterr().out)
    w = EXPECTED[name][(ns, wl)]
    assert doc["workload"]["stage"] == w.stage
    assert (doc["verdict"]["status"], doc["verdict"]["layer"]) == w.verdict, doc["verdict"]
    summaries = " ".join(layer["summary"] for layer in doc["layers"])
    assert w.says in summaries, summaries
    admission = doc["layers"][0]["evidence"]
    if w.pending:
        assert (admission["pending_reason"]["reason"], admission["pending_reason"]["category"]) == w.pending
    assert {c["name"]: c["state"] for c in admission.get("admission_checks", [])} == w.checks
