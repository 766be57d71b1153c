"""Which of Kubernetes' layers holds a job back, from the judgements already made: a pure function
of the Workload's stage and conditions (exporter.cluster.workload_state) and its gangs' stages
(exporter.cluster.gang_state), the same values the series carry (``gangscope_workload_stage``,
``gangscope_workload_pending_reason``, ``gangscope_gang_stage``). explain's verdict names this
layer and its layers' statuses follow it, so explain cannot say what the series do not.

The layers, in the order a job passes them:

* ``admission``: Kueue has not admitted it for quota, policy or an admission check (a waiting
  stage whose reason is not the topology placement's; ``deactivated``; an eviction that is not
  a node failure; ``admission_checks`` other than a delayed topology request);
* ``placement``: Kueue's topology-aware scheduling: the topology placement failed
  (:func:`.workload_fit.is_topological`), the topology request is delayed
  (``PendingDelayedTopologyRequests``), a ``NodeFailures`` eviction, nodes in
  ``status.unhealthyNodes`` (Kueue looks for replacements), or pods that still carry Kueue's
  ``kueue.x-k8s.io/topology`` scheduling gate: Kueue's TAS ungater removes it only once it has
  given each pod its domain (kueue ff69552e pkg/controller/tas/topology_ungater.go), so the gang
  scheduler has nothing to assemble before;
* ``assembly``: admitted and placed, but the gang is not whole: a gang stage short of assembled,
  Kueue's ``PodsReady=False`` (stage ``assembling``: ``WaitForStart``; ``recovering``:
  ``WaitForRecovery``, a pod failed after the start, kueue pkg/controller/jobframework/reconciler.go
  1905-1922).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from .workload_fit import is_topological
from .workload_state import WAITING_STAGES

if TYPE_CHECKING:
    from .workloads import Workload

DELAYED_TOPOLOGY = "PendingDelayedTopologyRequests"  # Admitted=False reason (kueue pkg/workload/admissionchecks.go)
# Gang stages that hold the job at assembly (not_admitted and unknown say nothing gangscope can
# stand behind; queued is Volcano's queue, the gang's own admission).
ASSEMBLY_GANG_STAGES = ("failed", "partially_bound", "stuck", "starting", "assembling", "queued")
PLACEMENT_GANG_STAGES = ("placing",)
ADMITTED_STAGES = ("assembling", "running", "recovering")


def holding_layer(wl: Workload | None, gang_stages: Iterable[str] = (), topology_gated: bool = False) -> str | None:
    """``admission``, ``placement`` or ``assembly``: the first layer that holds the job; None when
    none does (running, finished, or nothing to judge). ``topology_gated``: some of its live pods
    carry Kueue's topology gate (where no PodGroup is joined, the pods say it themselves)."""
    stages = set(gang_stages)
    if wl is None or wl.state is None:
        return "assembly" if stages & set(ASSEMBLY_GANG_STAGES + PLACEMENT_GANG_STAGES) else None
    stage, pending = wl.stage, wl.state.pending
    conds = wl.conditions
    if stage == "finished":
        return None
    if stage == "deactivated":
        return "admission"
    if stage == "evicting":
        evicted = conds.get("Evicted")
        return "placement" if evicted is not None and evicted.reason == "NodeFailures" else "admission"
    qr = conds.get("QuotaReserved")
    if qr is not None and qr.status == "False" and is_topological(qr.reason, qr.message):
        return "placement"
    if stage in WAITING_STAGES:
        return "admission"
    if stage == "admission_checks":
        admitted = conds.get("Admitted")
        delayed = (pending is not None and pending.reason == DELAYED_TOPOLOGY) or (
            admitted is not None and admitted.status == "False" and admitted.reason == DELAYED_TOPOLOGY)
        return "placement" if delayed else "admission"
    if stage not in ADMITTED_STAGES:
        return None
    if wl.unhealthy_nodes or topology_gated or stages & set(PLACEMENT_GANG_STAGES):
        return "placement"
    if stage in ("assembling", "recovering") or stages & set(ASSEMBLY_GANG_STAGES):
        return "assembly"
    return None
