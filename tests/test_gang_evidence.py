"""Gangs judged from the best evidence (live pods > PodGroup counters > phase), on the objects real
systems print: Coscheduling's lagging phase, Volcano's partial gang, every native version and
its pods, composite parents, KAI PodGroups and their sub-groups. Checked on exported series and
explain's text."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from exporter.cluster import podgroups as pg
from exporter.cluster.gangs import GangIndex
from exporter.cluster.jobs import attach_jobs
from exporter.cluster.pods import PodStore
from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition
from exporter.explain import assembly_layer
from kueue_objects import family_series

REAL = Path(__file__).parent / "fixtures" / "gangs" / "real"
T0 = 1787220000.0  # 2026-08-20T10:00:00Z


def ts(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def objects(name: str) -> list[dict[str, Any]]:
    out = []
    for doc in yaml.safe_load_all((REAL / name).read_text()):
        if isinstance(doc, dict) and doc.get("kind") == "List":
            out += doc["items"]
        elif isinstance(doc, dict):
            out.append(doc)
    return out


def pod(name: str, ns: str = "ml", *, phase: str = "Running", node: str | None = "n1", ready: bool = True, gpus: int = 8,
        labels: dict | None = None, annotations: dict | None = None, spec: dict | None = None, uid: str | None = None,
        rv: str = "1") -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
    body: dict[str, Any] = {"containers": [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": str(gpus)}}}], **(spec or {})}
    if node:
        body["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": ns, "uid": uid or f"uid-{ns}-{name}", "resourceVersion": rv,
        "labels": labels or {}, "annotations": annotations or {}}, "spec": body, "status": status}


class Cluster:
    """A collector's gang layer with a pod store, fed by hand, evaluated at a fake clock."""

    def __init__(self, now: float = T0 + 60, pods: bool = True) -> None:
        self.now = now
        self.expo = Exposition()
        self.store = ClusterStore(self.expo, clock=lambda: self.now)
        self.pods = PodStore() if pods else None
        self.gangs = GangIndex(self.store, assembly_timeout=600, clock=lambda: self.now, pods=self.pods)
        self.jobs = attach_jobs(self.store, self.gangs, clock=lambda: self.now)
        self.h = {**self.store.handlers(), **self.gangs.handlers(), **self.jobs.handlers(),
                  **(self.pods.handlers() if self.pods else {})}

    def add(self, source: str, *objs: dict[str, Any], event: str = "ADDED") -> None:
        for o in objs:
            self.h[source].apply(event, o)

    def list_pods(self, source: str, *objs: dict[str, Any]) -> None:
        self.h[source].replace(list(objs))

    def series(self, family: str) -> dict[tuple, float]:
        return family_series(self.expo, family)

    def stage(self, pgname: str, ns: str = "ml") -> str:
        [stage] = [dict(k)["stage"] for k, v in self.series("gangscope_gang_stage").items()
                   if v == 1 and dict(k)["podgroup"] == pgname and dict(k)["namespace"] == ns]
        return stage

    def value(self, family: str, pgname: str, ns: str = "ml", **labels: str) -> float | None:
        found = [v for k, v in self.series(family).items()
                 if dict(k)["podgroup"] == pgname and dict(k)["namespace"] == ns and labels.items() <= dict(k).items()]
        return found[0] if found else None

    def gang(self, pgname: str) -> Any:
        [g] = [g for k, g in self.gangs.gangs.items() if k[2] == pgname]
        return g


def workload(name: str, ns: str = "ml", *, owner: tuple[str, str, str] = ("Job", "train", "uid-train"), count: int = 3,
             gpus: int = 8, admitted: bool = True, labels: dict | None = None, annotations: dict | None = None) -> dict[str, Any]:
    conds = [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": ts(T0)},
             {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": ts(T0)}] \
        if admitted else []
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
            "metadata": {"name": name, "namespace": ns, "uid": f"wl-{name}", "creationTimestamp": ts(T0 - 600),
                         "ownerReferences": [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1], "uid": owner[2],
                                              "controller": True}]},
            "spec": {"queueName": "q", "podSets": [{"name": "main", "count": count, "template": {
                "metadata": {"labels": labels or {}, "annotations": annotations or {}},
                "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}]},
            "status": {"conditions": conds}}


# ---- Coscheduling: the lagging phase (scheduler-plugins#446) -----------------------------------

def issue446() -> dict[str, Any]:
    [obj] = objects("podgroups-cosched-sigs-issue446-scheduling.yaml")
    return obj


def test_lagging_phase_with_running_at_minimum_is_assembled_and_never_stuck() -> None:
    """Printed by a real cluster: phase Scheduling, running 3 of minMember 3, scheduleTimeoutSeconds
    10, created long ago. Its counters say assembled (podgroup_controller.go:125-127): not stuck."""
    c = Cluster(now=1667789000.0 + 3600, pods=False)
    c.add("podgroups_coscheduling_legacy", issue446())
    assert c.stage("pg1", "default") == "assembled"
    assert c.value("gangscope_gang_assembly_stuck", "pg1", "default") == 0
    assert c.value("gangscope_gang_pods", "pg1", "default", state="running") == 3
    assert c.value("gangscope_podgroup_phase", "pg1", "default", phase="Scheduling") == 1  # the phase as printed
    doc = assembly_layer(None, [c.gang("pg1")], c.now, c.gangs)
    assert doc["status"] == "ok"
    assert doc["summary"] == "pg1 assembled (3/3 running (PodGroup status); its phase still says Scheduling)"
    assert "stuck" not in doc["summary"]


def test_same_group_judged_by_its_pods_when_they_are_watched() -> None:
    """Pods outrank counters: with the legacy label's pods listed, two running of three is partial,
    whatever the counters say; three running is assembled."""
    c = Cluster(now=1667789000.0 + 3600)
    c.add("podgroups_coscheduling_legacy", issue446())
    label = {"pod-group.scheduling.sigs.k8s.io": "pg1"}
    pods = [pod(f"w{i}", "default", labels=label, node=f"n{i}") for i in range(2)] + \
        [pod("w2", "default", labels=label, node=None, phase="Pending", ready=False)]
    c.list_pods("pods_coscheduling_legacy", *pods)
    assert c.stage("pg1", "default") == "partially_bound"
    assert c.value("gangscope_gang_idle_gpus", "pg1", "default") == 16
    assert c.value("gangscope_gang_pods", "pg1", "default", state="pending") == 1
    doc = assembly_layer(None, [c.gang("pg1")], c.now, c.gangs)
    assert "2/3 running (live pods: 1 pending)" in doc["summary"]
    c.add("pods_coscheduling_legacy", pod("w2", "default", labels=label, node="n2", rv="2"), event="MODIFIED")
    assert c.stage("pg1", "default") == "assembled"
    assert c.value("gangscope_gang_idle_gpus", "pg1", "default") == 0


def test_zero_watched_pods_of_a_covered_api_is_empty_unless_kueue_admitted_it() -> None:
    c = Cluster()
    obj = issue446()
    obj["metadata"]["namespace"] = "ml"
    c.add("podgroups_coscheduling_legacy", obj)
    assert c.stage("pg1") == "assembled"  # counters, until the pods' first list
    c.list_pods("pods_coscheduling_legacy")
    assert c.stage("pg1") == "empty"
    assert c.value("gangscope_gang_assembly_stuck", "pg1") is None
    c.add("workloads", workload("wl", owner=("Job", "pg1", "u1")))
    # Admitted: its pods are due. The window runs from the admission (T0, 60 s ago), not from when
    # this process joined the two, and the PodGroup's scheduleTimeoutSeconds is 10: stuck.
    assert c.stage("pg1") == "stuck"
    assert c.value("gangscope_gang_assembly_deadline_timestamp_seconds", "pg1") == T0 + 10
    c.now = T0 + 5
    # An event that changes only the resourceVersion is dropped unparsed (exporter.cluster.unchanged):
    # the gang is judged again at the new clock as the collector's timers do it.
    c.add("workloads", workload("wl", owner=("Job", "pg1", "u1")) | {"metadata": {
        "name": "wl", "namespace": "ml", "uid": "wl-wl", "resourceVersion": "2", "creationTimestamp": ts(T0 - 600),
        "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "pg1", "uid": "u1", "controller": True}]}})
    assert c.stage("pg1") == "stuck"
    c.gangs.reevaluate()
    assert c.stage("pg1") == "assembling"  # 5 s after the admission: within the window


def test_deadline_does_not_depend_on_the_order_objects_arrive_in() -> None:
    """Two replicas (or shards) list the same objects in different orders and at different times:
    a group that was empty only because its Workload had not arrived is not a regression, so both
    export the same deadline, from the objects' own times."""
    deadlines = []
    for workload_first, now in ((False, T0 + 30), (True, T0 + 95)):
        c = Cluster(now=now)
        obj = issue446()
        obj["metadata"]["namespace"] = "ml"
        wl = workload("wl", owner=("Job", "pg1", "u1"))
        c.list_pods("pods_coscheduling_legacy")
        if workload_first:
            c.add("workloads", wl)
        c.add("podgroups_coscheduling_legacy", obj)
        if not workload_first:
            assert c.stage("pg1") == "empty"
            c.now += 40
            c.add("workloads", wl)
        assert c.stage("pg1") == "stuck"  # scheduleTimeoutSeconds 10 from the admission at T0
        deadlines.append(c.value("gangscope_gang_assembly_deadline_timestamp_seconds", "pg1"))
    assert deadlines[0] == deadlines[1] == T0 + 10


# ---- Volcano ----------------------------------------------------------------------------------

def test_volcano_partial_gang_and_stale_unschedulable_condition() -> None:
    c = Cluster(pods=False)
    frag, _ = objects("podgroups-volcano-frag-457-3834.yaml")
    c.add("podgroups_volcano", frag)
    assert c.stage("frag-457-mpi", "frag") == "partially_bound"
    assert c.value("gangscope_podgroup_unschedulable", "frag-457-mpi", "frag", reason="NotEnoughResources") == 1
    [running] = objects("podgroups-volcano-doc-running.yaml")
    c.add("podgroups_volcano", running)
    name, ns = running["metadata"]["name"], running["metadata"]["namespace"]
    assert c.stage(name, ns) == "assembled"
    # its Unschedulable condition is stale: not exported while the gang is assembled
    assert c.value("gangscope_podgroup_unschedulable", name, ns) is None


# ---- native, every version --------------------------------------------------------------------

GOLDEN_SOURCES = {"PodGroup": "podgroups_native", "CompositePodGroup": "compositepodgroups_native",
                  "Workload": "workloads_native", "Pod": "pods"}


@pytest.mark.parametrize("name", sorted(p.name for p in REAL.glob("k8s-*.yaml")))
def test_every_native_golden_is_read_without_parse_errors(name: str) -> None:
    """Kubernetes' own round-trip data for each version (placeholder values): every shape is read,
    none counted as a parse error, the v1alpha2+ Workloads included (templates, no podGroups)."""
    from exporter.health import SourceHealth

    c = Cluster()
    health = {s: SourceHealth(s, c.expo) for s in GOLDEN_SOURCES.values()}  # pods: the docs' Pod of k8s-12
    for s, h in health.items():
        c.h[s].health = h
    for obj in objects(name):
        c.add(GOLDEN_SOURCES[obj["kind"]], obj)
    assert all(h.parse_errors == 0 for h in health.values()), {s: h.parse_errors for s, h in health.items()}


def test_native_shapes_of_each_version() -> None:
    [early] = objects("k8s-01-golden-v1alpha2-PodGroup-early.yaml")
    [late] = objects("k8s-02-golden-v1alpha2-PodGroup-topologyConstraints.yaml")
    [beta] = objects("k8s-06-golden-v1beta1-PodGroup.yaml")
    [alpha3] = objects("k8s-08-golden-v1alpha3-PodGroup.yaml")
    recs = [pg.parse_native("podgroups_native", o) for o in (early, late, beta, alpha3)]
    assert [(r.workload_ref, r.template, r.min_member, r.required_topology, r.parent) for r in recs] == [
        ("", "", 1, "", ""),  # the earliest flat podGroupTemplateRef{workloadName} is not under .workload
        ("workloadNameValue", "podGroupTemplateNameValue", 1, "topologyKeyValue", ""),
        ("workloadNameValue", "templateNameValue", 1, "keyValue", ""),
        ("workloadNameValue", "templateNameValue", 1, "keyValue", "parentCompositePodGroupNameValue"),
    ]
    assert all(r.phase == "Pending" for r in recs)  # placeholder condition type: no scheduling word
    [composite2] = objects("k8s-05-golden-v1alpha2-CompositePodGroup.yaml")
    [composite3] = objects("k8s-09-golden-v1alpha3-CompositePodGroup.yaml")
    c2, c3 = (pg.parse_native_composite("compositepodgroups_native", o) for o in (composite2, composite3))
    assert (c2.composite, c2.min_member, c2.parent, c2.workload_ref) == (True, 1, "compositePodGroupNameValue", "workloadNameValue")
    assert (c3.min_member, c3.parent, c3.template) == (1, "parentCompositePodGroupNameValue", "templateNameValue")
    [wl2] = objects("k8s-03-golden-v1alpha2-Workload-compositePodGroupTemplates.yaml")
    [wl3] = objects("k8s-10-golden-v1alpha3-Workload.yaml")
    [wl135] = objects("k8s-11-golden-v1alpha1-Workload-v1.35.yaml")
    n2 = pg.parse_native_workload("workloads_native", wl2)
    assert n2.records == [] and n2.controller == ("kindValue", "nameValue")
    assert [(t.name, t.composite, t.min_count, t.parent) for t in n2.templates] == [
        ("nameValue", False, 1, ""), ("nameValue", True, 1, ""), ("nameValue", False, 1, "nameValue")]
    n3 = pg.parse_native_workload("workloads_native", wl3)
    # the recursively nested composite template has name "" (a placeholder): it names nothing, so it is left out
    assert [(t.composite, t.min_count, t.parent) for t in n3.templates] == [
        (False, 1, ""), (True, 1, ""), (False, 1, "nameValue")]
    assert [r.name for r in pg.parse_native_workload("workloads_native", wl135).records] == ["nameValue/nameValue"]


def native_pg(name: str, min_count: int, *, scheduled: bool | None = True, parent: str = "", ns: str = "ml",
              condition: str = "PodGroupInitiallyScheduled", owner_uid: str = "uid-train") -> dict[str, Any]:
    spec: dict[str, Any] = {"workloadRef": {"workloadName": "training", "templateName": "workers"},
                            "schedulingPolicy": {"gang": {"minCount": min_count}}}
    if parent:
        spec["parentCompositePodGroupName"] = parent
    conds = [] if scheduled is None else [{
        "type": condition, "status": "True" if scheduled else "False", "reason": "Scheduled" if scheduled else "Unschedulable",
        "message": "" if scheduled else f"minCount ({min_count}) cannot be satisfied", "lastTransitionTime": ts(T0),
        "observedGeneration": 1}]
    return {"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns, "uid": f"pg-{name}", "creationTimestamp": ts(T0 - 60),
                         "ownerReferences": [{"kind": "Job", "name": "train", "uid": owner_uid, "controller": True}]},
            "spec": spec, "status": {"conditions": conds}}


def native_pods(group: str, running: int, pending: int = 0, prefix: str = "") -> list[dict[str, Any]]:
    """Pods naming a native PodGroup (``spec.schedulingGroup.podGroupName``), seen through Kueue's label."""
    prefix = prefix or group
    labels = {"kueue.x-k8s.io/podset": "workers"}
    spec = {"schedulingGroup": {"podGroupName": group}}
    return ([pod(f"{prefix}-{i}", labels=labels, spec=spec, node=f"{prefix}-n{i}") for i in range(running)]
            + [pod(f"{prefix}-p{i}", labels=labels, spec=spec, node=None, phase="Pending", ready=False) for i in range(pending)])


def test_native_gang_that_lost_a_pod_is_told_by_its_pods() -> None:
    """PodGroupInitiallyScheduled stays True after a pod is evicted (v1beta1/types.go:722-750):
    the condition alone says assembled, the pods say 3 of 4."""
    c = Cluster()
    c.add("podgroups_native", native_pg("workers-0", 4))
    assert c.stage("workers-0") == "initially_scheduled"  # the condition alone: no pods seen yet
    c.list_pods("pods_kueue", *native_pods("workers-0", 4))
    assert c.stage("workers-0") == "assembled"
    c.now += 300
    c.add("pods_kueue", native_pods("workers-0", 4)[3], event="DELETED")
    assert c.stage("workers-0") == "partially_bound"
    gang = c.gang("workers-0")
    assert gang.wait_start == c.now  # the window restarts when it falls below its minimum
    doc = assembly_layer(None, [gang], c.now, c.gangs)
    assert "3/4 running (live pods)" in doc["summary"]
    assert "its status still says Scheduled (it reflects the first scheduling decision only)" in doc["summary"]


def test_changed_min_count_rejudges_the_gang_at_once() -> None:
    """1.37 beta: minCount is mutable (elastic training, v1beta1/types.go:444-460): lowered, a
    waiting gang is assembled at once; raised for a running gang, it is scaling: "it does not
    affect already scheduled pods", so their GPUs are not idle."""
    c = Cluster()
    c.add("podgroups_native", native_pg("elastic", 4))
    c.list_pods("pods_kueue", *native_pods("elastic", 3))
    assert c.stage("elastic") == "partially_bound"
    c.add("podgroups_native", native_pg("elastic", 2), event="MODIFIED")
    assert c.stage("elastic") == "assembled"
    assert c.value("gangscope_podgroup_min_member", "elastic") == 2
    c.add("podgroups_native", native_pg("elastic", 8), event="MODIFIED")
    assert c.stage("elastic") == "scaling"
    assert c.value("gangscope_gang_idle_gpus", "elastic") == 0
    assert c.gang("elastic").scaled_from == 2
    # a new member bound and pulling its image: only its GPUs are idle, by its reason
    new = pod("elastic-new", labels={"kueue.x-k8s.io/podset": "workers"}, phase="Pending", ready=False, node="n9",
              spec={"schedulingGroup": {"podGroupName": "elastic"}})
    new["status"]["containerStatuses"] = [{"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}]
    c.add("pods_kueue", new)
    assert c.stage("elastic") == "scaling"
    assert c.value("gangscope_gang_idle_gpus", "elastic", reason="ImagePullBackOff") == 8


def test_1_35_pods_name_their_group_by_workload_ref() -> None:
    c = Cluster()
    [wl135] = objects("k8s-11-golden-v1alpha1-Workload-v1.35.yaml")
    wl135["metadata"]["namespace"] = "ml"
    c.add("workloads_native", wl135)
    ref = {"workloadRef": {"name": "nameValue", "podGroup": "nameValue", "podGroupReplicaKey": "0"}}
    c.list_pods("pods_kueue", pod("a", labels={"kueue.x-k8s.io/podset": "w"}, spec=ref))
    assert c.stage("nameValue/nameValue") == "assembled"  # minCount 1, one running pod (the v1.35 group had no status)


def test_composite_parent_is_assembled_only_when_its_children_are() -> None:
    c = Cluster()
    c.add("workloads", workload("wl", owner=("Job", "train", "uid-train"), count=8))
    c.add("compositepodgroups_native", {
        "apiVersion": "scheduling.k8s.io/v1alpha3", "kind": "CompositePodGroup",
        "metadata": {"name": "pipeline", "namespace": "ml", "uid": "cpg", "creationTimestamp": ts(T0 - 60),
                     "ownerReferences": [{"kind": "Job", "name": "train", "uid": "uid-train", "controller": True}]},
        "spec": {"workloadRef": {"workloadName": "training", "templateName": "pipeline"},
                 "schedulingPolicy": {"gang": {"minGroupCount": 2}}}, "status": {}})
    c.add("podgroups_native", native_pg("rack-a", 4, parent="pipeline"), native_pg("rack-b", 4, parent="pipeline"))
    c.list_pods("pods_kueue", *native_pods("rack-a", 4), *native_pods("rack-b", 1, pending=3))
    assert (c.stage("rack-a"), c.stage("rack-b"), c.stage("pipeline")) == ("assembled", "partially_bound", "partially_bound")
    info = {(dict(k)["podgroup"], dict(k)["parent"]) for k in c.series("gangscope_gang_info")}
    assert ("rack-a", "pipeline") in info and ("pipeline", "") in info
    # rack-a's 32 GPUs wait for rack-b: the parent counts them, rack-b its own bound 8
    assert c.value("gangscope_gang_idle_gpus", "pipeline") == 32
    assert c.value("gangscope_gang_idle_gpus", "rack-b") == 8
    for i in range(3):
        c.add("pods_kueue", pod(f"rack-b-p{i}", labels={"kueue.x-k8s.io/podset": "workers"},
                                spec={"schedulingGroup": {"podGroupName": "rack-b"}}, node=f"b{i}", rv="2"), event="MODIFIED")
    assert (c.stage("rack-b"), c.stage("pipeline")) == ("assembled", "assembled")
    assert c.value("gangscope_podgroup_info", "pipeline", composite="1") == 1
    doc = assembly_layer(c.store.workloads[("ml", "wl")], c.gangs.gangs_of(("ml", "wl")), c.now, c.gangs)
    assert "pipeline assembled (2/2 child groups assembled (rack-a assembled, rack-b assembled))" in doc["summary"]


# ---- KAI --------------------------------------------------------------------------------------

def kai01() -> dict[str, Any]:
    [obj] = objects("kai-01-podgroup-gb200-eks-unschedulable-list.yaml")
    return obj


def test_kai_real_unschedulable_gang() -> None:
    """The GB200 cluster's PodGroup: no phase, no counters; UnschedulableOnNodePool with the typed
    reason PodSchedulingErrors; its two pods pending, linked by the pod-group-name annotation."""
    rec = pg.parse_kai("podgroups_kai", kai01())
    assert (rec.api, rec.min_member, rec.queue, rec.phase, rec.errors) == ("kai", 2, "default-queue", "Unschedulable", ())
    assert [u.reason for u in rec.unschedulable] == ["PodSchedulingErrors"]
    assert rec.unschedulable[0].message.startswith("Resources were found for 1 pods while 2 are required")
    assert rec.phase_since == pytest.approx(1786238559.0)  # the condition's lastTransitionTime, 2026-08-09T01:22:39Z
    c = Cluster(now=1786238557.0 + 60)
    c.add("podgroups_kai", kai01())
    ns = "gang-scheduling-test"
    annotations = {"pod-group-name": "gang-test-group"}
    c.list_pods("pods_kai", *(pod(f"gang-worker-{i}", ns, node=None, phase="Pending", ready=False, gpus=1,
                                  annotations=annotations, spec={"schedulerName": "kai-scheduler"}) for i in range(2)))
    assert c.stage("gang-test-group", ns) == "assembling"
    assert c.value("gangscope_podgroup_unschedulable", "gang-test-group", ns, reason="PodSchedulingErrors", api="kai") == 1
    assert c.value("gangscope_gang_pods", "gang-test-group", ns, state="pending") == 2
    c.now += 601
    c.gangs.reevaluate()
    assert c.stage("gang-test-group", ns) == "stuck"
    # then the capacity blocker went away: both ran to completion (kai-01b)
    for i in range(2):
        c.add("pods_kai", pod(f"gang-worker-{i}", ns, node="ip-100-64-135-20.ec2.internal", phase="Succeeded", gpus=1,
                              annotations=annotations, rv="9"), event="MODIFIED")
    assert c.stage("gang-test-group", ns) == "finished"
    assert c.value("gangscope_podgroup_unschedulable", "gang-test-group", ns) is None


def test_kai_group_no_pod_joins_is_empty_not_stuck() -> None:
    """kai-05: the pods carried only pod-group.scheduling.run.ai labels, which KAI ignores, so the
    hand-made group had no member for ever and the pod-grouper made one group per pod."""
    c = Cluster(now=T0 + 7200)
    group = {"apiVersion": "scheduling.run.ai/v2alpha2", "kind": "PodGroup",
             "metadata": {"name": "gang-test-group", "namespace": "gang-scheduling-test", "creationTimestamp": ts(T0)},
             "spec": {"minMember": 2, "queue": "default-queue"}}
    c.add("podgroups_kai", group)
    labels = {"pod-group.scheduling.run.ai/name": "gang-test-group", "pod-group.scheduling.run.ai/group-id": "gang-test-group"}
    c.list_pods("pods_kai", *(pod(f"gang-worker-{i}", "gang-scheduling-test", labels=labels, phase="Succeeded", gpus=1,
                                  annotations={"pod-group-name": f"pg-gang-worker-{i}-0f1259e1"}) for i in range(2)))
    assert c.stage("gang-test-group", "gang-scheduling-test") == "empty"
    assert c.value("gangscope_gang_assembly_stuck", "gang-test-group", "gang-scheduling-test") is None


def test_kai_subgroups_and_topology() -> None:
    docs = objects("kai-04-example-external-podgroup-subgroups-topology.yaml")
    [group] = [d for d in docs if d["kind"] == "PodGroup"]
    rec = pg.parse_kai("podgroups_kai", group)
    assert (rec.min_member, rec.min_subgroups) == (6, 2)  # minMember from the tree: both sub-groups of 3
    assert [(g.name, g.min_member, g.required_topology) for g in rec.subgroups] == [
        ("rack-workers", 3, "topology.test/rack-domain"), ("zone-workers", 3, "topology.test/zone-domain")]
    c = Cluster()
    c.add("podgroups_kai", group)
    jobs = [d for d in docs if d["kind"] == "Job"]
    pods = []
    for job in jobs:  # the pods the Jobs make, as the pod template says
        tmpl = job["spec"]["template"]
        for i in range(3):
            pods.append(pod(f"{job['metadata']['name']}-{i}", "default", labels=tmpl["metadata"]["labels"],
                            annotations=tmpl["metadata"]["annotations"], gpus=4, node=f"{job['metadata']['name']}-n{i}",
                            phase="Running" if job["metadata"]["name"] == "rack-bound-job" or i < 2 else "Pending"))
    pods[-1]["spec"].pop("nodeName")
    c.list_pods("pods_kai", *pods)
    assert c.stage("multi-topology-pipeline", "default") == "partially_bound"  # 5 of 6 running, zone-workers needs 3
    c.add("pods_kai", {**pods[-1], "spec": {**pods[-1]["spec"], "nodeName": "n6"}}, event="MODIFIED")
    assert c.stage("multi-topology-pipeline", "default") == "starting"  # all 6 placed, one not started
    c.add("pods_kai", {**pods[-1], "spec": {**pods[-1]["spec"], "nodeName": "n6"}, "status": {"phase": "Running"}},
          event="MODIFIED")
    assert c.stage("multi-topology-pipeline", "default") == "assembled"
    [hier] = objects("kai-06-docs-hierarchical-podgroup-topology.yaml")
    h = pg.parse_kai("podgroups_kai", hier)
    # roots: subgroup-ab (both children: a 1 + b 2 = 3) and subgroup-c (3); minSubGroup 2 of them: 6 pods
    assert (h.required_topology, h.min_subgroups, h.min_member) == ("topology/zone", 2, 6)
    assert [(g.name, g.parent, g.required_topology) for g in h.subgroups][1] == ("subgroup-a", "subgroup-ab", "topology/rack")


def test_kai_crds_of_both_generations_accept_our_reading() -> None:
    """The older CRD still serves status.phase and counters (never filled: KAI-Scheduler#1650): a
    group carrying them is read without relying on them."""
    obj = kai01()
    obj["status"] = {**obj["status"], "phase": "Running", "running": 2}
    rec = pg.parse_kai("podgroups_kai", obj)
    assert (rec.phase, rec.running) == ("Unschedulable", None)
    crd = yaml.safe_load((REAL / "kai-03-podgroup-crd-v2alpha2-2026-03-with-phase.yaml").read_text())
    status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert {"phase", "schedulingConditions", "resourcesStatus"} <= set(status)
    current = yaml.safe_load((REAL / "kai-02-podgroup-crd-v2alpha2-2026-08.yaml").read_text())
    status = current["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert "phase" not in status and "schedulingConditions" in status


def test_a_dump_keeps_the_stuck_window_of_its_objects() -> None:
    """Offline (snapshot, explain --from-file) the dump's pods are one LIST: a gang is never seen
    empty before its first pod, so its window runs from the objects' own times, not load time."""
    from exporter.loader import feed

    c = Cluster(now=T0 + 3600)
    group = {"apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
             "metadata": {"name": "g", "namespace": "ml", "uid": "pg-g", "creationTimestamp": ts(T0)},
             "spec": {"minMember": 2, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}}
    label = {"scheduling.x-k8s.io/pod-group": "g"}
    pods = [pod("a", labels=label), pod("b", labels=label, node=None, phase="Pending", ready=False)]
    feed(c.expo, c.h, [("dump.yaml", o) for o in (group, *pods)], "test")
    gang = c.gang("g")
    assert (gang.stage, gang.wait_start, gang.regressed_at) == ("partially_bound", T0, None)
    assert gang.stuck
    assert c.value("gangscope_gang_idle_gpu_seconds_total", "g", api="coscheduling") == 0  # nothing ran over time


def test_explain_tells_a_starting_gang_as_a_node_or_image_matter() -> None:
    """Four of four bound and pulling an hour after creation: Coscheduling's timeout is over once
    the pods bind, so explain names the waiting containers' reasons, not a stuck assembly."""
    c = Cluster(now=T0 + 3600)
    c.add("podgroups_coscheduling", {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
        "metadata": {"name": "g", "namespace": "ml", "uid": "pg-g", "creationTimestamp": ts(T0)},
        "spec": {"minMember": 4, "scheduleTimeoutSeconds": 60}, "status": {"phase": "Scheduling"}})
    pods = []
    for i in range(4):
        p = pod(f"w{i}", labels={"scheduling.x-k8s.io/pod-group": "g"}, phase="Pending", ready=False, node=f"n{i}")
        p["status"]["containerStatuses"] = [{"name": "c", "ready": False, "state": {
            "waiting": {"reason": "ImagePullBackOff" if i else "ContainerCreating", "message": "Back-off pulling image"}}}]
        pods.append(p)
    c.list_pods("pods_coscheduling", *pods)
    assert c.stage("g") == "starting"
    assert c.value("gangscope_gang_assembly_stuck", "g") == 0
    assert c.value("gangscope_gang_assembly_deadline_timestamp_seconds", "g") is None
    assert c.value("gangscope_gang_idle_gpus", "g", reason="ImagePullBackOff") == 24
    assert c.value("gangscope_gang_pods", "g", state="bound") == 4
    doc = assembly_layer(None, [c.gang("g")], c.now, c.gangs)
    assert doc["status"] == "blocking"
    assert doc["summary"].startswith("placed, not started: all members are bound, some containers have not started "
                                     "(a node or image matter, not the gang scheduler's): PodGroup g (coscheduling)")
    assert "0/4 running (live pods: 4 bound, not started); waiting to start: 1 ContainerCreating, 3 ImagePullBackOff" \
        in doc["summary"]
    assert "stuck" not in doc["summary"] and "timeout" not in doc["summary"]


def test_pods_of_a_group_that_no_longer_exists_are_named_not_judged() -> None:
    c = Cluster()
    c.add("workloads", workload("wl", count=2))
    pods = [pod(f"w{i}", labels={"kueue.x-k8s.io/podset": "main", "scheduling.x-k8s.io/pod-group": "gone"},
                annotations={"kueue.x-k8s.io/workload": "wl"}, node=None, phase="Pending", ready=False) for i in range(2)]
    c.list_pods("pods_kueue", *pods)
    wl = c.store.workloads[("ml", "wl")]
    assert c.gangs.gangs_of(wl.key) == [] and c.series("gangscope_gang_stage") == {}
    doc = assembly_layer(wl, [], c.now, c.gangs)
    assert doc["evidence"]["missing_podgroups"] == ["gone (coscheduling)"]
    assert doc["summary"].endswith("; its pods name PodGroup gone (coscheduling), which gangscope does not see "
                                   "(deleted, or not watched)")
