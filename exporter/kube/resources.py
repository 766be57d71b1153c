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
    # Server-side narrowing of the LIST/WATCH (pods: only those of gangs, Kueue and job controllers).
    label_selector: str | None = None
    field_selector: str | None = None
    # RBAC grants only the objects of these names (resourceNames; empty: every object). A create
    # cannot be narrowed so (the name is not known when it is authorized): its rule names none.
    names: tuple[str, ...] = ()


# The collector (cluster-wide).
WORKLOADS = Resource("workloads", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "workloads", "Workload", True)
LOCAL_QUEUES = Resource("localqueues", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "localqueues", "LocalQueue", True)
TOPOLOGIES = Resource("topologies", "kueue.x-k8s.io", ("v1beta2", "v1beta1", "v1alpha1"), "topologies", "Topology", False)
RESOURCE_FLAVORS = Resource("resourceflavors", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "resourceflavors", "ResourceFlavor", False)
# ClusterQueues (the flavors Kueue tries for a Workload, its quotas, whether it is active and why
# not) and Cohorts (the tree ClusterQueues borrow in): kueue apis/kueue/v1beta2/clusterqueue_types.go,
# cohort_types.go at ff69552e; read by exporter.cluster.clusterqueues. Cohort objects are optional
# in Kueue (a cohort named by a ClusterQueue needs none), so a cluster without them is normal.
CLUSTER_QUEUES = Resource("clusterqueues", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "clusterqueues", "ClusterQueue", False)
COHORTS = Resource("cohorts", "kueue.x-k8s.io", ("v1beta2", "v1beta1"), "cohorts", "Cohort", False)
# Whole Nodes: the capacity per domain reads status.allocatable, the Ready condition, spec.unschedulable
# and spec.taints (exporter.cluster.nodes keeps only those and the labels).
NODES = Resource("nodes", "", ("v1",), "nodes", "Node", False)
COSCHEDULING_PODGROUPS = Resource("podgroups_coscheduling", "scheduling.x-k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True)
COSCHEDULING_LEGACY_PODGROUPS = Resource("podgroups_coscheduling_legacy", "scheduling.sigs.k8s.io", ("v1alpha1",), "podgroups", "PodGroup", True)
VOLCANO_PODGROUPS = Resource("podgroups_volcano", "scheduling.volcano.sh", ("v1beta1",), "podgroups", "PodGroup", True)
# Volcano Queues (cluster-scoped; volcano ed72c7c8 staging/src/volcano.sh/apis/pkg/apis/scheduling/
# v1beta1/types.go:350-371): what a group waiting for its queue waits for, read by
# exporter.cluster.volcano_queues (explain only). Optional: a cluster without Volcano serves none.
VOLCANO_QUEUES = Resource("queues_volcano", "scheduling.volcano.sh", ("v1beta1",), "queues", "Queue", False)
NATIVE_PODGROUPS = Resource("podgroups_native", "scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2"), "podgroups", "PodGroup", True)
# 1.35 served only v1alpha1 (Workload with spec.podGroups), 1.36 v1alpha2, 1.37 v1beta1 and v1alpha3
# (kubernetes/api v0.35.0, v0.36.0, 10b39a39: scheduling/<version>/types.go); each shape is parsed
# by exporter.cluster.podgroups.parse_native_workload.
NATIVE_WORKLOADS = Resource("workloads_native", "scheduling.k8s.io", ("v1beta1", "v1alpha3", "v1alpha2", "v1alpha1"),
                            "workloads", "Workload", True)
# CompositePodGroup: 1.37 v1alpha3 (kubernetes/api 10b39a39 scheduling/v1alpha3/types.go:1177); an
# intermediate v1alpha2 carried it too (testdata golden at becb2094).
NATIVE_COMPOSITE_PODGROUPS = Resource("compositepodgroups_native", "scheduling.k8s.io", ("v1alpha3", "v1alpha2"),
                                      "compositepodgroups", "CompositePodGroup", True)
# NVIDIA KAI Scheduler (kai-scheduler/KAI-Scheduler pkg/apis/scheduling/v2alpha2/podgroup_types.go).
KAI_PODGROUPS = Resource("podgroups_kai", "scheduling.run.ai", ("v2alpha2",), "podgroups", "PodGroup", True)
# The job controllers around gangs.
JOBSETS = Resource("jobsets", "jobset.x-k8s.io", ("v1alpha2",), "jobsets", "JobSet", True)
TRAINJOBS = Resource("trainjobs", "trainer.kubeflow.org", ("v1alpha1",), "trainjobs", "TrainJob", True)
LEADERWORKERSETS = Resource("leaderworkersets", "leaderworkerset.x-k8s.io", ("v1",), "leaderworkersets", "LeaderWorkerSet", True)
# KubeRay (ray-project/kuberay feeaf72f ray-operator/apis/ray/v1/): both kinds are admitted by Kueue
# (kueue ff69552e pkg/controller/jobs/rayjob, raycluster); read by exporter.cluster.ray.
RAYJOBS = Resource("rayjobs", "ray.io", ("v1",), "rayjobs", "RayJob", True)
RAYCLUSTERS = Resource("rayclusters", "ray.io", ("v1",), "rayclusters", "RayCluster", True)

# Pods of gangs, of Kueue Workloads and of job controllers, never every pod of the cluster: one
# watch per selector the API server can evaluate (a pod in several is kept once, by uid; see
# exporter.cluster.pods). Labels and annotations the controllers write, with their sources:
# kueue.x-k8s.io/podset on every pod of an admitted job (kueue ff69552e
# pkg/controller/jobframework/reconciler.go:1775, pkg/constants/constants.go:58); the Coscheduling
# label its controller lists pods by (scheduler-plugins 903da7df pkg/controllers/podgroup_controller.go:92-97,
# apis/scheduling/v1alpha1/types.go:112) and its pre-2023 spelling; Volcano's and KAI's pods name
# their group in an annotation, which no selector can see, so they are chosen by schedulerName
# (KAI-Scheduler d5bc503a pkg/common/constants/constants.go:21 "kai-scheduler"; --kai-scheduler-name
# and --volcano-scheduler-name override); JobSet's and LeaderWorkerSet's pods by the labels their
# controllers set (jobset 08dfbdfd api/jobset/v1alpha2/jobset_types.go:24; lws 060ab4da
# api/leaderworkerset/v1/leaderworkerset_types.go:37). Native scheduling.k8s.io pods name their
# PodGroup in spec.schedulingGroup, which is not a selectable field: they are seen when they carry
# one of these labels (Kueue's, JobSet's, LWS's).
PODS_KUEUE = Resource("pods_kueue", "", ("v1",), "pods", "Pod", True, label_selector="kueue.x-k8s.io/podset")
PODS_COSCHEDULING = Resource("pods_coscheduling", "", ("v1",), "pods", "Pod", True, label_selector="scheduling.x-k8s.io/pod-group")
PODS_COSCHEDULING_LEGACY = Resource("pods_coscheduling_legacy", "", ("v1",), "pods", "Pod", True,
                                    label_selector="pod-group.scheduling.sigs.k8s.io")
PODS_VOLCANO = Resource("pods_volcano", "", ("v1",), "pods", "Pod", True, field_selector="spec.schedulerName=volcano")
PODS_KAI = Resource("pods_kai", "", ("v1",), "pods", "Pod", True, field_selector="spec.schedulerName=kai-scheduler")
PODS_JOBSET = Resource("pods_jobset", "", ("v1",), "pods", "Pod", True, label_selector="jobset.sigs.k8s.io/jobset-name")
PODS_LWS = Resource("pods_lws", "", ("v1",), "pods", "Pod", True, label_selector="leaderworkerset.sigs.k8s.io/name")
POD_RESOURCES = (PODS_KUEUE, PODS_COSCHEDULING, PODS_COSCHEDULING_LEGACY, PODS_VOLCANO, PODS_KAI, PODS_JOBSET, PODS_LWS)
# Kueue's visibility API: a subresource GET, polled by exporter.cluster.queue_positions.
QUEUE_POSITIONS = Resource("queue_positions", "visibility.kueue.x-k8s.io", ("v1beta2", "v1beta1"),
                           "clusterqueues/pendingworkloads", "PendingWorkloadsSummary", False, verbs=("get",))
# The same per LocalQueue, namespaced (a collector limited to --namespaces asks this one): one
# source with the above (its health is queue_positions), kueue pkg/visibility/storage/pending_workloads_lq.go.
QUEUE_POSITIONS_LOCAL = Resource("queue_positions", "visibility.kueue.x-k8s.io", ("v1beta2", "v1beta1"),
                                 "localqueues/pendingworkloads", "PendingWorkloadsSummary", True, verbs=("get",))

COLLECTOR_RESOURCES = (
    WORKLOADS, LOCAL_QUEUES, TOPOLOGIES, RESOURCE_FLAVORS, NODES, CLUSTER_QUEUES, COHORTS,
    COSCHEDULING_PODGROUPS, COSCHEDULING_LEGACY_PODGROUPS, VOLCANO_PODGROUPS, VOLCANO_QUEUES, NATIVE_PODGROUPS,
    NATIVE_WORKLOADS,
    QUEUE_POSITIONS, QUEUE_POSITIONS_LOCAL, NATIVE_COMPOSITE_PODGROUPS, KAI_PODGROUPS, JOBSETS, TRAINJOBS, LEADERWORKERSETS,
    RAYJOBS, RAYCLUSTERS, *POD_RESOURCES,
)

# Automatic sharding of the collector (--pod/--pod-namespace, exporter.kube.sharding): its own Pod
# and the StatefulSet that owns it, in its own namespace (a Role: deploy/components/sharded).
SHARDING_POD = Resource("shard_pod", "", ("v1",), "pods", "Pod", True, verbs=("get",))
STATEFULSETS = Resource("statefulset", "apps", ("v1",), "statefulsets", "StatefulSet", True)
# The cuts weighted by Workloads (exporter.kube.shard_cuts): one ConfigMap in the collector's own
# namespace that shard 0 writes (create, then update) and every shard watches by name.
SHARD_CUTS_CONFIGMAP = "gangscope-shard-cuts"
SHARD_CUTS = Resource("shard_cuts", "", ("v1",), "configmaps", "ConfigMap", True,
                      verbs=("get", "list", "watch", "create", "update"), names=(SHARD_CUTS_CONFIGMAP,))
SHARDING_RESOURCES = (SHARDING_POD, STATEFULSETS, SHARD_CUTS)
# The namespace list every shard cuts the hash space by (--shard-ranges balanced,
# exporter.kube.sharding.balanced_bounds): names and creation times, cluster-scoped (a ClusterRole).
NAMESPACES = Resource("namespaces", "", ("v1",), "namespaces", "Namespace", False, metadata_only=True,
                      verbs=("list", "watch"))
COLLECTOR_READS = (*COLLECTOR_RESOURCES, NAMESPACES)  # what the collector's ClusterRole grants

# The node agent: its own Node (get + watch by name), the pods bound to it, and the Kueue Topologies
# (a few cluster-scoped objects) its topology levels come from when --topology-levels is not given.
AGENT_NODE = Resource("node", "", ("v1",), "nodes", "Node", False)
AGENT_PODS = Resource("pods", "", ("v1",), "pods", "Pod", True)
AGENT_RESOURCES = (AGENT_NODE, AGENT_PODS, TOPOLOGIES)
