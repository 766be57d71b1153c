"""Every Kubernetes resource gangscope reads, as data.

Discovery walks these in order of preference; the informers watch the first version served
(a resource whose verbs are only ``get`` is polled instead, by its own module); the RBAC test in
``tests/`` derives the ClusterRoles' rules from this table, so a new resource read without its
RBAC fails CI.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Resource:
    """A resource to list/watch: ``source`` names it in health series and logs."""

    source: str
    group: str  # "" for the core API
    versions: tuple[str, ...]  # in order of preference
    plural: str
    kind: str
    namespaced: bool
    metadata_only: bool = False  # list/watch as PartialObjectMetadata (labels are all we need)
    verbs: tuple[str, ...] = ("get", "list", "watch")


# The collector (cluster-wide).
WORKLOADS = Resource("workloads", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", "Workload", True)
LOCAL_QUEUES = Resource("localqueues", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues", "LocalQueue", True)
TOPOLOGIES = Resource("topologies", "kueue.x-k8s.io", ("v1beta2", "v1beta1", "v1alpha1"), "topologies", "Topology", False)
RESOURCE_FLAVORS = Resource("resourceflavors", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "resourceflavors", "ResourceFlavor", False)
# Whole Nodes: the capacity per domain reads status.allocatable, the Ready condition, spec.unschedulable
# and spec.taints (exporter.cluster.nodes keeps only those and the labels).
NODES = Resource("nodes", "", ("v1",), "nodes", "Node", False)
COSCHEDULING_PODGROUPS = Resource("podgroups_coscheduling", "scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True)
COSCHEDULING_LEGACY_PODGROUPS = Resource("podgroups_coscheduling_legacy", "scheduling.sigs.k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True)
VOLCANO_PODGROUPS = Resource("podgroups_volcano", "scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup", True)
NATIVE_PODGROUPS = Resource("podgroups_native", "scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2"), "podgroups", "PodGroup", True)
NATIVE_WORKLOADS = Resource("workloads_native", "scheduling.k8s.io", ("v1alpha1",), "workloads", "Workload", True)
# Kueue's visibility API: a subresource GET, polled by exporter.cluster.queue_positions.
QUEUE_POSITIONS = Resource("queue_positions", "visibility.kueue.x-k8s.io", ("v1beta2", "v1beta1"),
                           "clusterqueues/pendingworkloads", "PendingWorkloadsSummary", False, verbs=("get",))

COLLECTOR_RESOURCES = (
    WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, RESOURCE_FLAVORS, NODES,
    COSCHEDULING_PODGROUPS, COSCHEDULING_LEGACY_PODGROUPS, VOLCANO_PODGROUPS, NATIVE_PODGROUPS, NATIVE_WORKLOADS,
    QUEUE_POSITIONS,
)

# The node agent: its own Node (get + watch by name), the pods bound to it, and the Kueue Topologies
# (a few cluster-scoped objects) its topology levels come from when --topology-levels is not given.
AGENT_NODE = Resource("node", "", ("v1",), "nodes", "Node", False)
AGENT_PODS = Resource("pods", "", ("v1",), "pods", "Pod", True)
AGENT_RESOURCES = (AGENT_NODE, AGENT_PODS, TOPOLOGIES)
