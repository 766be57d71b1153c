"""What a Workload's status means (exporter.cluster.workload_state), row by row, from what Kueue writes.

Every row's conditions are the ones Kueue's controllers write together, quoted from
kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7 (main) or the tag named: the
reason token, the message string and the code or unit test that writes them. The rows are not
our picture of Kueue: a rule that disagrees with Kueue fails here.
"""

from __future__ import annotations

from typing import Any

import pytest

from exporter.cluster.workload_state import CATEGORIES, STAGES, quota_reason_meaning, workload_state
from exporter.cluster.workloads import parse_workload
from kueue_objects import cond, workload

NOW = 1787220000.0  # 2026-08-20T10:00:00Z
FUTURE, PAST = "2026-08-20T10:05:00Z", "2026-08-20T09:55:00Z"

# SetQuotaReservation (pkg/workload/workload.go:927-938) and SyncAdmittedCondition
# (pkg/workload/admissionchecks.go:52-58) write these two when a Workload is admitted.
RESERVED = cond("QuotaReserved", "True", "QuotaReserved", message="Quota reserved in ClusterQueue cq")
ADMITTED = cond("Admitted", "True", "Admitted", message="The workload is admitted")
# generatePodsReadyCondition's messages (pkg/controller/jobframework/reconciler.go:1868-1870)
NOT_READY = "Not all pods are ready or succeeded"
RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"


def pending(reason: str, message: str = "", *extra: dict[str, Any], **kw: Any) -> dict[str, Any]:
    """A Workload without admission whose QuotaReserved is False with ``reason`` (Kueue's
    UnsetQuotaReservationWithCondition, pkg/workload/workload.go:814-834, clears admission)."""
    return workload(admitted_cq=None, conditions=[cond("QuotaReserved", "False", reason, message=message), *extra], **kw)


def requeue_state(obj: dict[str, Any], count: int, at: str) -> dict[str, Any]:
    obj["status"]["requeueState"] = {"count": count, "requeueAt": at}
    return obj


def state_of(obj: dict[str, Any], pods_assembling: bool | None = None) -> tuple[str, str | None, str | None]:
    st = workload_state(parse_workload(obj), NOW, pods_assembling)
    return st.stage, st.pending.reason if st.pending else None, st.pending.category if st.pending else None


ROWS = [
    # --- admitted, Kueue without waitForPodsReady: the job reconciler writes no PodsReady at all
    # (reconciler.go:558-560 "if r.waitForPodsReady"); Kueue 0.14-0.18 default, 0.19+ with DisableWaitForPodsReady
    ("no PodsReady: running", workload(conditions=[RESERVED, ADMITTED]), None, ("running", None, None)),
    ("no PodsReady, the joined gang assembles", workload(conditions=[RESERVED, ADMITTED]), True, ("assembling", None, None)),
    ("no PodsReady, the joined gang is placed", workload(conditions=[RESERVED, ADMITTED]), False, ("running", None, None)),
    # --- admitted, waitForPodsReady on: generatePodsReadyCondition (reconciler.go:1865-1923)
    ("WaitForStart (reconciler.go:1899-1902)",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "False", "WaitForStart", message=NOT_READY)]), None,
     ("assembling", None, None)),
    ("WaitForStart beats a gang that says placed: Kueue's own word first",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "False", "WaitForStart", message=NOT_READY)]), False,
     ("assembling", None, None)),
    ("Started (reconciler.go:1887-1895)",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "True", "Started", message=READY)]), True,
     ("running", None, None)),
    ("WaitForRecovery (reconciler.go:1905-1909)",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "False", "WaitForRecovery", message=RECOVERY)]), None,
     ("recovering", None, None)),
    ("Recovered (reconciler.go:1889-1891)",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "True", "Recovered", message=READY)]), None,
     ("running", None, None)),
    ("the pre-0.9 reason PodsReady (reconciler.go:1918; workload_controller_eviction_test.go:681-685)",
     workload(conditions=[RESERVED, ADMITTED, cond("PodsReady", "False", "PodsReady", message=NOT_READY)]), None,
     ("assembling", None, None)),
    ("unhealthyNodes: Kueue looks for a replacement (workload_types.go:710-719)",
     workload(conditions=[RESERVED, ADMITTED], unhealthy=["h1"]), None, ("recovering", None, None)),
    # --- quota reserved, not admitted: admission checks (admissionchecks.go:68-76)
    ("UnsatisfiedAdmissionChecks", workload(conditions=[RESERVED, cond("Admitted", "False", "UnsatisfiedAdmissionChecks",
                                                                      message="The workload has not all checks ready")]),
     None, ("admission_checks", "UnsatisfiedAdmissionChecks", "admission_check")),
    ("pre-gate UnsatisfiedChecks (admissionchecks.go:70)",
     workload(conditions=[RESERVED, cond("Admitted", "False", "UnsatisfiedChecks")]), None,
     ("admission_checks", "UnsatisfiedChecks", "admission_check")),
    ("PendingDelayedTopologyRequests (admissionchecks.go:71-74)",
     workload(conditions=[RESERVED, cond("Admitted", "False", "PendingDelayedTopologyRequests",
                                         message="There are pending delayed topology requests")]), None,
     ("admission_checks", "PendingDelayedTopologyRequests", "admission_check")),
    # --- QuotaReserved=False, typed reasons (UnadmittedWorkloadsObservability, KEP-10852)
    ("no condition yet (UnadmittedWorkloadsExplicitStatus off, workload_controller.go:1999-2003)",
     workload(admitted_cq=None, conditions=[]), None, ("queued", "PendingEvaluation", "evaluation")),
    ("PendingEvaluation (workload_controller.go:2005)",
     pending("PendingEvaluation", "Workload is pending evaluation in the scheduling queue"), None,
     ("queued", "PendingEvaluation", "evaluation")),
    ("WaitingForQuota (KEP-10852 scenario 2)",
     pending("WaitingForQuota", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
                                "default-flavor, 2 more needed"), None, ("inadmissible", "WaitingForQuota", "capacity")),
    ("TopologyPlacementFailed (workload_types.go:958-960)", pending("TopologyPlacementFailed"), None,
     ("inadmissible", "TopologyPlacementFailed", "capacity")),
    ("NoMatchingFlavor (KEP-10852 scenario 4)", pending("NoMatchingFlavor", "couldn't find matching flavor for pod set main"),
     None, ("inadmissible", "NoMatchingFlavor", "configuration")),
    ("ExceedsMaxQuota (flavorassigner.go:1353-1361)",
     pending("ExceedsMaxQuota", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor one, "
                                "request > maximum capacity (5 > 4)"), None, ("inadmissible", "ExceedsMaxQuota", "configuration")),
    ("Misconfigured (KEP-10852 scenario 3)", pending("Misconfigured", "LocalQueue local-queue doesn't exist"), None,
     ("inadmissible", "Misconfigured", "configuration")),
    ("WaitingForPreemptedWorkloads (scheduler.go:495): preemption in flight is not inadmissible",
     pending("WaitingForPreemptedWorkloads", "couldn't assign flavors to pod set main: insufficient unused quota for "
                                             "nvidia.com/gpu in flavor h100, 8 more needed. Pending the preemption of 1 "
                                             "workload(s)"), None, ("preempting", "WaitingForPreemptedWorkloads", "preemption")),
    ("Suspended (workload_controller.go:2037)", pending("Suspended", "ClusterQueue cq is inactive"), None,
     ("held", "Suspended", "policy")),
    ("OnHold (jobframework/reconciler.go:481-485)", pending("OnHold", "Job is on hold"), None, ("held", "OnHold", "policy")),
    ("AdmissionGated (workload_controller.go:1987)", pending("AdmissionGated", "Admission is gated by: example.com/gate"),
     None, ("held", "AdmissionGated", "policy")),
    ("WaitingForPodsReady (scheduler.go:592-597)",
     pending("WaitingForPodsReady", "waiting for all admitted workloads to be in PodsReady condition"), None,
     ("held", "WaitingForPodsReady", "policy")),
    ("reactivated: QuotaReserved still says Deactivated (workload_controller_test.go:1216-1230)",
     pending("Deactivated", "The workload is deactivated"), None, ("queued", "Deactivated", "evaluation")),
    ("a reason this gangscope does not know", pending("SomeFutureReason", "x"), None,
     ("inadmissible", "SomeFutureReason", "capacity")),
    # --- QuotaReserved=False without the gate (Kueue 0.14-0.19 defaults): Pending / Inadmissible / Waiting
    ("Pending with the flavor assigner's quota message (KEP-10852 scenario 2, before)",
     pending("Pending", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor "
                        "default-flavor, 2 more needed"), None, ("inadmissible", "Pending", "capacity")),
    ("Pending, request above the queue's maximum (v0.14.0:flavorassigner.go:916)",
     pending("Pending", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor one, request > "
                        "maximum capacity (5 > 4), insufficient quota for example.com/gpu in flavor two, request > "
                        "maximum capacity (4 > 0)"), None, ("inadmissible", "Pending", "configuration")),
    ("Pending, above the queue's maximum, 0.15+ wording (v0.16.0:flavorassigner.go:977)",
     pending("Pending", "couldn't assign flavors to pod set main: insufficient quota for nvidia.com/gpu in flavor h100, "
                        "previously considered podsets requests (0) + current podset request (64) > maximum capacity (32)"),
     None, ("inadmissible", "Pending", "configuration")),
    ("Pending, one flavor untolerated, another out of quota: capacity (flavorassigner.go:963-991)",
     pending("Pending", "couldn't assign flavors to pod set main: untolerated taint {spot true NoSchedule <nil>} in "
                        "flavor spot, insufficient unused quota for cpu in flavor on-demand, 1 more needed"), None,
     ("inadmissible", "Pending", "capacity")),
    ("Pending, no matching flavor (v0.14.0:flavorassigner.go:829)",
     pending("Pending", "couldn't assign flavors to pod set main: flavor tas doesn't match node affinity"), None,
     ("inadmissible", "Pending", "configuration")),
    ("Pending with preemptions issued (scheduler.go:294, v0.14.0:scheduler.go:307)",
     pending("Pending", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, "
                        "1 more needed. Pending the preemption of 2 workload(s)"), None, ("preempting", "Pending", "preemption")),
    ("Pending, no longer fits (v0.14.0:scheduler.go:279)",
     pending("Pending", "Workload no longer fits after processing another workload"), None,
     ("inadmissible", "Pending", "capacity")),
    ("Pending, TAS (kueue#5039, v0.11 on OCI)",
     pending("Pending", "couldn't assign flavors to pod set main: topology \"default\" doesn't allow to fit any of 2 "
                        "pod(s). no topology domains at level: oci.oraclecloud.com/host.network-block"), None,
     ("inadmissible", "Pending", "capacity")),
    ("Pending, inactive ClusterQueue (v0.14.0:scheduler.go:430)", pending("Pending", "ClusterQueue cq is inactive"), None,
     ("held", "Pending", "policy")),
    ("Pending, ClusterQueue not found (v0.14.0:scheduler.go:432)", pending("Pending", "ClusterQueue cq not found"), None,
     ("inadmissible", "Pending", "configuration")),
    ("Pending, namespace selector (v0.14.0:scheduler.go:436)",
     pending("Pending", "Workload namespace doesn't match ClusterQueue selector"), None,
     ("inadmissible", "Pending", "configuration")),
    ("Pending after failed admission checks: re-evaluated (v0.14.0:scheduler.go:428)",
     pending("Pending", "The workload has failed admission checks"), None, ("queued", "Pending", "evaluation")),
    ("Pending after an eviction: the Evicted message, requeued (reconciler_test.go:1189-1261)",
     pending("Pending", "Preempted to accommodate a workload (UID: u1, JobUID: j1) due to prioritization in the "
                        "ClusterQueue; preemptor path: /cq; preemptee path: /cq",
             cond("Evicted", "True", "Preempted", message="Preempted to accommodate a workload (UID: u1, JobUID: j1) due "
                  "to prioritization in the ClusterQueue; preemptor path: /cq; preemptee path: /cq")), None,
     ("queued", "Pending", "evaluation")),
    ("Inadmissible, missing LocalQueue (v0.14.0:workload_controller.go:442)",
     pending("Inadmissible", "LocalQueue lq doesn't exist"), None, ("inadmissible", "Inadmissible", "configuration")),
    ("Inadmissible, no matching flavor (KEP-10852 scenario 4, before)",
     pending("Inadmissible", "couldn't find matching flavor for pod set main"), None,
     ("inadmissible", "Inadmissible", "configuration")),
    ("Inadmissible, stopped LocalQueue (v0.14.0:workload_controller.go:590)",
     pending("Inadmissible", "LocalQueue lq is stopped"), None, ("held", "Inadmissible", "policy")),
    ("Waiting (v0.14.0:scheduler.go:320)", pending("Waiting", "waiting for all admitted workloads to be in PodsReady condition"),
     None, ("held", "Waiting", "policy")),
    # --- evictions, backoff, deactivation, the end
    ("evicted while quota is held (evict.go:178-185; reconciler.go:592-600)",
     workload(conditions=[RESERVED, ADMITTED, cond("Evicted", "True", "Preempted")]), None, ("evicting", None, None)),
    ("evicted, quota released, requeued (reconciler.go:604-620)",
     pending("PendingEvaluation", "", cond("Evicted", "True", "NodeFailures")), None, ("queued", "PendingEvaluation", "evaluation")),
    ("PodsReadyTimeout backoff: requeueAt ahead (workload_controller.go:579-590; workload.go:836-851)",
     requeue_state(pending("PendingEvaluation", "Exceeded the PodsReady timeout ns/wl",
                           cond("Evicted", "True", "PodsReadyTimeout", message="Exceeded the PodsReady timeout ns/wl"),
                           cond("Requeued", "False", "PodsReadyTimeout", message="Exceeded the PodsReady timeout ns/wl")),
                   1, FUTURE),
     None, ("backoff", "PodsReadyTimeout", "backoff")),
    ("deactivated by Kueue after too many requeues (workload_controller_eviction_test.go:650-706)",
     workload(active=False, conditions=[RESERVED, ADMITTED, cond("PodsReady", "False", "PodsReady", message=NOT_READY),
                                        cond("Evicted", "True", "DeactivatedDueToRequeuingLimitExceeded")],
              evictions=[{"reason": "Deactivated", "underlyingCause": "RequeuingLimitExceeded", "count": 1}]),
     None, ("deactivated", "Deactivated", "policy")),
    ("finished", workload(active=False, conditions=[RESERVED, ADMITTED, cond("Finished", "True", "Succeeded")]), None,
     ("finished", None, None)),
]


@pytest.mark.parametrize(("case", "obj", "assembling", "expected"), ROWS, ids=[r[0] for r in ROWS])
def test_what_kueue_writes_means(case: str, obj: dict[str, Any], assembling: bool | None, expected: tuple) -> None:
    assert state_of(obj, assembling) == expected


def test_every_stage_and_category_has_a_row() -> None:
    stages = {r[3][0] for r in ROWS}
    categories = {r[3][2] for r in ROWS} - {None}
    assert stages == set(STAGES)
    assert categories == set(CATEGORIES)


def test_backoff_ends_at_requeue_at() -> None:
    obj = pending("PendingEvaluation", "", cond("Requeued", "False", "PodsReadyTimeout"))
    obj["status"]["requeueState"] = {"count": 2, "requeueAt": FUTURE}
    st = workload_state(parse_workload(obj), NOW)
    assert (st.stage, st.backoff_until) == ("backoff", NOW + 300)
    assert workload_state(parse_workload(obj), NOW + 300).stage == "queued"
    obj["status"]["requeueState"]["requeueAt"] = PAST  # Kueue had not cleared it yet (workload_controller.go:546-549)
    assert workload_state(parse_workload(obj), NOW).stage == "queued"


def test_admission_check_retry_names_the_check_and_its_next_retry() -> None:
    # A ProvisioningRequest check in Retry with a delay, and one still Pending (workload_types.go:798-834)
    obj = workload(conditions=[RESERVED, cond("Admitted", "False", "UnsatisfiedAdmissionChecks")])
    obj["status"]["admissionChecks"] = [
        {"name": "a-pending", "state": "Pending", "message": "", "lastTransitionTime": PAST},
        {"name": "dws-prov", "state": "Retry", "message": "Provisioning failed", "lastTransitionTime": PAST,
         "requeueAfterSeconds": 60, "retryCount": 2},
    ]
    st = workload_state(parse_workload(obj), NOW)
    assert st.stage == "admission_checks"
    assert st.blocking_check is not None and st.blocking_check.name == "dws-prov"
    assert st.blocking_check.next_retry_seconds == NOW - 300 + 60
    assert st.pending is not None and st.pending.message == "Provisioning failed"


@pytest.mark.parametrize(("reason", "message", "expected"), [
    ("Pending", "Workload has overlapping preemption targets with another workload, but will fit after these preemptions "
                "complete", ("preempting", "preemption")),
    ("Pending", "AdmissionGatedBy cleared, waiting for quota reservation", ("queued", "evaluation")),
    ("Pending", "resources validation failed: x", ("inadmissible", "configuration")),
    ("Inadmissible", "ClusterQueue cq is inactive", ("held", "policy")),
    ("Inadmissible", "ClusterQueue cq is terminating or missing", ("inadmissible", "configuration")),
    # statefulset_reconciler.go:279-288: clearOnHold falls back to Pending without the gate
    ("Pending", "Workload no longer on hold; waiting for quota reservation", ("queued", "evaluation")),
    # scheduler.go:444-449: preemption needed, the preemption gate closed (typed: AdmissionGated)
    ("Pending", "Workload requires preemption, but it's gated", ("held", "policy")),
    # scheduler.go:407-412: a ConcurrentAdmission variant skipped (typed: PendingEvaluation)
    ("Pending", "A more favorable variant is already admitted", ("queued", "evaluation")),
])
def test_legacy_messages(reason: str, message: str, expected: tuple[str, str]) -> None:
    assert quota_reason_meaning(reason, message) == expected
