"""What a Kueue Workload's status means: its stage, why it waits, and when it changed.

This is the one module that interprets Workload conditions. The stage series
(``gangscope_workload_stage``), the pending-reason series, the gang join and ``explain`` all read
the :class:`WorkloadState` computed here; none of them re-derives conditions on its own.

The reference is Kueue's own code, cited beside each rule as ``file:line`` at
kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7 (main, 0.20 in development) unless
a tag is named. Kueue 0.14 and later are covered:

* ``PodsReady`` exists only where Kueue runs ``waitForPodsReady``: the job reconciler writes it
  "only ... if r.waitForPodsReady" (pkg/controller/jobframework/reconciler.go:558-560), and
  ``waitforpodsready.Enabled`` is false without the setting or with the ``DisableWaitForPodsReady``
  gate (pkg/util/waitforpodsready/waitforpodsready.go:24-29). The v1beta1 configuration of Kueue
  0.14-0.18 leaves it off by default. So an admitted Workload without ``PodsReady`` is running,
  unless a joined gang says its pods are still assembling (:data:`PodsAssembling`).
* ``QuotaReserved=False`` reasons come in two generations. With the
  ``UnadmittedWorkloadsObservability`` gate (KEP-10852; off by default through 0.19,
  v0.19.2:pkg/features/kube_features.go:899-901; on by default on main,
  pkg/features/kube_features.go:826-828) Kueue writes typed reasons
  (apis/kueue/v1beta2/workload_types.go:943-988, 1054-1081). Without it the scheduler writes
  the deprecated ``Pending`` with its own message (pkg/scheduler/scheduler.go:1188;
  v0.14.0:pkg/scheduler/scheduler.go:790) and the workload controller ``Inadmissible`` for queue
  problems (pkg/controller/core/workload_controller.go:2009-2014). Legacy reasons are split by
  the messages Kueue writes with them (:func:`_legacy_pending`, :func:`_legacy_inadmissible`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

# The judgement's vocabulary and result types live with the Workload record they describe (the
# record holds its state), so this module reads exporter.cluster.workloads and not the reverse.
from .workloads import CHECK_STATES, STAGES, AdmissionCheck, Condition, PendingReason, Workload, WorkloadState

if TYPE_CHECKING:
    from .clusterqueues import ClusterQueue

__all__ = ["CATEGORIES", "CHECK_STATES", "STAGES", "WAITING_STAGES", "PendingReason", "WorkloadState", "in_queue",
           "holds_quota", "quota_reason_meaning", "workload_state"]

# Stages of a Workload that waits for admission without holding quota: where the admission layer
# holds it, and the Workloads whose fit in the free capacity gangscope_workload_fit reports.
WAITING_STAGES = ("queued", "inadmissible", "preempting", "held", "backoff")

# A plain pod group whose failed pods are not replaced yet: Kueue does not queue it
# (pkg/workload/workload.go:1283-1285, IsAdmissible; the condition is set by
# pkg/controller/jobs/pod/pod_controller.go:1467-1510 while pods are absent), so it has no queue
# position and no fit, though its stage is held.
REPLACEMENT_REASON = "WaitingForReplacementPods"

# Why a Workload that is not admitted waits, by what it means for the user (the ``category``
# label of gangscope_workload_pending_reason).
CATEGORIES = ("capacity", "configuration", "preemption", "policy", "backoff", "evaluation", "admission_check")

# A joined gang's (or, later, the pods') word on whether an admitted Workload's pods are still
# assembling: True (some are), False (all are placed), None (nothing joined, or nothing known).
PodsAssembling = Callable[[tuple[str, str]], "bool | None"]


# --- QuotaReserved=False: typed reasons (UnadmittedWorkloadsObservability) ----------------------
# reason -> (stage, category). The category is what the reason means for the user:
#   capacity       waits for quota or topology room to free up; clears by itself
#   configuration  will not clear until someone changes a queue, flavor or the job
#   preemption     Kueue has evicted victims and waits for them to release their quota
#   policy         held on purpose (a stopped queue, a gate, on hold, waitForPodsReady)
#   evaluation     in the queue, not evaluated yet (or requeued after an eviction)
TYPED_REASONS: dict[str, tuple[str, str]] = {
    # workload_types.go:975, scheduler.go:410,510,677-678 (failed checks: re-evaluated), reconciler.go:611-612
    "PendingEvaluation": ("queued", "evaluation"),
    # workload_types.go:951; scheduler.go:440 (no preemption candidates), 472, 479 (no longer fits)
    "WaitingForQuota": ("inadmissible", "capacity"),
    # workload_types.go:960; KEP-10852 "capacity is fragmented across domains"
    "TopologyPlacementFailed": ("inadmissible", "capacity"),
    # workload_types.go:947, flavorassigner.go:1106,1136 (taints, affinity, flavor not found)
    "NoMatchingFlavor": ("inadmissible", "configuration"),
    # workload_types.go:956, flavorassigner.go:1353-1361 ("request > maximum capacity")
    "ExceedsMaxQuota": ("inadmissible", "configuration"),
    # workload_types.go:968; workload_controller.go:2029-2035 (missing LocalQueue/ClusterQueue), 1985
    "Misconfigured": ("inadmissible", "configuration"),
    # workload_types.go:964; scheduler.go:457 (deferred fit), 495 (preemptions issued)
    "WaitingForPreemptedWorkloads": ("preempting", "preemption"),
    # workload_types.go:972; workload_controller.go:2031-2037 (a stopped or inactive queue)
    "Suspended": ("held", "policy"),
    # workload_types.go:1063; jobframework/reconciler.go:477-490 (e.g. a StatefulSet scaled to zero)
    "OnHold": ("held", "policy"),
    # workload_types.go:1081; workload_controller.go:1987 (annotation), scheduler.go:447 (preemption gated)
    "AdmissionGated": ("held", "policy"),
    # workload_types.go:979; scheduler.go:592-597 (blockAdmission: earlier Workloads not ready yet)
    "WaitingForPodsReady": ("held", "policy"),
    # pre-gate spelling of the same (workload_types.go:1073-1077; v0.14.0:scheduler.go:320)
    "Waiting": ("held", "policy"),
    # workload_controller.go:1957-1958: the typed reason while spec.active is false; once active
    # again the controller moves it to PendingEvaluation (workload_controller_test.go:1216)
    "Deactivated": ("queued", "evaluation"),
}

# --- QuotaReserved=False Pending (no gate): the scheduler's message says why -----------------
# Fixed messages of the scheduler and the controllers (main and v0.14.0), and what the typed
# reason for the same situation is on main.
_PREEMPTING = ". Pending the preemption of "  # scheduler.go:294 (v0.14.0:scheduler.go:307)
_PENDING_EXACT: dict[str, tuple[str, str]] = {
    # scheduler.go:677-678 (v0.14.0:428): re-evaluated after failed admission checks
    "The workload has failed admission checks": ("queued", "evaluation"),
    # workload_controller.go:1093 (AdmissionGatedBy annotation removed)
    "AdmissionGatedBy cleared, waiting for quota reservation": ("queued", "evaluation"),
    # statefulset_reconciler.go:279-288: OnHold cleared, fallback reason Pending without the gate
    "Workload no longer on hold; waiting for quota reservation": ("queued", "evaluation"),
    # scheduler.go:444-449: preemption needed but the Workload's preemption gate is closed
    # (typed reason AdmissionGated)
    "Workload requires preemption, but it's gated": ("held", "policy"),
    # scheduler.go:407-412: a ConcurrentAdmission variant skipped while a more favorable sibling is
    # admitted (typed reason PendingEvaluation)
    "A more favorable variant is already admitted": ("queued", "evaluation"),
    # scheduler.go:456 (DeferredFit)
    "Workload has overlapping preemption targets with another workload, but will fit after these preemptions "
    "complete": ("preempting", "preemption"),
}
_PENDING_PREFIXES: tuple[tuple[str, tuple[str, str]], ...] = (
    ("ClusterQueue ", ("held", "policy")),  # "... is inactive" (scheduler.go:680, see _inactive_queue); "... not found" below
    ("Workload namespace doesn't match ClusterQueue selector", ("inadmissible", "configuration")),  # v0.14.0:436
    ("Could not obtain workload namespace", ("inadmissible", "configuration")),  # v0.14.0:434
    ("resources validation failed", ("inadmissible", "configuration")),  # v0.14.0:scheduler.go:62,439
    ("resources didn't satisfy LimitRange constraints", ("inadmissible", "configuration")),  # v0.14.0:63,441
)
# The flavor assigner's reasons per flavor (flavorassigner.go:1224,1247,1256,1353,1372; the same
# texts at v0.14.0:802,820,829,916,928). Capacity wins over configuration when both appear: like
# Kueue's resolveNoFitReason (flavorassigner.go:963-991), a flavor that only lacks free quota is
# an alternative that may still fit.
_CAPACITY_PHRASES = ("insufficient unused quota", "no topology domains", "no longer fits", "overlapping preemption targets")
# "insufficient quota for" (not "unused"): the request exceeds what the queue can ever give,
# worded "... previously considered podsets requests (x) + current podset request (y) > maximum
# capacity (z)" since 0.15 (v0.16.0:flavorassigner.go:977; main :1353), "..., request > maximum
# capacity (a > b)" in 0.10-0.14 (v0.14.0:916), "... in ClusterQueue" before (v0.8.0:603; Kueue's
# own troubleshooting docs still print that one). The other phrases are the same in 0.14-main.
_CONFIGURATION_PHRASES = ("insufficient quota for", "untolerated taint", "doesn't match node affinity",
                          "not found", "unavailable in ClusterQueue")


def _legacy_pending(message: str, evicted_message: str | None) -> tuple[str, str]:
    """(stage, category) of ``QuotaReserved=False`` reason ``Pending`` from its message."""
    if evicted_message is not None and message == evicted_message:
        # The job reconciler requeues an evicted Workload with the Evicted condition's message
        # (jobframework/reconciler.go:604-620, v0.14.0:reconciler.go:540): back in the queue.
        return "queued", "evaluation"
    if _PREEMPTING in message:
        return "preempting", "preemption"
    exact = _PENDING_EXACT.get(message)
    if exact is not None:
        return exact
    if message.startswith("ClusterQueue ") and message.endswith((" not found", " doesn't exist")):
        return "inadmissible", "configuration"  # scheduler.go:683 (v0.14.0:432)
    for prefix, meaning in _PENDING_PREFIXES:
        if message.startswith(prefix):
            return meaning
    if any(p in message for p in _CONFIGURATION_PHRASES) and not any(p in message for p in _CAPACITY_PHRASES):
        return "inadmissible", "configuration"
    return "inadmissible", "capacity"


def _legacy_inadmissible(message: str) -> tuple[str, str]:
    """(stage, category) of reason ``Inadmissible``: the controller's queue checks
    (workload_controller.go:2027-2040 and 1011-1064; v0.14.0:workload_controller.go:442-463, 583-632)."""
    if message.endswith((" is inactive", " is stopped")):
        return "held", "policy"  # the typed reason is Suspended
    return "inadmissible", "configuration"  # missing/terminating queue, DRA claims: Misconfigured


def _inactive_queue(message: str, queue: ClusterQueue | None) -> tuple[str, str] | None:
    """(stage, category) of "ClusterQueue X is inactive", or None for another message.

    Kueue writes it for every reason a ClusterQueue is inactive (scheduler.go:680 with reason
    ``Pending``; workload_controller.go:2035-2036 with ``Suspended``, ``Inadmissible`` before
    the gate): stopped on purpose, or a missing flavor, Topology or admission check
    (pkg/cache/scheduler/clusterqueue.go:251-262, 311-350). Only a queue whose Active condition
    says ``Stopped`` is held by policy; every other inactive queue waits for someone to fix its
    configuration. Without the ClusterQueue (not watched, not listed yet, or another queue than
    the message names) whether it is stopped is unknown, and the Workload counts as held: a
    stopped queue must not page as misconfigured.
    """
    if not (message.startswith("ClusterQueue ") and message.endswith(" is inactive")):
        return None
    if queue is None or message != f"ClusterQueue {queue.name} is inactive" or queue.stopped:
        return "held", "policy"
    return "inadmissible", "configuration"


def quota_reason_meaning(reason: str, message: str, evicted_message: str | None = None,
                         queue: ClusterQueue | None = None) -> tuple[str, str]:
    """(stage, category) for a ``QuotaReserved=False`` reason (either generation) and its message;
    ``queue`` is the Workload's ClusterQueue, where known (it says what "inactive" means).

    A reason gangscope does not know (a newer Kueue) counts as waiting for capacity: it says the
    Workload did not fit, and waiting is the conservative reading for alerts.
    """
    if reason in ("Pending", "Inadmissible", "Suspended"):
        inactive = _inactive_queue(message, queue)
        if inactive is not None:
            return inactive
    meaning = TYPED_REASONS.get(reason)
    if meaning is not None:
        return meaning
    if reason == "Pending":  # workload_types.go:1064-1071 (deprecated)
        return _legacy_pending(message, evicted_message)
    if reason == "Inadmissible":  # workload_types.go:1054-1057
        return _legacy_inadmissible(message)
    return "inadmissible", "capacity"


# Check states (workload_types.go:803-805, CHECK_STATES), worst first.
_CHECK_RANK = {"Rejected": 0, "Retry": 1, "Pending": 2}


def blocking_check(wl: Workload) -> AdmissionCheck | None:
    """The admission check that holds admission: the worst state that is not Ready (Rejected,
    then Retry, then Pending), first in status order. Kueue admits only when every check is
    Ready (pkg/workload/admissionchecks.go:130, HasAllChecksReady)."""
    best = None
    for check in wl.admission_checks:
        rank = _CHECK_RANK.get(check.state)
        if rank is not None and (best is None or rank < _CHECK_RANK[best.state]):
            best = check
    return best


def _podsready_stage(wl: Workload, pods_assembling: bool | None) -> str:
    """Stage of an admitted Workload: what PodsReady says, else what its gang says."""
    ready = wl.conditions.get("PodsReady")
    if wl.unhealthy_nodes or (ready is not None and ready.status == "False" and ready.reason == "WaitForRecovery"):
        # unhealthyNodes: Kueue looks for replacement nodes (workload_types.go:710-719);
        # WaitForRecovery: a pod failed after the start (reconciler.go:1905-1915)
        return "recovering"
    if ready is None:
        # No waitForPodsReady (reconciler.go:558-560): Kueue says nothing about the pods.
        return "assembling" if pods_assembling else "running"
    if ready.status == "True":  # Started or Recovered (reconciler.go:1887-1895)
        return "running"
    # False with WaitForStart, or the pre-0.9 reason "PodsReady" (reconciler.go:1917-1922)
    return "assembling"


def workload_state(wl: Workload, now: float, pods_assembling: bool | None = None,
                   queue: ClusterQueue | None = None) -> WorkloadState:
    """The stage (first of :data:`STAGES` whose rule holds), the pending reason and the blocking
    admission check of ``wl`` at ``now`` (Unix seconds; only the backoff depends on it);
    ``queue`` is its ClusterQueue where known (see :func:`_inactive_queue`)."""
    conds = wl.conditions
    check = blocking_check(wl)
    finished = conds.get("Finished")
    if finished is not None and finished.status == "True":
        return WorkloadState("finished", None, None, None, pods_assembling)
    quota = conds.get("QuotaReserved")
    reserved = quota is not None and quota.status == "True"
    if not wl.active:
        # spec.active false: Kueue evicts it and will not admit it (workload_controller.go:604-616;
        # typed QuotaReserved reason Deactivated, workload_controller.go:1957-1958)
        return WorkloadState("deactivated", PendingReason("Deactivated", "policy", _message(conds.get("Evicted"))),
                             None, check, pods_assembling)
    evicted = conds.get("Evicted")
    if evicted is not None and evicted.status == "True" and (wl.admitted or reserved):
        # Evicted while quota is still held: the job is being stopped (jobframework/reconciler.go:592-600)
        return WorkloadState("evicting", None, None, check, pods_assembling)
    if wl.condition_true("Admitted"):
        uses = "PodsReady" not in conds and not wl.unhealthy_nodes
        return WorkloadState(_podsready_stage(wl, pods_assembling), None, None, None, pods_assembling, uses)
    if reserved:
        # Quota reserved, admission checks or delayed topology requests pending
        # (pkg/workload/admissionchecks.go:39-105, SyncAdmittedCondition). Like Kueue's own
        # workload.Status (pkg/workload/workload.go:97-108; HasQuotaReservation, :1204-1206), only
        # the conditions say so: status.admission without them is still pending.
        admitted = conds.get("Admitted")
        reason = admitted.reason if admitted is not None and admitted.status == "False" and admitted.reason else \
            "UnsatisfiedAdmissionChecks"
        message = check.message if check is not None and check.message else _message(admitted)
        return WorkloadState("admission_checks", PendingReason(reason, "admission_check", message), None, check,
                             pods_assembling)
    replacement = conds.get(REPLACEMENT_REASON)
    if replacement is not None and replacement.status == "True":
        # Not admissible until the failed pods of the group are replaced (see REPLACEMENT_REASON);
        # the condition's message is the eviction's, or "Some Failed pods need replacement".
        return WorkloadState("held", PendingReason(REPLACEMENT_REASON, "policy", replacement.message), None, check,
                             pods_assembling)
    requeue_at = wl.requeue_at_seconds
    if requeue_at is not None and requeue_at > now:
        # Backoff after a PodsReadyTimeout or AdmissionCheck eviction, or an admission check's
        # retry delay: Kueue does not requeue it before requeueAt (workload_controller.go:536-540,
        # 579-590, 491-497; pkg/workload/workload.go:836-851)
        requeued = conds.get("Requeued")
        reason = requeued.reason if requeued is not None and requeued.status == "False" and requeued.reason else "Backoff"
        return WorkloadState("backoff", PendingReason(reason, "backoff", _message(requeued) or _message(evicted)),
                             requeue_at, check, pods_assembling)
    if quota is None:
        return WorkloadState("queued", PendingReason("PendingEvaluation", "evaluation", ""), None, check, pods_assembling)
    evicted_message = evicted.message if evicted is not None and evicted.status == "True" else None
    stage, category = quota_reason_meaning(quota.reason, quota.message, evicted_message, queue)
    return WorkloadState(stage, PendingReason(quota.reason, category, quota.message), None, check, pods_assembling)


def in_queue(state: WorkloadState | None) -> bool:
    """Whether Kueue keeps the Workload in its ClusterQueue's queue, waiting for quota: a
    waiting stage, but not a pod group waiting for replacement pods (see REPLACEMENT_REASON).
    Only these have a queue position and a fit."""
    return state is not None and state.stage in WAITING_STAGES and (
        state.pending is None or state.pending.reason != REPLACEMENT_REASON)


def holds_quota(wl: Workload) -> bool:
    """Whether Kueue counts the Workload's topology assignment as used capacity: quota reserved,
    not finished, active (pkg/workload/workload.go:1304-1306 HasActiveQuotaReservation; only
    such Workloads stay in the cache, pkg/cache/scheduler/cache.go:812-818, whose TAS usage is
    added per assigned domain, clusterqueue.go:644-660 and tas_flavor.go:264-308)."""
    return wl.condition_true("QuotaReserved") and not wl.condition_true("Finished") and wl.active


def _message(cond: Condition | None) -> str:
    return cond.message if cond is not None else ""
