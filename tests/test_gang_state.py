"""The gang judgement alone (exporter.cluster.gang_state): records and pods in, the stage out, no
store or index. Pods and PodGroups are shaped as the kubelet and the schedulers write them."""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cluster import podgroups as pg
from exporter.cluster.gang_state import Gang, evaluate, pod_members
from exporter.cluster.pods import parse_pod
from exporter.cluster.workloads import parse_workload

T0 = 1787220000.0  # 2026-08-20T10:00:00Z


def ts(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(name: str, *, group: str | None = "g", phase: str = "Running", node: str | None = "n1", gpus: int = 8,
        waiting: str | None = None, deleting: bool = False, gates: tuple[str, ...] = (), ann: dict | None = None,
        labels: dict | None = None, spec: dict | None = None) -> Any:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "uid": f"u-{name}", "resourceVersion": "1",
                            "labels": {**({"scheduling.x-k8s.io/pod-group": group} if group else {}), **(labels or {})},
                            "annotations": ann or {}}
    if deleting:
        meta["deletionTimestamp"] = ts(T0)
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}],
                            **(spec or {})}
    if node:
        body["nodeName"] = node
    if gates:
        body["schedulingGates"] = [{"name": g} for g in gates]
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": str(phase == "Running")}]}
    if waiting:
        status["containerStatuses"] = [{"name": "c", "ready": False, "state": {"waiting": {"reason": waiting}}}]
    return parse_pod({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": body, "status": status},
                     ("nvidia.com/gpu",))


def cosched(min_member: int = 4, phase: str = "Scheduling", timeout: int | None = 60) -> pg.PodGroupRecord:
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout:
        spec["scheduleTimeoutSeconds"] = timeout
    return pg.parse_coscheduling("podgroups_coscheduling", {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "uid": "pg", "creationTimestamp": ts(T0)},
        "spec": spec, "status": {"phase": phase}})


def admitted_workload() -> Any:
    return parse_workload({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml", "uid": "wl", "creationTimestamp": ts(T0 - 60)},
        "spec": {"queueName": "q", "podSets": [{"name": "main", "count": 4, "template": {
            "metadata": {"labels": {"scheduling.x-k8s.io/pod-group": "g"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": "8"}}}]}}}]},
        "status": {"conditions": [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": ts(T0)},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": ts(T0)}]},
    })


def judge(rec: pg.PodGroupRecord, pods: list[Any], now: float = T0 + 3600, previous: Gang | None = None,
          wl: Any = None) -> Gang:
    return evaluate(rec, wl, "template" if wl is not None else None, now, 600.0, pod_members(rec, pods), previous)


def test_bound_and_pulling_is_starting_not_stuck() -> None:
    """Coscheduling's scheduleTimeoutSeconds is the Permit wait before binding; four of four bound
    and pulling their images an hour later is a node/image matter."""
    pods = [pod(f"p{i}", phase="Pending", waiting="ImagePullBackOff" if i < 3 else "ContainerCreating") for i in range(4)]
    g = judge(cosched(), pods, wl=admitted_workload())
    assert (g.stage, g.stuck, g.deadline) == ("starting", False, None)
    assert g.idle == (("ContainerCreating", 8.0), ("ImagePullBackOff", 24.0))
    assert g.idle_gpus == 32
    assert g.members is not None and g.members.waiting == (("ContainerCreating", 1), ("ImagePullBackOff", 3))


def test_running_members_of_a_starting_gang_wait_for_the_rest() -> None:
    pods = [pod("a"), pod("b"), pod("c"), pod("d", phase="Pending")]
    g = judge(cosched(), pods)
    assert g.stage == "starting"
    assert dict(g.idle) == {"members": 24.0, "starting": 8.0}


def test_terminating_pods_leave_the_gang_but_keep_their_gpus() -> None:
    """A JobSet restart: the old pods carry deletionTimestamp while the new ones are created."""
    pods = [pod(f"old{i}", deleting=True) for i in range(4)] + [pod("new0", node=None, phase="Pending")]
    g = judge(cosched(phase="Running"), pods, wl=admitted_workload(), now=T0 + 30)
    m = g.members
    assert m is not None and (m.terminating, m.members, m.running, m.pending, m.terminating_gpus) == (4, 1, 0, 1, 32.0)
    assert g.stage == "assembling"


@pytest.mark.parametrize(("gate", "stage"), [
    ("kueue.x-k8s.io/topology", "placing"),
    ("kueue.x-k8s.io/admission", "not_admitted"),
    ("kueue.x-k8s.io/elastic-job", "not_admitted"),
    ("example.com/quota-check", "unknown"),
])
def test_a_gate_is_not_assembly(gate: str, stage: str) -> None:
    pods = [pod(f"p{i}", node=None, phase="Pending", gates=(gate,)) for i in range(4)]
    g = judge(cosched(), pods, wl=admitted_workload())
    assert (g.stage, g.stuck, g.deadline) == (stage, False, None)
    if stage == "unknown":
        assert g.members is not None and g.members.unknown_what == (f"scheduling gate {gate}",)


def test_the_assembly_window_starts_when_the_last_gate_goes() -> None:
    rec = cosched()
    gated = judge(rec, [pod(f"p{i}", node=None, phase="Pending", gates=("kueue.x-k8s.io/topology",)) for i in range(4)],
                  now=T0 + 3000, wl=admitted_workload())
    assert gated.stage == "placing"
    free = judge(rec, [pod(f"p{i}", node=None, phase="Pending") for i in range(4)], now=T0 + 3010, previous=gated,
                 wl=admitted_workload())
    assert (free.stage, free.wait_start, free.deadline) == ("assembling", T0 + 3010, T0 + 3070)
    later = judge(rec, [pod(f"p{i}", node=None, phase="Pending") for i in range(4)], now=T0 + 3100, previous=free,
                  wl=admitted_workload())
    assert (later.stage, later.wait_start) == ("stuck", T0 + 3010)


def test_unknown_pod_phase_is_unknown_not_a_stage() -> None:
    g = judge(cosched(), [pod("a"), pod("b"), pod("c"), pod("d", phase="Evicted")])
    assert g.stage == "unknown"
    assert g.members is not None and g.members.unknown_what == ("pod phase Evicted",)


def volcano(phase: str, *, min_member: int = 2, tasks: dict | None = None, running: int = 0) -> pg.PodGroupRecord:
    spec: dict[str, Any] = {"minMember": min_member, "queue": "research", "minResources": {"nvidia.com/gpu": "16"}}
    if tasks:
        spec["minTaskMember"] = tasks
    return pg.parse_volcano("podgroups_volcano", {
        "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "uid": "pg", "creationTimestamp": ts(T0)},
        "spec": spec, "status": {"phase": phase, "running": running}})


def test_volcano_group_waiting_for_its_queue_is_queued() -> None:
    """Volcano creates the pods only after Pending -> Inqueue (job_controller_actions.go:410-412)."""
    rec = volcano("Pending")
    assert rec.min_resources == (("nvidia.com/gpu", "16"),)
    assert evaluate(rec, None, None, T0 + 3600, 600.0).stage == "queued"  # from its counters
    assert judge(rec, []).stage == "queued"  # its pods watched, none yet
    assert judge(volcano("Inqueue"), []).stage == "queued"
    g = judge(volcano("Inqueue"), [], wl=admitted_workload())
    assert (g.stage, g.stuck) == ("queued", False)


def test_volcano_running_phase_counts_bound_pods() -> None:
    """session.go getPodGroupPhase: Running once scheduled >= minMember; its counter counts running."""
    g = evaluate(volcano("Running", running=1), None, None, T0 + 3600, 600.0)
    assert g.stage == "starting"


def test_volcano_min_task_member() -> None:
    """A gang missing its master is not assembled, however many workers run."""
    def vpod(name: str, task: str) -> Any:
        return pod(name, ann={"scheduling.k8s.io/group-name": "g", "volcano.sh/task-spec": task})
    rec = volcano("Running", min_member=3, tasks={"master": 1, "worker": 2})
    assert rec.min_task_member == (("master", 1), ("worker", 2))
    assert judge(rec, [vpod(f"w{i}", "worker") for i in range(3)]).stage != "assembled"
    assert judge(rec, [vpod("m", "master"), vpod("w0", "worker"), vpod("w1", "worker")]).stage == "assembled"


def test_volcano_sub_group_policy_is_unknown_not_a_guess() -> None:
    """A subGroupPolicy (types.go:218-268) makes Volcano count sub-groups of the pods chosen by
    their labels (job_info.go:523-537, allocate.go:214-231), which gangscope does not keep: with
    members, the gang is unknown, never assembled or stuck; Volcano's own terminal and Pending
    words still stand."""
    def sub_grouped(phase: str) -> pg.PodGroupRecord:
        return pg.parse_volcano("podgroups_volcano", {
            "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "g", "namespace": "ml", "uid": "pg", "creationTimestamp": ts(T0)},
            "spec": {"minMember": 4, "queue": "research", "subGroupPolicy": [
                {"name": "replica", "subGroupSize": 2, "minSubGroups": 2,
                 "labelSelector": {"matchLabels": {"volcano.sh/task-spec": "worker"}},
                 "matchLabelKeys": ["volcano.sh/partition-id"]}]},
            "status": {"phase": phase}})
    rec = sub_grouped("Running")
    assert (rec.not_modelled, rec.errors) == ("Volcano subGroupPolicy (sub-group minimums by pod labels)", ())
    vol = {"scheduling.k8s.io/group-name": "g"}
    running = [pod(f"w{i}", ann=vol) for i in range(4)]
    for pods in (running, running[:1], [pod("w0", ann=vol, node=None, phase="Pending")]):
        g = judge(rec, pods, wl=admitted_workload())
        assert (g.stage, g.stuck, g.deadline) == ("unknown", False, None)
    assert judge(sub_grouped("Completed"), [pod(f"w{i}", ann=vol, phase="Succeeded") for i in range(4)]).stage == "finished"
    assert judge(sub_grouped("Pending"), [pod("w0", ann=vol, node=None, phase="Pending")]).stage == "queued"
    # From the counters too: Volcano's Running counts scheduled pods against minMember alone
    # (session.go:581-606), the running counter is not per sub-group.
    assert evaluate(sub_grouped("Running"), None, None, T0 + 3600, 600.0).stage == "unknown"
    assert volcano("Running").not_modelled == ""


def kai(annotations: dict[str, str], allocated: bool = True, min_member: int | None = 2) -> pg.PodGroupRecord:
    spec: dict[str, Any] = {"queue": "team-a"}
    if min_member is not None:
        spec["minMember"] = min_member
    status = {"resourcesStatus": {"allocated": {"nvidia.com/gpu": "8"}}} if allocated else {}
    return pg.parse_kai("podgroups_kai", {
        "apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "uid": "pg", "creationTimestamp": ts(T0),
                     "annotations": annotations}, "spec": spec, "status": status})


def test_kai_allocated_alone_is_not_assembled() -> None:
    rec = kai({})
    assert rec.phase == "Allocated"
    assert evaluate(rec, None, None, T0 + 3600, 600.0).stage == "unreported"


def test_kai_last_start_is_the_assembled_signal() -> None:
    rec = kai({"kai.scheduler/last-start-timestamp": ts(T0 + 10)})
    assert evaluate(rec, None, None, T0 + 3600, 600.0).stage == "assembled"


def test_kai_stale_timestamp_plus_grace_is_the_deadline() -> None:
    rec = kai({"kai.scheduler/stale-podgroup-timestamp": ts(T0 + 100),
               "kai.scheduler/last-start-timestamp": ts(T0 + 10)})
    before = evaluate(rec, None, None, T0 + 130, 600.0, kai_grace=60)
    assert (before.stage, before.stuck, before.deadline) == ("partially_bound", False, T0 + 160)
    after = evaluate(rec, None, None, T0 + 170, 600.0, kai_grace=60)
    assert (after.stage, after.stuck) == ("partially_bound", True)


def test_kai_min_member_absent_or_zero_is_one() -> None:
    assert kai({}, min_member=None).min_member == 1
    assert kai({}, min_member=0).min_member == 1


def native_135() -> pg.PodGroupRecord:
    [rec] = pg.parse_native_workload("workloads_native", {
        "apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
        "metadata": {"name": "wl", "namespace": "ml", "uid": "w", "creationTimestamp": ts(T0)},
        "spec": {"podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 2}}}]}}).records
    return rec


def test_native_1_35_replicas_are_gangs_of_their_own() -> None:
    """podGroupReplicaKey: two replicas of minCount 2 with three pods are not both assembled."""
    def npod(name: str, replica: str) -> Any:
        return pod(name, group=None, spec={"workloadRef": {"name": "wl", "podGroup": "workers",
                                                          "podGroupReplicaKey": replica}})
    rec = native_135()
    assert judge(rec, [npod("a0", "0"), npod("a1", "0"), npod("b0", "1")]).stage == "partially_bound"
    assert judge(rec, [npod("a0", "0"), npod("a1", "0"), npod("b0", "1"), npod("b1", "1")]).stage == "assembled"


def test_disruption_target_is_shown() -> None:
    p = parse_pod({"apiVersion": "v1", "kind": "Pod",
                   "metadata": {"name": "a", "namespace": "ml", "uid": "a", "labels": {"scheduling.x-k8s.io/pod-group": "g"}},
                   "spec": {"nodeName": "n", "containers": []},
                   "status": {"phase": "Running", "conditions": [
                       {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]}},
                  ("nvidia.com/gpu",))
    m = pod_members(cosched(1), [p])
    assert m.disrupted == (("PreemptionByScheduler", 1),)


def test_phase_outside_the_api_is_unknown() -> None:
    rec = cosched(phase="Exploded")
    assert rec.gang_state == "unknown"
    assert evaluate(rec, None, None, T0, 600.0, None).stage == "unknown"


def test_kai_fractions_count_and_dra_claims_are_unknown_not_zero() -> None:
    half = pod("a", gpus=0, ann={"gpu-fraction": "0.5"})
    assert (half.gpus, half.gpus_unknown) == (0.5, False)
    two = pod("b", gpus=0, ann={"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"})
    assert two.gpus == 0.5
    dra = pod("c", gpus=0, spec={"resourceClaims": [{"name": "gpu", "resourceClaimName": "c-gpu"}]})
    mem = pod("d", gpus=0, ann={"gpu-memory": "20000"})
    assert (dra.gpus_unknown, mem.gpus_unknown) == (True, True)
    m = pod_members(cosched(4), [half, two, dra, mem])
    assert (m.placed_gpus, m.gpus_unknown) == (1.0, 2)
    with pytest.raises(Exception, match="gpu-fraction"):
        pod("e", gpus=0, ann={"gpu-fraction": "half"})
