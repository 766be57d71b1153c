"""Kueue ClusterQueues and Cohorts: the typed records, their metric families and their lines.

A Workload's ClusterQueue says which flavors Kueue tries for it (in spec order), how much of
each resource each flavor gives (nominal quota, borrowing and lending limits), whether Kueue
admits anything from it now (the ``Active`` condition, with the reason Kueue chose) and what it
holds (``status.flavorsReservation`` / ``flavorsUsage``). Fields follow Kueue's API at
kubernetes-sigs/kueue@ff69552e79ad21652c36caa97038382e55625cf7:
apis/kueue/v1beta2/clusterqueue_types.go (spec :67-163, resource groups :255-343, status
:351-428, the Active reasons :36-48) and apis/kueue/v1beta2/cohort_types.go:24-80. v1beta1 has
the same fields but names the cohort ``spec.cohort`` (apis/kueue/v1beta1/clusterqueue_types.go:79)
instead of ``spec.cohortName``.

The exported families are what Kueue's own ``/metrics`` does not give per object, or not
without a flag, and what joins the other layers (the flavor's Topology): see the README's
ClusterQueue section for the Kueue metrics to use for the rest.

This module also holds :class:`QueuePosition`, a Workload's place in its ClusterQueue as
Kueue's visibility API lists it (polled by :mod:`.queue_positions`, kept by the store).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from ..exposition import Family
from ..fields import ParseError, Problems, as_dict, as_int, as_list, as_str, parse_quantity

# The Active condition's reasons (clusterqueue_types.go:36-48), written by
# pkg/cache/scheduler/clusterqueue.go:311-366 (inactiveReason: the first of the queue's problems
# in this order) and set by pkg/controller/core/clusterqueue_controller.go:538-544.
ACTIVE_REASONS = (
    "Ready", "Terminating", "Stopped", "FlavorNotFound", "AdmissionCheckNotFound", "AdmissionCheckInactive",
    "MultipleMultiKueueAdmissionChecks", "MultiKueueAdmissionCheckAppliedPerFlavor",
    "MultiKueueWithProvisioningRequest", "TopologyNotFound", "Unknown",
)
# spec.stopPolicy (clusterqueue_types.go:132-144): anything but None makes the queue inactive.
STOP_POLICIES = ("None", "Hold", "HoldAndDrain")


@dataclass(frozen=True, slots=True)
class ResourceQuota:
    """``spec.resourceGroups[].flavors[].resources[]``: one resource's quota in one flavor.
    ``None`` limits are unlimited (borrowing) or all of the nominal quota (lending)."""

    name: str
    nominal: float
    borrowing_limit: float | None = None
    lending_limit: float | None = None


@dataclass(frozen=True, slots=True)
class FlavorQuotas:
    """One flavor of a resource group and its quota per covered resource."""

    name: str
    resources: tuple[ResourceQuota, ...]

    def quota(self, resource: str) -> ResourceQuota | None:
        for q in self.resources:
            if q.name == resource:
                return q
        return None


@dataclass(frozen=True, slots=True)
class ResourceGroup:
    """``spec.resourceGroups[]``: resources that are assigned one flavor together, and the
    flavors Kueue tries for them, in order (pkg/scheduler/flavorassigner/flavorassigner.go)."""

    covered_resources: tuple[str, ...]
    flavors: tuple[FlavorQuotas, ...]


@dataclass(frozen=True, slots=True)
class ResourceUsage:
    """One ``status.flavorsReservation[]`` / ``flavorsUsage[]`` resource (clusterqueue_types.go:401-428)."""

    flavor: str
    resource: str
    total: float
    borrowed: float


@dataclass(frozen=True, slots=True)
class ClusterQueue:
    """Everything gangscope reads from one ClusterQueue.

    ``active`` is the ``Active`` condition's status (False without the condition: Kueue has not
    reconciled the queue yet, and admits nothing from it until it has); ``active_reason`` and
    ``active_message`` are the condition's ("" without one); ``stop_policy`` is ``spec.stopPolicy``
    ("None" when unset, Kueue's default).
    """

    name: str
    cohort: str
    resource_groups: tuple[ResourceGroup, ...]
    stop_policy: str
    queueing_strategy: str  # StrictFIFO or BestEffortFIFO (the default, clusterqueue_types.go:105)
    fair_sharing_weight: float | None  # spec.fairSharing.weight (None: unset, Kueue's default 1)
    active: bool
    active_reason: str
    active_message: str
    has_active_condition: bool
    reservation: tuple[ResourceUsage, ...]  # status.flavorsReservation: quota reserved by Workloads
    usage: tuple[ResourceUsage, ...]  # status.flavorsUsage: quota of admitted Workloads
    pending_workloads: int | None
    reserving_workloads: int | None
    admitted_workloads: int | None
    problems: tuple[str, ...] = ()

    @property
    def flavor_names(self) -> tuple[str, ...]:
        """Every flavor of every resource group, in spec order (the order Kueue tries them)."""
        return tuple(f.name for rg in self.resource_groups for f in rg.flavors)

    @property
    def inactive_reason(self) -> str:
        """The Active condition's reason while the queue is not active ("" while it is, or
        before Kueue wrote the condition)."""
        return "" if self.active else self.active_reason

    @property
    def stopped(self) -> bool:
        """Whether Kueue holds the queue on purpose: its Active condition says ``Stopped``, or,
        before Kueue has written the condition, ``spec.stopPolicy`` is set (clusterqueue.go:253,
        316-318: a stopped queue reports Stopped first among its problems)."""
        if self.has_active_condition:
            return not self.active and self.inactive_reason == "Stopped"
        return self.stop_policy not in ("", "None")

    def quota(self, flavor: str, resource: str) -> ResourceQuota | None:
        for rg in self.resource_groups:
            for f in rg.flavors:
                if f.name == flavor:
                    return f.quota(resource)
        return None


@dataclass(frozen=True, slots=True)
class Cohort:
    """A Cohort object (apis/kueue/v1beta2/cohort_types.go:24-80): its parent in the cohort tree
    and the quota it holds itself. A ClusterQueue may name a cohort that has no object."""

    name: str
    parent: str
    resource_groups: tuple[ResourceGroup, ...]
    fair_sharing_weight: float | None
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """Where a Workload stands in its ClusterQueue (positions from 0, as Kueue counts them)."""

    cluster_queue: str
    position: int
    listed: int  # Workloads in the answer: all of the queue when ``complete``
    complete: bool  # False when the answer stopped at the limit
    local_queue: str
    local_position: int
    polled_at: float


# ---- parsing ---------------------------------------------------------------------------------------


def _quantity(raw: Any, what: str, p: Problems) -> float | None:
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except ValueError:
        p.append(f"{what}: not a quantity: {raw!r}")
        return None


def _named_items(raw: Any, where: str, p: Problems) -> Iterator[tuple[str, dict, str]]:
    """(name, object, its path) of each item of a list keyed by ``name`` (flavors, resources);
    an item without one is a problem and skipped."""
    for i, item in enumerate(as_list(raw, where, p)):
        w = f"{where}[{i}]"
        item = as_dict(item, w, p)
        name = as_str(item.get("name"), w + ".name", p)
        if name:
            yield name, item, w
        else:
            p.append(f"{w}.name missing")


def _resource_groups(raw: Any, where: str, p: Problems) -> tuple[ResourceGroup, ...]:
    groups = []
    for i, rg in enumerate(as_list(raw, where, p)):
        w = f"{where}[{i}]"
        rg = as_dict(rg, w, p)
        covered = tuple(r for j, r in enumerate(as_list(rg.get("coveredResources"), w + ".coveredResources", p))
                        if as_str(r, f"{w}.coveredResources[{j}]", p))
        flavors = []
        for name, fq, fw in _named_items(rg.get("flavors"), w + ".flavors", p):
            quotas = tuple(
                ResourceQuota(rname, _quantity(rq.get("nominalQuota"), rw + ".nominalQuota", p) or 0,
                              _quantity(rq.get("borrowingLimit"), rw + ".borrowingLimit", p),
                              _quantity(rq.get("lendingLimit"), rw + ".lendingLimit", p))
                for rname, rq, rw in _named_items(fq.get("resources"), fw + ".resources", p))
            names = [q.name for q in quotas]
            if names != list(covered):
                # "Each flavor MUST list all the resources listed for this group in the same order"
                # (clusterqueue_types.go:271-272; the CRD's CEL rule at :254 and Kueue's webhook
                # refuse the object, but a server without CEL, before 1.25, stores it): which quota
                # belongs to which resource is then unknowable, so the queue is not read at all.
                raise ParseError(f"{fw} ({name}) lists resources {names}, not the group's coveredResources {list(covered)}")
            flavors.append(FlavorQuotas(name, quotas))
        groups.append(ResourceGroup(covered, tuple(flavors)))
    return tuple(groups)


def _usage(raw: Any, where: str, p: Problems) -> tuple[ResourceUsage, ...]:
    # total and borrowed are omitempty (clusterqueue_types.go:422, 427): absent is zero
    return tuple(
        ResourceUsage(flavor, name, _quantity(ru.get("total"), rw + ".total", p) or 0,
                      _quantity(ru.get("borrowed"), rw + ".borrowed", p) or 0)
        for flavor, fu, w in _named_items(raw, where, p)
        for name, ru, rw in _named_items(fu.get("resources"), w + ".resources", p))


def _weight(spec: dict, p: Problems) -> float | None:
    fs = as_dict(spec.get("fairSharing"), "spec.fairSharing", p)
    return _quantity(fs.get("weight"), "spec.fairSharing.weight", p)


def _named(obj: Any, kind: str, p: Problems) -> tuple[str, dict, dict]:
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    name = as_dict(obj.get("metadata"), "metadata", p).get("name")
    if not isinstance(name, str) or not name:
        raise ParseError(f"{kind} without metadata.name")
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, dict):
        # A spec that is not an object leaves nothing to judge the queue by: the object is skipped.
        raise ParseError(f"{kind} {name}: spec is a {type(spec).__name__}, not an object")
    return name, spec or {}, as_dict(obj.get("status"), "status", p)


def parse_cluster_queue(obj: Any) -> ClusterQueue:
    """Decode a ClusterQueue of either API version; problems in single fields land in ``problems``.

    Raises :class:`ParseError` when the object has no name, or its spec or resource groups are
    not what the API allows (a queue whose flavors cannot be read cannot be judged at all): a
    flavor whose resources are not its group's ``coveredResources``, in order.
    """
    p: Problems = []
    name, spec, status = _named(obj, "ClusterQueue", p)
    raw_groups = spec.get("resourceGroups")
    if raw_groups is not None and not isinstance(raw_groups, list):
        raise ParseError(f"ClusterQueue {name}: spec.resourceGroups is a {type(raw_groups).__name__}, not a list")
    cohort = as_str(spec.get("cohortName"), "spec.cohortName", p) or as_str(spec.get("cohort"), "spec.cohort", p)
    stop_policy = as_str(spec.get("stopPolicy"), "spec.stopPolicy", p) or "None"
    if stop_policy not in STOP_POLICIES:
        p.append(f"spec.stopPolicy: unknown value {stop_policy!r}")
    active, reason, message, has_condition = False, "", "", False
    for i, c in enumerate(as_list(status.get("conditions"), "status.conditions", p)):
        c = as_dict(c, f"status.conditions[{i}]", p)
        if c.get("type") == "Active":
            has_condition = True
            active = as_str(c.get("status"), f"status.conditions[{i}].status", p) == "True"
            reason = as_str(c.get("reason"), f"status.conditions[{i}].reason", p)
            message = as_str(c.get("message"), f"status.conditions[{i}].message", p)
    return ClusterQueue(
        name=name,
        cohort=cohort,
        resource_groups=_resource_groups(raw_groups, "spec.resourceGroups", p),
        stop_policy=stop_policy,
        queueing_strategy=as_str(spec.get("queueingStrategy"), "spec.queueingStrategy", p) or "BestEffortFIFO",
        fair_sharing_weight=_weight(spec, p),
        active=active,
        active_reason=reason,
        active_message=message,
        has_active_condition=has_condition,
        reservation=_usage(status.get("flavorsReservation"), "status.flavorsReservation", p),
        usage=_usage(status.get("flavorsUsage"), "status.flavorsUsage", p),
        pending_workloads=as_int(status.get("pendingWorkloads"), "status.pendingWorkloads", p),
        reserving_workloads=as_int(status.get("reservingWorkloads"), "status.reservingWorkloads", p),
        admitted_workloads=as_int(status.get("admittedWorkloads"), "status.admittedWorkloads", p),
        problems=tuple(p),
    )


def parse_cohort(obj: Any) -> Cohort:
    """Decode a Cohort (v1beta2 ``spec.parentName``; v1beta1 names it the same,
    apis/kueue/v1beta1/cohort_types.go:35)."""
    p: Problems = []
    name, spec, _ = _named(obj, "Cohort", p)
    return Cohort(name, as_str(spec.get("parentName"), "spec.parentName", p),
                  _resource_groups(spec.get("resourceGroups"), "spec.resourceGroups", p), _weight(spec, p), tuple(p))


# ---- families ----------------------------------------------------------------------------------

CLUSTER_QUEUE_FLAVOR = Family(
    "gangscope_cluster_queue_flavor_info", "info",
    "Each flavor of the ClusterQueue's resource groups, in the order Kueue tries them (order from 0), with the "
    "Topology its ResourceFlavor names (topology, empty for a flavor without one or without a ResourceFlavor object).",
    ("cluster_queue", "flavor", "order", "topology"),
)
CLUSTER_QUEUE_ACTIVE = Family(
    "gangscope_cluster_queue_active", "gauge",
    "Whether Kueue admits Workloads from the ClusterQueue (1) or not (0), with the reason of its Active condition "
    "(Ready when active; Stopped, FlavorNotFound, TopologyNotFound, AdmissionCheckNotFound, ... when not; empty before "
    "Kueue wrote the condition).",
    ("cluster_queue", "reason"),
)
CLUSTER_QUEUE_NOMINAL = Family(
    "gangscope_cluster_queue_nominal_quota", "gauge",
    "Nominal quota of each resource in each flavor of the ClusterQueue (spec.resourceGroups), with the flavor's Topology.",
    ("cluster_queue", "flavor", "resource", "topology"),
)
CLUSTER_QUEUE_RESERVED = Family(
    "gangscope_cluster_queue_reserved", "gauge",
    "Quota of each resource in each flavor reserved by the ClusterQueue's Workloads (status.flavorsReservation), with "
    "the flavor's Topology.",
    ("cluster_queue", "flavor", "resource", "topology"),
)
CLUSTER_QUEUE_USED = Family(
    "gangscope_cluster_queue_used", "gauge",
    "Quota of each resource in each flavor used by the ClusterQueue's admitted Workloads (status.flavorsUsage), with the "
    "flavor's Topology.",
    ("cluster_queue", "flavor", "resource", "topology"),
)
FAMILIES = (CLUSTER_QUEUE_FLAVOR, CLUSTER_QUEUE_ACTIVE, CLUSTER_QUEUE_NOMINAL, CLUSTER_QUEUE_RESERVED, CLUSTER_QUEUE_USED)


def render_cluster_queue(cq: ClusterQueue, flavor_topology: Callable[[str], str],
                         skip: frozenset[Family] = frozenset()) -> dict[Family, list[str]]:
    """The lines of one ClusterQueue, per family; ``flavor_topology(flavor)`` is the Topology
    name of a ResourceFlavor ("" when it has none or is not known); families in ``skip``
    (--metric-denylist) are never formatted.

    Series per ClusterQueue: 1 (active) + F (flavors) + 3 x the (flavor, resource) pairs of its
    quota, reservation and usage: a queue of 2 flavors of 3 resources has 1 + 2 + 18 = 21.
    """
    topo = {f: flavor_topology(f) for f in cq.flavor_names}
    for u in (*cq.reservation, *cq.usage):
        if u.flavor not in topo:
            topo[u.flavor] = flavor_topology(u.flavor)
    out: dict[Family, list[str]] = {}
    if CLUSTER_QUEUE_ACTIVE not in skip:
        out[CLUSTER_QUEUE_ACTIVE] = [CLUSTER_QUEUE_ACTIVE.sample((cq.name, cq.active_reason), 1 if cq.active else 0)]
    if CLUSTER_QUEUE_FLAVOR not in skip:
        out[CLUSTER_QUEUE_FLAVOR] = [CLUSTER_QUEUE_FLAVOR.sample((cq.name, f, str(i), topo[f]), 1)
                                     for i, f in enumerate(dict.fromkeys(cq.flavor_names))]
    if CLUSTER_QUEUE_NOMINAL not in skip:
        out[CLUSTER_QUEUE_NOMINAL] = [CLUSTER_QUEUE_NOMINAL.sample((cq.name, f.name, q.name, topo[f.name]), q.nominal)
                                      for rg in cq.resource_groups for f in rg.flavors for q in f.resources]
    if CLUSTER_QUEUE_RESERVED not in skip:
        out[CLUSTER_QUEUE_RESERVED] = [CLUSTER_QUEUE_RESERVED.sample((cq.name, u.flavor, u.resource, topo[u.flavor]), u.total)
                                       for u in cq.reservation]
    if CLUSTER_QUEUE_USED not in skip:
        out[CLUSTER_QUEUE_USED] = [CLUSTER_QUEUE_USED.sample((cq.name, u.flavor, u.resource, topo[u.flavor]), u.total)
                                   for u in cq.usage]
    return out

