"""Which metric names alerts, recording rules and dashboards may use, and how to find them in PromQL.

The names are a contract between the exporters and everything outside the code that queries
them (issues 2-4 list them): a rule or panel that names anything else is querying a series that
will never exist. Kueue's names are from its pkg/metrics/metrics.go (shared reference table).
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

GANGSCOPE = frozenset(
    {
        # collector (workloads, topology, source health)
        "gangscope_workload_info",
        "gangscope_workload_stage",
        "gangscope_workload_condition",
        "gangscope_workload_created_timestamp_seconds",
        "gangscope_workload_quota_reserved_timestamp_seconds",
        "gangscope_workload_admitted_timestamp_seconds",
        "gangscope_workload_pods_ready_timestamp_seconds",
        "gangscope_workload_finished_timestamp_seconds",
        "gangscope_workload_evictions_total",
        "gangscope_workload_requested_gpus",
        "gangscope_workload_topology_pods",
        "gangscope_workload_unhealthy_node",
        "gangscope_workload_pending_reason",
        "gangscope_workload_requeues",
        "gangscope_workload_requeue_at_timestamp_seconds",
        "gangscope_workload_admission_check",
        "gangscope_workload_admission_check_transition_timestamp_seconds",
        "gangscope_workload_queue_position",
        "gangscope_workload_local_queue_position",
        "gangscope_topology_evictions_total",
        "gangscope_topology_unresolved_workloads",
        "gangscope_workload_topology_request",
        "gangscope_workload_domains_spanned",
        "gangscope_workload_locality_ratio",
        "gangscope_workload_past_execution_seconds",
        # ClusterQueues
        "gangscope_cluster_queue_active",
        "gangscope_cluster_queue_flavor_info",
        "gangscope_cluster_queue_nominal_quota",
        "gangscope_cluster_queue_reserved",
        "gangscope_cluster_queue_used",
        # capacity per domain
        "gangscope_domain_gpus",
        "gangscope_domain_gpus_bound",
        "gangscope_domain_placeable_pods",
        "gangscope_domains",
        "gangscope_workload_fit",
        "gangscope_fragmentation_blocked_workloads",
        "gangscope_workload_domains_needed",
        "gangscope_node_not_ready",
        "gangscope_source_up",
        "gangscope_source_last_sync_timestamp_seconds",
        "gangscope_source_errors_total",
        "gangscope_source_objects",
        "gangscope_parse_errors_total",
        "gangscope_internal_errors_total",
        "gangscope_exposition_dropped_series_total",
        "gangscope_shard_ordinal",
        "gangscope_total_shards",
        # gangs
        "gangscope_podgroup_phase",
        "gangscope_podgroup_min_member",
        "gangscope_podgroup_pods",
        "gangscope_podgroup_phase_timestamp_seconds",
        "gangscope_gang_info",
        "gangscope_gang_stage",
        "gangscope_gang_assembly_stuck",
        "gangscope_gang_idle_gpus",
        "gangscope_gang_pods",
        "gangscope_gang_idle_gpu_seconds_total",
        "gangscope_podgroup_unschedulable",
        "gangscope_podgroup_info",
        # the job around the gang
        "gangscope_job_info",
        "gangscope_job_trainer_metric",
        "gangscope_ray_cluster_info",
        "gangscope_ray_cluster_workers",
        "gangscope_ray_job_status",
        "gangscope_job_condition",
        "gangscope_job_restarts_total",
        "gangscope_job_child_jobs",
        "gangscope_job_progress_ratio",
        "gangscope_job_progress_updated_timestamp_seconds",
        "gangscope_job_progress_changed_timestamp_seconds",
        "gangscope_job_progress_remaining_seconds",
        "gangscope_job_groups",
        "gangscope_job_groups_reported_ready",
        # node agent
        "gangscope_gpu_info",
        "gangscope_gpu_up",
        "gangscope_gpu_pod_info",
        "gangscope_gpu_mig_device_info",
        "gangscope_nvlink_transmit_bytes_total",
        "gangscope_nvlink_receive_bytes_total",
        "gangscope_nvlink_link_up",
        "gangscope_nvlink_errors_total",
        "gangscope_pcie_transmit_bytes_total",
        "gangscope_pcie_receive_bytes_total",
        "gangscope_pcie_link_generation",
        "gangscope_pcie_link_width",
        "gangscope_fabric_port_transmit_bytes_total",
        "gangscope_fabric_port_receive_bytes_total",
        "gangscope_fabric_port_up",
        "gangscope_nvlink_version",
        "gangscope_gpu_errors_total",
        "gangscope_gpu_field_supported",
        "gangscope_gpu_fabric_info",
        "gangscope_gpu_fabric_health",
        "gangscope_gpu_platform_info",
        "gangscope_pcie_read_interval_seconds",
        "gangscope_pcie_read_gaps_total",
        "gangscope_nvlink_read_gaps_total",
        "gangscope_pcie_throughput_bytes_per_second",
    }
)

# dcgm-exporter families the join rules and dashboards may name: NVIDIA/dcgm-exporter
# etc/default-counters.csv @00d6d34 (GPU_UTIL line 23, MEM_COPY_UTIL 24, XID_ERRORS 29,
# ECC_DBE_VOL_TOTAL 43 (commented out by default: enabled by users who want ECC), remapped rows 63).
DCGM = frozenset(
    {
        "DCGM_FI_DEV_GPU_UTIL",
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "DCGM_FI_DEV_XID_ERRORS",
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
    }
)

_KUEUE_GAUGES_COUNTERS = """
kueue_admission_attempts_total kueue_admission_cycle_preemption_skips kueue_admitted_active_workloads
kueue_admitted_workloads_total kueue_build_info kueue_cluster_queue_borrowing_limit kueue_cluster_queue_info
kueue_cluster_queue_lending_limit kueue_cluster_queue_nominal_quota kueue_cluster_queue_resource_pending
kueue_cluster_queue_resource_reservation kueue_cluster_queue_resource_usage kueue_cluster_queue_status
kueue_cluster_queue_weighted_share kueue_cohort_info kueue_cohort_subtree_admitted_active_workloads
kueue_cohort_subtree_admitted_workloads_total kueue_cohort_subtree_quota kueue_cohort_subtree_resource_reservations
kueue_cohort_weighted_share kueue_evicted_workloads_once_total kueue_evicted_workloads_total kueue_finished_workloads
kueue_finished_workloads_total kueue_local_queue_admission_fair_sharing_usage kueue_local_queue_admitted_active_workloads
kueue_local_queue_admitted_workloads_total kueue_local_queue_evicted_workloads_total kueue_local_queue_finished_workloads
kueue_local_queue_finished_workloads_total kueue_local_queue_pending_workloads kueue_local_queue_quota_reserved_workloads_total
kueue_local_queue_reserving_active_workloads kueue_local_queue_resource_reservation kueue_local_queue_resource_usage
kueue_local_queue_status kueue_local_queue_unadmitted_workloads kueue_pending_scheduling_hashes kueue_pending_workloads
kueue_preempted_workloads_total kueue_preemption_target_recomputations_total kueue_quota_reserved_workloads_total
kueue_replaced_workload_slices_total kueue_reserving_active_workloads kueue_unadmitted_workloads
multikueue_workloads_admitted_total multikueue_workloads_dispatched_total
"""
_KUEUE_HISTOGRAMS = """
kueue_admission_attempt_duration_seconds kueue_admission_checks_wait_time_seconds kueue_admission_wait_time_seconds
kueue_admitted_until_ready_wait_time_seconds kueue_execution_time_seconds kueue_local_queue_admission_checks_wait_time_seconds
kueue_local_queue_admission_wait_time_seconds kueue_local_queue_admitted_until_ready_wait_time_seconds
kueue_local_queue_execution_time_seconds kueue_local_queue_quota_reserved_wait_time_seconds
kueue_local_queue_ready_wait_time_seconds kueue_pod_scheduling_gate_removal_seconds kueue_pods_ready_to_evicted_time_seconds
kueue_quota_reserved_wait_time_seconds kueue_ready_wait_time_seconds kueue_workload_creation_latency_seconds
kueue_workload_eviction_latency_seconds
"""
KUEUE = frozenset(_KUEUE_GAUGES_COUNTERS.split()) | frozenset(
    f"{name}{suffix}" for name in _KUEUE_HISTOGRAMS.split() for suffix in ("_bucket", "_sum", "_count")
)
# Series Prometheus itself writes for every target and alert.
PROMETHEUS = frozenset({"up", "ALERTS", "ALERTS_FOR_STATE"})

# Ray's own series the training rules join to Workloads (ray-project/ray 09c36104
# src/ray/stats/metric_defs.cc placement_groups "State"; 07cdf040
# doc/source/ray-observability/reference/system-metrics.rst ray_tasks, ray_placement_groups).
RAY = frozenset({"ray_placement_groups", "ray_tasks"})
# The series alerts/config.yaml's training.throughput maps: the jobs' own.
THROUGHPUT = frozenset(
    t["metric"] for t in yaml.safe_load((Path(__file__).resolve().parents[1] / "alerts" / "config.yaml").read_text())
    .get("training", {}).get("throughput", ()))

KNOWN = GANGSCOPE | KUEUE | PROMETHEUS | DCGM | RAY | THROUGHPUT

_KEYWORDS = frozenset(
    "and or unless by without on ignoring group_left group_right offset bool inf nan".split()
)
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_BRACES = re.compile(r"\{[^{}]*\}")
_LABEL_LIST = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^()]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_VARIABLE = re.compile(r"\$\{[^}]*\}|\$\w+")
_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][a-zA-Z0-9_:]*)(?![\w:])(\s*\()?")


def metric_names(expr: str) -> set[str]:
    """Every metric (or recorded series) name a PromQL expression selects.

    Strips strings, label matchers, label lists, ranges and Grafana variables, then keeps the
    identifiers that are neither keywords nor function calls nor numbers/durations.
    """
    text = _STRING.sub('""', expr)
    text = _VARIABLE.sub("1", text)
    text = _BRACES.sub("", text)
    text = _LABEL_LIST.sub("", text)
    text = _RANGE.sub("", text)
    names = set()
    for match in _IDENT.finditer(text):
        name, call = match.group(1), match.group(2)
        if call or name in _KEYWORDS:
            continue
        names.add(name)
    # offset durations such as "15m" start with a digit and never match; "e9" in 1e9 neither.
    return names
