#!/usr/bin/env python3
"""Writes gangscope's Grafana dashboards (dashboards/*.json) with grafana-foundation-sdk.

Why generated: the four dashboards share a data source variable, topology variables, units and
query idioms; building them from one small vocabulary of panel helpers keeps those rules true
on every panel (tests/test_dashboards.py checks them on the JSON), and the SDK's typed builders
(pinned to its Grafana 11.6 build) emit the JSON schema Grafana 11 provisions without
migration. The committed JSON is what users import; `--check` tells whether it is current.

Usage: python dashboards/generate.py [--check]
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from grafana_foundation_sdk.builders import dashboard as dash
from grafana_foundation_sdk.builders import common, heatmap, prometheus, stat, statetimeline, table, timeseries
from grafana_foundation_sdk.cog import variants
from grafana_foundation_sdk.cog.builder import Builder
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models import common as model_common
from grafana_foundation_sdk.models import dashboard as model
from grafana_foundation_sdk.models.prometheus import PromQueryFormat

HERE = Path(__file__).resolve().parent
DATASOURCE = model.DataSourceRef(type_val="prometheus", uid="${datasource}")
RATE = "$__rate_interval"
# Filters on the Workload join: the ClusterQueue variable narrows every per-workload query.
IN_CQ = 'on (namespace, workload) group_left () topk by (namespace, workload) (1, gangscope_workload_info{cluster_queue=~"$cluster_queue"})'
WL = 'namespace="$namespace", workload="$workload"'
WL_GPUS = f'on (node, gpu) group_left () max by (node, gpu) (gangscope_gpu_pod_info{{{WL}}})'
DOMAIN = 'block=~"$block", rack=~"$rack"'
NODE = 'node=~"$node"'


def new_or_increase(selector: str) -> str:
    """Counter rise per interval that also counts a series born in the interval (as the alerts do).

    gangscope's eviction counters are created by their first eviction at 1, so increase() alone
    shows nothing for a Workload's first eviction, the usual case. A series absent one interval
    earlier counts with its value if its target was already up then (not a restart or a new pod).
    """
    born = f"{selector} unless {selector} offset {RATE}"
    return f"((({born}) and on (job, instance) (up offset {RATE} == 1)) * 1 or increase({selector}[{RATE}]))"


@dataclass(frozen=True)
class Q:
    """One PromQL target: expression, legend, and whether it is an instant table query."""

    expr: str
    legend: str = ""
    instant: bool = False


def _targets(queries: Sequence[Q]) -> list[Builder[variants.Dataquery]]:
    built: list[Builder[variants.Dataquery]] = []
    for index, q in enumerate(queries):
        target = prometheus.Dataquery().expr(q.expr).ref_id(chr(ord("A") + index)).datasource(DATASOURCE)
        target = target.legend_format(q.legend or "__auto")
        if q.instant:
            target = target.instant().format(PromQueryFormat.TABLE)
        else:
            target = target.range()
        built.append(target)
    return built


def series(title: str, description: str, unit: str, *queries: Q, span: int = 12, height: int = 8, stack: bool = False) -> timeseries.Panel:
    panel = (
        timeseries.Panel()
        .title(title)
        .description(description)
        .unit(unit)
        .datasource(DATASOURCE)
        .targets(_targets(queries))
        .span(span)
        .height(height)
        .fill_opacity(30 if stack else 10)
    )
    if stack:
        from grafana_foundation_sdk.builders import common
        from grafana_foundation_sdk.models.common import StackingMode

        panel = panel.stacking(common.StackingConfig().mode(StackingMode.NORMAL))
    return panel


def single(title: str, description: str, unit: str, *queries: Q, span: int = 4, height: int = 5) -> stat.Panel:
    return (
        stat.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
        .targets(_targets(queries)).span(span).height(height)
    )


def grid(title: str, description: str, unit: str, *queries: Q, span: int = 12, height: int = 8) -> table.Panel:
    return (
        table.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
        .targets(_targets([Q(q.expr, q.legend, instant=True) for q in queries])).span(span).height(height)
    )


def density(title: str, description: str, unit: str, query: Q, span: int = 8, height: int = 8) -> heatmap.Panel:
    """A heatmap of how many series (domains) sit at each value over time: Grafana buckets the
    values of every series per time step (``calculate``), 8 buckets from the data's range."""
    buckets = common.HeatmapCalculationOptions().y_buckets(
        common.HeatmapCalculationBucketConfig().mode(model_common.HeatmapCalculationMode.COUNT).value("8"))
    return (
        heatmap.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
        .targets(_targets([query])).calculate(True).calculation(buckets).span(span).height(height)
    )


def timeline(title: str, description: str, unit: str, *queries: Q, span: int = 24, height: int = 6) -> statetimeline.Panel:
    return (
        statetimeline.Panel().title(title).description(description).unit(unit).datasource(DATASOURCE)
        .targets(_targets(queries)).span(span).height(height)
    )


def datasource_variable() -> dash.DatasourceVariable:
    return dash.DatasourceVariable("datasource").label("Data source").type("prometheus")


def label_variable(name: str, query: str, label: str, multi: bool = True) -> dash.QueryVariable:
    var = (
        dash.QueryVariable(name)
        .label(label)
        .datasource(DATASOURCE)
        .query({"query": query, "refId": "PrometheusVariableQueryEditor-VariableQuery", "qryType": 1})
        .refresh(model.VariableRefresh.ON_TIME_RANGE_CHANGED)
        .sort(model.VariableSort.ALPHABETICAL_ASC)
    )
    if multi:
        var = var.multi(True).include_all(True).all_value(".*")
    return var


def board(uid: str, title: str, description: str, variables: list, rows: list[tuple[str, list]]) -> dash.Dashboard:
    builder = (
        dash.Dashboard(title)
        .uid(uid)
        .description(description)
        .tags(["gangscope"])
        .time("now-6h", "now")
        .refresh("1m")
        .timezone("browser")
        .tooltip(model.DashboardCursorSync.CROSSHAIR)
        .editable()
        .with_variable(datasource_variable())
    )
    for variable in variables:
        builder = builder.with_variable(variable)
    for row_title, panels in rows:
        builder = builder.with_row(dash.Row(row_title))
        for panel in panels:
            builder = builder.with_panel(panel)
    return builder


def overview() -> dash.Dashboard:
    cq = label_variable("cluster_queue", "label_values(gangscope_workload_info, cluster_queue)", "ClusterQueue")
    stage = f"sum by (stage) ((gangscope_workload_stage == 1) * {IN_CQ})"
    return board(
        "gangscope-overview",
        "gangscope / Overview",
        "The job pipeline across the cluster: queued, inadmissible, preempting, held, admitted, assembling, running; why workloads wait; evictions by reason; GPUs held idle by partial gangs.",
        [cq],
        [
            (
                "Pipeline",
                [
                    single("Queued", "Workloads without reserved quota, waiting their turn.", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="queued"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Inadmissible", "Workloads Kueue did not admit for want of capacity or because of their configuration "
                           "(GangscopeWorkloadInadmissible, GangscopeWorkloadMisconfigured).", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="inadmissible"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Preempting", "Workloads waiting for the workloads Kueue preempted for them to release their quota.", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="preempting"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Held or in backoff", "Workloads held by policy (stopped queue, admission gate, on hold, waitForPodsReady) or "
                           "waiting out a requeue backoff after an eviction.", "short",
                           Q(f'sum((gangscope_workload_stage{{stage=~"held|backoff"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Admission checks", "Quota reserved, waiting for admission checks (provisioning, MultiKueue).", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="admission_checks"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Assembling", "Admitted workloads whose pods are not all ready: the gang is being scheduled.", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="assembling"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Running", "Admitted workloads with all pods ready, or, where Kueue writes no PodsReady (no waitForPodsReady), "
                           "with no joined gang still assembling.", "short",
                           Q(f'sum((gangscope_workload_stage{{stage="running"}} == 1) * {IN_CQ}) or vector(0)'), span=3),
                    single("Idle GPUs", "GPUs held by running pods of gangs below minMember: allocated, no training possible.", "short",
                           Q('sum(cluster_queue:gangscope_gang_idle_gpus:sum{cluster_queue=~"$cluster_queue"}) or vector(0)'), span=3),
                    series("Workloads by stage", "Count of workloads in each pipeline stage over time (gangscope_workload_stage).", "short",
                           Q(stage, "{{stage}}"), stack=True),
                    series("Kueue pending workloads", "Kueue's own pending counts per ClusterQueue: active are waiting for quota, inadmissible cannot be admitted.", "short",
                           Q('sum by (cluster_queue, status) (kueue_pending_workloads{cluster_queue=~"$cluster_queue"})', "{{cluster_queue}} {{status}}")),
                    series("Why workloads wait", "Workloads not admitted, by what Kueue's reason means: capacity, configuration (will not "
                           "clear by itself), preemption, policy, backoff, evaluation, admission_check (gangscope_workload_pending_reason).", "short",
                           Q(f"sum by (category) (gangscope_workload_pending_reason * {IN_CQ})", "{{category}}"), stack=True),
                    grid("Pending reasons", "Workloads not admitted per Kueue reason token and category, now.", "short",
                         Q(f"sum by (category, reason) (gangscope_workload_pending_reason * {IN_CQ})")),
                ],
            ),
            (
                "Evictions and waste",
                [
                    series("Evictions by reason", "Kueue evictions per reason (NodeFailures, PodsReadyTimeout, Preempted, ...) in each interval.", "short",
                           Q(f'sum by (reason) (increase(kueue_evicted_workloads_total{{cluster_queue=~"$cluster_queue"}}[{RATE}]))', "{{reason}}"), stack=True),
                    series("Idle GPUs of partial gangs", "GPUs held idle by gangs below minMember, per ClusterQueue.", "short",
                           Q('cluster_queue:gangscope_gang_idle_gpus:sum{cluster_queue=~"$cluster_queue"}', "{{cluster_queue}}"), stack=True),
                    series("Admission wait (p90)", "90th percentile of the time from creation to admission, per ClusterQueue (Kueue histogram).", "s",
                           Q(f'histogram_quantile(0.9, sum by (le, cluster_queue) (rate(kueue_admission_wait_time_seconds_bucket{{cluster_queue=~"$cluster_queue"}}[{RATE}])))', "{{cluster_queue}}")),
                    series("Stuck gangs", "Admitted gangs past their schedule timeout without reaching Running.", "short",
                           Q(f"count((gangscope_gang_assembly_stuck == 1) * {IN_CQ}) or vector(0)", "stuck")),
                    series("Idle GPU-hours per day", "GPU-hours held idle by gangs below their minimum over the last day, per "
                           "ClusterQueue and namespace (recorded cluster_queue_namespace:gangscope_gang_idle_gpu_hours:increase1d "
                           "from gangscope_gang_idle_gpu_seconds_total; gangs no Workload joins have no ClusterQueue).", "short",
                           Q('cluster_queue_namespace:gangscope_gang_idle_gpu_hours:increase1d{cluster_queue=~"$cluster_queue|"}',
                             "{{cluster_queue}} {{namespace}}"), stack=True),
                    grid("Stalled and restarting jobs", "Training jobs whose reported progress has not moved (seconds since it "
                         "last did, gangscope_job_progress_changed_timestamp_seconds) and JobSets that have restarted (restarts so far).", "short",
                         Q("time() - max by (namespace, kind, name) (gangscope_job_progress_changed_timestamp_seconds)"
                           " and on (namespace, kind, name) max by (namespace, kind, name) (gangscope_job_progress_ratio) < 1"),
                         Q("max by (namespace, kind, name) (gangscope_job_restarts_total) > 0")),
                ],
            ),
            (
                "gangscope health",
                [
                    series("Sources up", "Each watched or sampled source: 1 served and synced, 0 down or absent.", "short",
                           Q("min by (source) (gangscope_source_up)", "{{source}}"), span=8),
                    series("Parse and source errors", "Objects skipped as unparseable and errors talking to sources, per interval.", "short",
                           Q(f"sum by (source) (increase(gangscope_parse_errors_total[{RATE}]))", "parse {{source}}"),
                           Q(f"sum by (source) (increase(gangscope_source_errors_total[{RATE}]))", "error {{source}}"), span=8),
                    grid("Firing gangscope alerts", "gangscope alerts firing now (Prometheus's ALERTS series).", "short",
                         Q('sum by (alertname, severity) (ALERTS{alertname=~"Gangscope.*", alertstate="firing"})'), span=8),
                ],
            ),
        ],
    )


def topology() -> dash.Dashboard:
    variables = [
        label_variable("block", "label_values(gangscope_workload_topology_pods, block)", "Block"),
        label_variable("rack", 'label_values(gangscope_workload_topology_pods{block=~"$block"}, rack)', "Rack"),
    ]
    stuck = (
        f"count by (block, rack) (max by (namespace, workload, block, rack) (gangscope_workload_topology_pods{{{DOMAIN}}})"
        " * on (namespace, workload) group_left () (max by (namespace, workload) (gangscope_gang_assembly_stuck) == 1))"
    )

    # Evicted Workloads per rack, as GangscopeDomainNodeFailureEvictions counts them: the collector
    # counts each eviction once per domain at its --eviction-level (the rack by default).
    evicted_per_rack = f"sum by (block, rack, reason) {new_or_increase(f'gangscope_topology_evictions_total{{{DOMAIN}}}')}"

    def throughput(family: str, what: str) -> object:
        return series(f"{what} per rack", f"{what} bytes per second per rack, both directions (recorded rack:gangscope_{family}_bytes:rate5m).", "Bps",
                      Q(f'sum by (block, rack) (rack:gangscope_{family}_bytes:rate5m{{{DOMAIN}}})', "{{block}}/{{rack}}"), span=8)

    return board(
        "gangscope-topology",
        "gangscope / Topology",
        "Per block and rack: workloads, evictions, stuck gangs and NVLink/PCIe/fabric throughput side by side, so a failing rack shows in all of them at once.",
        variables,
        [
            (
                "Workloads and failures per rack",
                [
                    series("Workloads by stage per rack", "Workloads with pods placed in each rack, by stage (recorded rack:gangscope_workload_stage:count).", "short",
                           Q(f"rack:gangscope_workload_stage:count{{{DOMAIN}}}", "{{block}}/{{rack}} {{stage}}"), span=8),
                    series("Evicted workloads per rack", "Workloads evicted in each interval with pods in the rack, by reason "
                           "(gangscope_topology_evictions_total, counted once per rack however many hosts a workload used).", "short",
                           Q(evicted_per_rack, "{{block}}/{{rack}} {{reason}}"), span=8),
                    series("Stuck gangs per rack", "Admitted gangs past their schedule timeout, counted in each rack they were placed in.", "short",
                           Q(stuck, "{{block}}/{{rack}}"), span=8),
                    series("Idle GPUs per rack", "GPUs held by running pods of partial gangs, per rack (recorded rack:gangscope_gang_idle_gpus:sum).", "short",
                           Q(f"rack:gangscope_gang_idle_gpus:sum{{{DOMAIN}}}", "{{block}}/{{rack}}"), span=8),
                    series("Unhealthy nodes per rack", "Nodes Kueue lists in workloads' status.unhealthyNodes, per rack.", "short",
                           Q(f"count by (block, rack) (max by (block, rack, host) (gangscope_workload_unhealthy_node{{{DOMAIN}}}))", "{{block}}/{{rack}}"), span=8),
                    grid("Workloads per host", "Pods of each workload per host of the selected racks (gangscope_workload_topology_pods).", "short",
                         Q(f"sum by (block, rack, host, namespace, workload) (gangscope_workload_topology_pods{{{DOMAIN}}})"), span=8),
                ],
            ),
            (
                "Interconnect per rack",
                [throughput("nvlink", "NVLink"), throughput("pcie", "PCIe"), throughput("fabric_port", "Fabric")],
            ),
            (
                "Interconnect per host",
                [
                    series("NVLink per host", "NVLink bytes per second per host, both directions.", "Bps",
                           Q(f"sum by (host) (host:gangscope_nvlink_bytes:rate5m{{{DOMAIN}}})", "{{host}}"), span=8),
                    series("PCIe per host", "PCIe bytes per second per host, both directions.", "Bps",
                           Q(f"sum by (host) (host:gangscope_pcie_bytes:rate5m{{{DOMAIN}}})", "{{host}}"), span=8),
                    series("Fabric per host", "InfiniBand/RoCE port bytes per second per host, both directions.", "Bps",
                           Q(f"sum by (host) (host:gangscope_fabric_port_bytes:rate5m{{{DOMAIN}}})", "{{host}}"), span=8),
                ],
            ),
        ],
    )


def workload() -> dash.Dashboard:
    variables = [
        label_variable("namespace", "label_values(gangscope_workload_info, namespace)", "Namespace", multi=False),
        label_variable("workload", 'label_values(gangscope_workload_info{namespace="$namespace"}, workload)', "Workload", multi=False),
    ]
    gang = f'on (namespace, podgroup) group_left () gangscope_gang_info{{{WL}}}'
    return board(
        "gangscope-workload",
        "gangscope / Workload",
        "One job: its stage over time, admission timestamps, topology assignment, PodGroup, and per-GPU and per-link throughput.",
        variables,
        [
            (
                "Admission and assembly",
                [
                    timeline("Stage", "The workload's pipeline stage over time (gangscope_workload_stage).", "short",
                             Q(f"max by (stage) (gangscope_workload_stage{{{WL}}}) == 1", "{{stage}}")),
                    grid("Milestones", "When the workload was created, got quota, was admitted and had all pods ready (condition transition times).", "dateTimeAsIso",
                         Q(f"gangscope_workload_created_timestamp_seconds{{{WL}}} * 1000", "created"),
                         Q(f"gangscope_workload_quota_reserved_timestamp_seconds{{{WL}}} * 1000", "quota reserved"),
                         Q(f"gangscope_workload_admitted_timestamp_seconds{{{WL}}} * 1000", "admitted"),
                         Q(f"gangscope_workload_pods_ready_timestamp_seconds{{{WL}}} * 1000", "pods ready"), span=8),
                    grid("Conditions", "The workload's conditions with status and reason (gangscope_workload_condition).", "short",
                         Q(f"max by (type, status, reason) (gangscope_workload_condition{{{WL}}})"), span=8),
                    grid("Evictions", "Evictions of this workload so far, by reason (status.schedulingStats.evictions).", "short",
                         Q(f"max by (reason, underlying_cause) (gangscope_workload_evictions_total{{{WL}}})"), span=8),
                    timeline("Why it waits", "Kueue's reason while the workload is not admitted, and its category (gangscope_workload_pending_reason).", "short",
                             Q(f"max by (category, reason) (gangscope_workload_pending_reason{{{WL}}}) == 1", "{{category}}: {{reason}}")),
                    grid("Admission checks", "Each admission check's state and when it last changed (status.admissionChecks).", "dateTimeAsIso",
                         Q(f"max by (check, state) (gangscope_workload_admission_check{{{WL}}} == 1) * on (check) group_left () "
                           f"max by (check) (gangscope_workload_admission_check_transition_timestamp_seconds{{{WL}}}) * 1000"), span=12),
                    series("Queue position", "Position in the ClusterQueue and among the LocalQueue's workloads, from Kueue's visibility "
                           "API (0: considered next).", "short",
                           Q(f"max by (cluster_queue) (gangscope_workload_queue_position{{{WL}}})", "{{cluster_queue}}"),
                           Q(f"max by (local_queue) (gangscope_workload_local_queue_position{{{WL}}})", "{{local_queue}} (LocalQueue)"), span=12),
                    grid("Assignment", "Pods per host of the workload's topology assignment (current or last).", "short",
                         Q(f"max by (podset, block, rack, host) (gangscope_workload_topology_pods{{{WL}}})"), span=12),
                    timeline("PodGroup phase", "Phase of the workload's PodGroup(s) over time.", "short",
                             Q(f"max by (podgroup, phase) ((gangscope_podgroup_phase == 1) * {gang})", "{{podgroup}} {{phase}}"), span=12),
                    series("Gang members", "Running pods of the gang against its minMember; GPUs requested and GPUs held idle.", "short",
                           Q(f'max by (podgroup) (gangscope_podgroup_pods{{state="running"}} * {gang})', "{{podgroup}} running"),
                           Q(f"max by (podgroup) (gangscope_podgroup_min_member * {gang})", "{{podgroup}} minMember"),
                           Q(f"max(gangscope_workload_requested_gpus{{{WL}}})", "GPUs requested"),
                           Q(f"max(gangscope_gang_idle_gpus{{{WL}}})", "GPUs idle")),
                    series("Gang pods", "The gang's members by state from its live pods (bound, running, ready, pending; or the "
                           "PodGroup's counters where its pods are not watched): what the gang's stage is judged by.", "short",
                           Q(f"max by (podgroup, state) (gangscope_gang_pods{{{WL}}})", "{{podgroup}} {{state}}")),
                    series("Job progress", "Training progress the job reports (TrainJob trainerStatus) and its JobSet's restarts: "
                           "a flat line while the job runs is a hang.", "percentunit",
                           Q("max by (kind, name) (gangscope_job_progress_ratio * on (namespace, kind, name) group_left () "
                             f"max by (namespace, kind, name) (gangscope_job_info{{{WL}}}))", "{{kind}} {{name}} progress"),
                           Q("max by (kind, name) (gangscope_job_restarts_total * on (namespace, kind, name) group_left () "
                             f"max by (namespace, kind, name) (gangscope_job_info{{{WL}}}))", "{{kind}} {{name}} restarts")),
                ],
            ),
            (
                "Training: throughput beside bandwidth and gang state",
                [
                    series("Job throughput against its baseline",
                           "The job's own throughput (alerts/config.yaml training.throughput: its tokens_per_second, samples, or a "
                           "TrainJob's trainerStatus metric), per mapped metric, and its rolling baseline (the hour ending 15m before).",
                           "short",
                           Q(f"namespace_workload:gangscope_job_throughput:rate{{{WL}}}", "{{metric}} ({{unit}}/s)"),
                           Q(f"namespace_workload:gangscope_job_throughput:baseline{{{WL}}}", "{{metric}} baseline"), span=8),
                    series("Throughput and bandwidth against their baselines",
                           "Throughput and NVLink/PCIe bytes, each divided by its own baseline over the same windows: a drop of both "
                           "is scheduling or hardware, of throughput alone the job itself. GangscopeJobSlow* fire below 0.7.",
                           "percentunit",
                           Q(f"namespace_workload:gangscope_job_throughput:ratio{{{WL}}}", "{{metric}}"),
                           Q(f"namespace_workload:gangscope_interconnect_bytes:ratio{{{WL}}}", "{{family}}"), span=8),
                    timeline("Gang state", "The gang's assembly stage over time (gangscope_gang_stage), on the same axis as throughput.",
                             "short", Q(f"max by (podgroup, stage) (gangscope_gang_stage{{{WL}}}) == 1", "{{podgroup}} {{stage}}"), span=8),
                    timeline("Slowdown verdict and its evidence",
                             "The verdict of the training rules (scheduling, hardware, workload), the scheduling events and the hardware "
                             "signals of the last 30m that decided it.", "short",
                             Q(f"max by (verdict) (namespace_workload:gangscope_job_slowdown:ratio{{{WL}}}) > 0", "verdict {{verdict}}"),
                             Q(f"max by (event) (namespace_workload:gangscope_job_scheduling_events:count{{{WL}}})", "event {{event}}"),
                             Q(f"max by (signal) (namespace_workload:gangscope_job_hardware_signals:count{{{WL}}})", "signal {{signal}}"),
                             span=12),
                    series("Ray placement groups and tasks", "Ray's own placement groups and tasks by state for a RayJob or "
                           "RayCluster (ray_placement_groups, ray_tasks joined through gangscope_ray_cluster_info): a placement "
                           "group PENDING for long is a gang that cannot assemble inside Ray.", "short",
                           Q(f"namespace_workload:gangscope_ray_placement_groups:sum{{{WL}}}", "placement groups {{State}}"),
                           Q(f"namespace_workload:gangscope_ray_tasks:sum{{{WL}}}", "tasks {{State}}"), span=12),
                ],
            ),
            (
                "Interconnect",
                [
                    series("Workload throughput", "The workload's NVLink, PCIe and fabric bytes per second, per direction (recorded namespace_workload:*:rate5m).", "Bps",
                           Q(f"namespace_workload:gangscope_nvlink_bytes:rate5m{{{WL}}}", "NVLink {{direction}}"),
                           Q(f"namespace_workload:gangscope_pcie_bytes:rate5m{{{WL}}}", "PCIe {{direction}}"),
                           Q(f"namespace_workload:gangscope_fabric_port_bytes:rate5m{{{WL}}}", "fabric {{direction}}")),
                    series("NVLink per GPU", "NVLink transmit plus receive bytes per second of each GPU the workload's pods hold.", "Bps",
                           Q(f"sum by (node, gpu) (rate(gangscope_nvlink_transmit_bytes_total[{RATE}]) + rate(gangscope_nvlink_receive_bytes_total[{RATE}])) * {WL_GPUS}", "{{node}} GPU {{gpu}}")),
                    series("NVLink per link", "Transmit bytes per second of every NVLink link of the workload's GPUs: one slow link stands out.", "Bps",
                           Q(f"rate(gangscope_nvlink_transmit_bytes_total[{RATE}]) * {WL_GPUS}", "{{node}} GPU {{gpu}} link {{link}}")),
                    series("PCIe per GPU", "PCIe transmit plus receive bytes per second of each of the workload's GPUs.", "Bps",
                           Q(f"sum by (node, gpu) (rate(gangscope_pcie_transmit_bytes_total[{RATE}]) + rate(gangscope_pcie_receive_bytes_total[{RATE}])) * {WL_GPUS}", "{{node}} GPU {{gpu}}")),
                ],
            ),
            (
                "Stragglers",
                [
                    series("Slowest GPU against the gang's median",
                           "Dispersion of the gang: the slowest GPU's NVLink and PCIe bytes per second divided by the median GPU's "
                           "(recorded *_gpu_bytes:rate5m_min_over_median). 1 is an even gang; GangscopeGPUStraggler fires below 0.5.",
                           "percentunit",
                           Q(f"namespace_workload:gangscope_nvlink_gpu_bytes:rate5m_min_over_median{{{WL}}}", "NVLink"),
                           Q(f"namespace_workload:gangscope_pcie_gpu_bytes:rate5m_min_over_median{{{WL}}}", "PCIe"), span=8),
                    series("Per-GPU NVLink against the median",
                           "Each GPU's NVLink bytes per second (both directions) with its node and rack, and the gang's median "
                           "(recorded namespace_workload_gpu:gangscope_nvlink_bytes:rate5m).", "Bps",
                           Q(f"namespace_workload_gpu:gangscope_nvlink_bytes:rate5m{{{WL}}}", "{{rack}} {{node}} GPU {{gpu}}"),
                           Q(f"namespace_workload:gangscope_nvlink_gpu_bytes:rate5m_median{{{WL}}}", "median"), span=8),
                    series("GPU utilisation (dcgm-exporter)",
                           "dcgm-exporter's DCGM_FI_DEV_GPU_UTIL of the workload's GPUs, joined by UUID to gangscope's workload "
                           "labels (uuid:DCGM_FI_DEV_GPU_UTIL:join); empty where dcgm-exporter is not scraped.", "percent",
                           Q(f"max by (node, gpu) (uuid:DCGM_FI_DEV_GPU_UTIL:join{{{WL}}})", "{{node}} GPU {{gpu}}"), span=8),
                ],
            ),
        ],
    )


def interconnect() -> dash.Dashboard:
    variables = [
        label_variable("node", "label_values(gangscope_gpu_info, node)", "Node"),
        label_variable("gpu", 'label_values(gangscope_gpu_info{node=~"$node"}, gpu)', "GPU"),
    ]
    sel = f'{NODE}, gpu=~"$gpu"'
    return board(
        "gangscope-gpu-interconnect",
        "gangscope / GPU interconnect",
        "Per node and GPU: NVLink links and their errors, PCIe throughput, generation and width, fabric ports.",
        variables,
        [
            (
                "NVLink",
                [
                    single("Links down", "NVLink links reporting down on the selected GPUs (GangscopeNVLinkDown).", "short",
                           Q(f"count(gangscope_nvlink_link_up{{{sel}}} == 0) or vector(0)"), span=6),
                    single("GPUs lost", "GPUs the agent cannot read (lost or failing NVML calls).", "short",
                           Q(f"count(gangscope_gpu_up{{{sel}}} == 0) or vector(0)"), span=6),
                    grid("GPUs", "The selected GPUs with model, PCI bus id and driver, and the pod using each.", "short",
                         Q(f"max by (node, gpu, name, pci_bus_id, driver_version) (gangscope_gpu_info{{{sel}}})"),
                         Q(f"max by (node, gpu, namespace, pod, workload) (gangscope_gpu_pod_info{{{sel}}})"), span=12),
                    series("NVLink transmit per link", "Transmit bytes per second of every link.", "Bps",
                           Q(f"rate(gangscope_nvlink_transmit_bytes_total{{{sel}}}[{RATE}])", "{{node}} GPU {{gpu}} link {{link}}")),
                    series("NVLink receive per link", "Receive bytes per second of every link.", "Bps",
                           Q(f"rate(gangscope_nvlink_receive_bytes_total{{{sel}}}[{RATE}])", "{{node}} GPU {{gpu}} link {{link}}")),
                    series("NVLink errors", "NVLink errors per interval by type (replay, recovery, CRC flit/data, ECC).", "short",
                           Q(f"sum by (node, gpu, link, type) (increase(gangscope_nvlink_errors_total{{{sel}}}[{RATE}])) > 0", "{{node}} GPU {{gpu}} link {{link}} {{type}}")),
                    timeline("NVLink link state", "Each link's state: 1 up, 0 down.", "short",
                             Q(f"min by (node, gpu, link) (gangscope_nvlink_link_up{{{sel}}})", "{{node}} GPU {{gpu}} link {{link}}"), span=12, height=8),
                ],
            ),
            (
                "PCIe",
                [
                    series("PCIe throughput", "PCIe transmit and receive bytes per second per GPU.", "Bps",
                           Q(f"rate(gangscope_pcie_transmit_bytes_total{{{sel}}}[{RATE}])", "{{node}} GPU {{gpu}} tx"),
                           Q(f"rate(gangscope_pcie_receive_bytes_total{{{sel}}}[{RATE}])", "{{node}} GPU {{gpu}} rx"), span=8),
                    series("PCIe generation", "Current against maximum PCIe generation; idle GPUs drop to a lower generation to save power.", "short",
                           Q(f"max by (node, gpu, kind) (gangscope_pcie_link_generation{{{sel}}})", "{{node}} GPU {{gpu}} {{kind}}"), span=8),
                    series("PCIe width", "Current against maximum PCIe link width; below maximum is a fault (GangscopePCIeLinkWidthDegraded).", "short",
                           Q(f"max by (node, gpu, kind) (gangscope_pcie_link_width{{{sel}}})", "{{node}} GPU {{gpu}} x {{kind}}"), span=8),
                ],
            ),
            (
                "Fabric",
                [
                    series("Fabric port throughput", "InfiniBand/RoCE port transmit and receive bytes per second.", "Bps",
                           Q(f"rate(gangscope_fabric_port_transmit_bytes_total{{{NODE}}}[{RATE}])", "{{node}} {{device}}/{{port}} tx"),
                           Q(f"rate(gangscope_fabric_port_receive_bytes_total{{{NODE}}}[{RATE}])", "{{node}} {{device}}/{{port}} rx"), span=16),
                    timeline("Fabric port state", "Each port's state: 1 up, 0 down.", "short",
                             Q(f"min by (node, device, port) (gangscope_fabric_port_up{{{NODE}}})", "{{node}} {{device}}/{{port}}"), span=8, height=8),
                ],
            ),
            (
                "Hardware truth",
                [
                    grid("NVLink domain and rack position",
                         "What the GPUs report about where they are: NVLink fabric cluster and clique (nvmlDeviceGetGpuFabricInfoV) "
                         "and chassis, slot and tray (nvmlDeviceGetPlatformInfo, Blackwell), next to the node's rack label.", "short",
                         Q(f"max by (node, rack, gpu, cluster_uuid, clique_id, state) (gangscope_gpu_fabric_info{{{sel}}})"),
                         Q(f"max by (node, rack, gpu, chassis_serial, slot, tray, host_id) (gangscope_gpu_platform_info{{{sel}}})"), span=12),
                    timeline("Fabric health", "NVLink fabric health checks per GPU: 1 the problem is present (degraded bandwidth, "
                             "route recovery or unhealthy, access timeout, incorrect configuration).", "short",
                             Q(f"max by (node, gpu, check) (gangscope_gpu_fabric_health{{{sel}}})", "{{node}} GPU {{gpu}} {{check}}"),
                             span=12, height=8),
                    grid("Field families supported", "Per GPU, which NVML field families the driver answers (1) or reports "
                         "unsupported (0): a family at 0 explains a missing series.", "short",
                         Q(f"max by (node, gpu, family) (gangscope_gpu_field_supported{{{sel}}})"), span=12),
                    series("PCIe counter read gaps", "Reads of 32-bit PCIe byte counters further apart than one wrap at the link's "
                           "maximum rate, per interval; their bytes are estimated. Normally zero.", "short",
                           Q(f"increase(gangscope_pcie_read_gaps_total{{{sel}}}[{RATE}]) > 0", "{{node}} GPU {{gpu}}"), span=12),
                ],
            ),
        ],
    )


def capacity() -> dash.Dashboard:
    """Room per domain: the recorded per-level sums work whether the collector is sharded or not
    (alerts/config.yaml, capacity rules); domain states and fits come from an unsharded collector."""
    variables = [
        label_variable("cluster_queue", "label_values(gangscope_workload_info, cluster_queue)", "ClusterQueue"),
        label_variable("block", 'label_values(gangscope_domain_gpus{level="block"}, block)', "Block"),
        label_variable("rack", 'label_values(gangscope_domain_gpus{level="rack", block=~"$block"}, rack)', "Rack"),
    ]
    block = 'block=~"$block"'
    per_cq = "* on (namespace, workload) group_left (cluster_queue) topk by (namespace, workload) (1, gangscope_workload_info{cluster_queue=~\"$cluster_queue\"})"
    fit = ("max by (namespace, workload) (gangscope_workload_fit{scope=\"cluster\"}) == 1 "
           "and on (namespace, workload) max by (namespace, workload) (gangscope_workload_fit{scope=\"domain\"}) == 0")
    return board(
        "gangscope-capacity",
        "gangscope / Capacity",
        "Is there room, and where: GPUs per block, rack and host by state, how many pods of each size fit now, workloads "
        "blocked by fragmentation, how compactly admitted pod sets are placed, and goodput per ClusterQueue.",
        variables,
        [
            (
                "GPUs",
                [
                    single("Free GPUs", "GPUs free on available nodes across the cluster (cluster:gangscope_domain_gpus_free:sum).", "short",
                           Q("sum(cluster:gangscope_domain_gpus_free:sum) or vector(0)"), span=6),
                    single("Used GPUs", "GPUs Kueue counts as used by the Workloads holding quota (pods x GPUs per pod of their assignments).", "short",
                           Q('sum(cluster:gangscope_domain_gpus:sum{state="used"}) or vector(0)'), span=6),
                    single("Unavailable GPUs", "GPUs on nodes not Ready, cordoned, unhealthy for Kueue or tainted without a toleration.", "short",
                           Q('sum(cluster:gangscope_domain_gpus:sum{state="unavailable"}) or vector(0)'), span=6),
                    single("Capacity", "Allocatable GPUs of every GPU node.", "short",
                           Q('sum(cluster:gangscope_domain_gpus:sum{state="capacity"}) or vector(0)'), span=6),
                    density("Racks by free GPUs", "How many racks have how many free GPUs, over time: a band at the bottom is a full "
                            "cluster, one spread thin is fragmented room (rack:gangscope_domain_gpus_free:sum).", "short",
                            Q(f"rack:gangscope_domain_gpus_free:sum{{{DOMAIN}}}")),
                    density("Racks by used GPUs", "How many racks have how many GPUs in use, over time (rack:gangscope_domain_gpus:sum).", "short",
                            Q(f'sum by (block, rack) (rack:gangscope_domain_gpus:sum{{state="used", {DOMAIN}}})')),
                    density("Hosts by free GPUs", "How many hosts have 0 to 8 free GPUs, over time: many hosts with a few free GPUs each "
                            "take small pods, not 8-GPU ones (host:gangscope_domain_gpus_free:sum).", "short",
                            Q(f"host:gangscope_domain_gpus_free:sum{{{DOMAIN}}}")),
                    series("Free GPUs per block", "Free GPUs of each block (block:gangscope_domain_gpus_free:sum).", "short",
                           Q(f"block:gangscope_domain_gpus_free:sum{{{block}}}", "{{block}}"), span=12),
                    series("Domains by state", "Domains of each level that are free (nothing used), partial, full or unavailable "
                           "(gangscope_domains; an unsharded collector's).", "short",
                           Q("max by (level, state) (gangscope_domains)", "{{level}} {{state}}"), span=12),
                    series("Kueue's view against the scheduler's", "GPUs Kueue counts as used that no watched pod holds yet "
                           "(admitted pods not created or not scheduled), per block; below 0, watched pods hold GPUs outside Kueue's "
                           "accounting (block:gangscope_domain_gpus_unbound:sum: used minus gangscope_domain_gpus_bound).", "short",
                           Q(f"block:gangscope_domain_gpus_unbound:sum{{{block}}}", "{{block}}"),
                           Q("cluster:gangscope_domain_gpus_unbound:sum", "cluster"), span=12),
                ],
            ),
            (
                "Placeable pods",
                [
                    series("Placeable pods in the cluster", "Pods of each size the free GPUs take now, summed over hosts "
                           "(block:gangscope_domain_placeable_pods:sum, per gpus_per_pod).", "short",
                           Q(f"sum by (gpus_per_pod) (block:gangscope_domain_placeable_pods:sum{{{block}}})", "{{gpus_per_pod}} GPUs per pod"), span=8),
                    series("Placeable pods in the largest rack", "The most pods of each size one rack takes: far below the cluster's "
                           "total means a job that must stay in one rack waits for room that exists elsewhere.", "short",
                           Q(f"max by (gpus_per_pod) (rack:gangscope_domain_placeable_pods:sum{{{DOMAIN}}})", "{{gpus_per_pod}} GPUs per pod"), span=8),
                    grid("Racks with the most room", "The racks that take the most 8-GPU pods now, with their free GPUs.", "short",
                         Q(f'topk(10, rack:gangscope_domain_placeable_pods:sum{{gpus_per_pod="8", {DOMAIN}}})'),
                         Q(f"rack:gangscope_domain_gpus_free:sum{{{DOMAIN}}}"), span=8),
                ],
            ),
            (
                "Fragmentation and placement",
                [
                    series("Workloads blocked by fragmentation", "Waiting workloads that require one domain of a level: the cluster's "
                           "free GPUs could hold them, no single domain can (GangscopeFragmentationBlocked).", "short",
                           Q('sum by (cluster_queue, level) (gangscope_fragmentation_blocked_workloads{cluster_queue=~"$cluster_queue"})',
                             "{{cluster_queue}} {{level}}"), span=12),
                    grid("Waiting workloads that fit the cluster, not a domain", "Each waiting workload whose topology request the free "
                         "GPUs could hold spread out but not in one domain of its level; `gangscope explain` says which domain comes closest.",
                         "short", Q(f"({fit}) {per_cq}"), span=12),
                    series("Locality per ClusterQueue", "Average over admitted pod sets of the largest share of their pods in one domain "
                           "of each level: 1 is every pod set in one domain (cluster_queue_level:gangscope_workload_locality_ratio:avg).",
                           "percentunit",
                           Q('cluster_queue_level:gangscope_workload_locality_ratio:avg{cluster_queue=~"$cluster_queue"}', "{{cluster_queue}} {{level}}"),
                           span=12),
                    grid("Preferred placements spread wider than needed", "Admitted pod sets that prefer one domain and occupy more "
                         "domains of that level than their size needs (GangscopeWorkloadPlacementSpread).", "short",
                         Q(f"(max by (namespace, workload, podset, level) (gangscope_workload_domains_spanned > on (namespace, workload, "
                           f"podset, level) gangscope_workload_domains_needed)) {per_cq}"), span=12),
                ],
            ),
            (
                "Goodput",
                [
                    series("Goodput per ClusterQueue", "Run time over time since creation of the live workloads of each ClusterQueue: "
                           "what queueing and evictions leave (cluster_queue:gangscope_workload_goodput:ratio).", "percentunit",
                           Q('cluster_queue:gangscope_workload_goodput:ratio{cluster_queue=~"$cluster_queue"}', "{{cluster_queue}}"), span=12),
                    series("Run time ended by evictions", "Admitted time of the live workloads' earlier cycles, each ended by an eviction: "
                           "the work lost where jobs do not checkpoint (cluster_queue:gangscope_workload_past_execution_seconds:sum).", "s",
                           Q('cluster_queue:gangscope_workload_past_execution_seconds:sum{cluster_queue=~"$cluster_queue"}', "{{cluster_queue}}"),
                           span=12),
                ],
            ),
        ],
    )


DASHBOARDS = {
    "gangscope-capacity.json": capacity,
    "gangscope-overview.json": overview,
    "gangscope-topology.json": topology,
    "gangscope-workload.json": workload,
    "gangscope-gpu-interconnect.json": interconnect,
}


def render() -> dict[Path, str]:
    return {HERE / name: json.dumps(build().build(), cls=JSONEncoder, indent=2, sort_keys=True) + "\n" for name, build in DASHBOARDS.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a committed dashboard differs from what this renders")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render().items():
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.write_text(text)
    for name in stale:
        print(f"dashboards/{name} is not what dashboards/generate.py renders", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
