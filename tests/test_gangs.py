"""The Workload <-> PodGroup join (every key, both directions of change), gang stages, idle GPUs
and the stuck-assembly timer, checked on the exported series."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import pytest

from exporter.cluster.gang_state import GANG_STAGES, evaluate
from exporter.cluster.gangs import GangIndex
from exporter.cluster.podgroups import parse_coscheduling
from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition
from kueue_objects import family_series

T0 = 1787220000.0  # 2026-08-20T10:00:00Z


def ts(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def workload(
    name: str, ns: str = "ml", *, owner: tuple[str, str, str] | None = ("Job", "train", "uid-train"),
    labels: dict | None = None, podsets: list[dict] | None = None, admitted_at: float | None = T0,
    finished: bool = False,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"wl-{name}", "creationTimestamp": ts(T0 - 600),
                            "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": owner[0], "name": owner[1], "uid": owner[2],
                                    "controller": True}]
    conditions = []
    if admitted_at is not None:
        conditions += [
            {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved", "message": "", "lastTransitionTime": ts(admitted_at)},
            {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "", "lastTransitionTime": ts(admitted_at)},
        ]
    else:
        conditions.append({"type": "QuotaReserved", "status": "False", "reason": "WaitingForQuota",
                           "message": "insufficient unused quota", "lastTransitionTime": ts(T0 - 600)})
    if finished:
        conditions.append({"type": "Finished", "status": "True", "reason": "Succeeded", "message": "", "lastTransitionTime": ts(T0 + 60)})
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta,
        "spec": {"queueName": "q", "podSets": podsets or [podset("main", 4, 8)]},
        "status": {"conditions": conditions},
    }


def podset(name: str, count: int, gpus: int, labels: dict | None = None, annotations: dict | None = None) -> dict:
    return {"name": name, "count": count, "template": {
        "metadata": {"labels": labels or {}, "annotations": annotations or {}},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"nvidia.com/gpu": str(gpus)}}}]}}}


def podgroup(name: str, ns: str = "ml", *, group: str = "scheduling.x-k8s.io", owner_uid: str | None = None,
             phase: str = "Pending", running: int = 0, min_member: int = 4, timeout: int | None = None,
             created: float = T0 - 600) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"pg-{name}", "creationTimestamp": ts(created)}
    if owner_uid:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": "x", "uid": owner_uid, "controller": True}]
    spec: dict[str, Any] = {"minMember": min_member}
    if timeout is not None:
        spec["scheduleTimeoutSeconds"] = timeout
    return {"apiVersion": f"{group}/v1alpha1" if group != "scheduling.volcano.sh" else f"{group}/v1beta1",
            "kind": "PodGroup", "metadata": meta, "spec": spec, "status": {"phase": phase, "running": running}}


SOURCE = {"scheduling.x-k8s.io": "podgroups_coscheduling", "scheduling.sigs.k8s.io": "podgroups_coscheduling_legacy",
          "scheduling.volcano.sh": "podgroups_volcano"}


class Cluster:
    def __init__(self, now: float = T0 + 60, timeout: float = 600.0) -> None:
        self.now = now
        self.expo = Exposition()
        self.store = ClusterStore(self.expo)
        self.gangs = GangIndex(self.store, assembly_timeout=timeout, clock=lambda: self.now)
        self.wl = self.store.handlers()["workloads"]
        self.pgs = self.gangs.handlers()

    def add_wl(self, obj: dict) -> None:
        self.wl.apply("ADDED", obj)

    def add_pg(self, obj: dict) -> None:
        self.pgs[SOURCE[obj["apiVersion"].split("/")[0]]].apply("ADDED", obj)

    def series(self, family: str) -> dict[tuple, float]:
        return family_series(self.expo, family)

    def info(self) -> set[tuple[str, str, str, str, str]]:
        return {(d["namespace"], d["workload"], d["podgroup"], d["api"], d["join_key"])
                for d in (dict(k) for k in self.series("gangscope_gang_info"))}

    def stage(self, ns: str, pg: str) -> str:
        current = [dict(k)["stage"] for k, v in self.series("gangscope_gang_stage").items()
                   if v == 1 and dict(k)["podgroup"] == pg and dict(k)["namespace"] == ns]
        assert len(current) == 1
        return current[0]

    def value(self, family: str, ns: str, pg: str) -> float | None:
        found = [v for k, v in self.series(family).items() if dict(k)["podgroup"] == pg and dict(k)["namespace"] == ns]
        return found[0] if found else None


# ---- join keys -----------------------------------------------------------------------------

def test_template_label_joins_and_outranks_owner_name() -> None:
    c = Cluster()
    c.add_wl(workload("wl-a", owner=("Job", "other", "u1"),
                      podsets=[podset("main", 4, 8, labels={"scheduling.x-k8s.io/pod-group": "pg-a"})]))
    c.add_wl(workload("wl-b", owner=("Job", "pg-a", "u2")))  # owner name == pg name: weaker key
    c.add_pg(podgroup("pg-a"))
    assert c.info() == {("ml", "wl-a", "pg-a", "coscheduling", "template")}


def test_legacy_label_joins_legacy_group() -> None:
    c = Cluster()
    c.add_pg(podgroup("old", group="scheduling.sigs.k8s.io"))
    c.add_wl(workload("wl", owner=None, podsets=[podset("main", 2, 8, labels={"pod-group.scheduling.sigs.k8s.io": "old"})]))
    assert c.info() == {("ml", "wl", "old", "coscheduling_legacy", "template")}


def test_one_name_in_both_coscheduling_groups_exports_two_series() -> None:
    c = Cluster()
    c.add_pg(podgroup("twin", group="scheduling.sigs.k8s.io", min_member=2))
    c.add_pg(podgroup("twin", min_member=4))
    mins = {dict(k)["api"]: v for k, v in c.series("gangscope_podgroup_min_member").items()}
    assert mins == {"coscheduling": 4, "coscheduling_legacy": 2}


def test_volcano_annotation_joins_volcano_group_only() -> None:
    c = Cluster()
    c.add_pg(podgroup("vg", group="scheduling.volcano.sh"))
    c.add_pg(podgroup("vg"))  # a Coscheduling group of the same name is not named by the annotation
    c.add_wl(workload("wl", owner=None, podsets=[podset("main", 2, 8, annotations={"scheduling.k8s.io/group-name": "vg"})]))
    assert c.info() == {("ml", "wl", "vg", "volcano", "template")}


def test_shared_owner_uid_and_job_uid_label() -> None:
    c = Cluster()
    c.add_wl(workload("wl-owner", owner=("MPIJob", "mpi", "uid-mpi")))
    c.add_wl(workload("wl-label", owner=None, labels={"kueue.x-k8s.io/job-uid": "uid-label"}))
    c.add_pg(podgroup("g1", owner_uid="uid-mpi"))
    c.add_pg(podgroup("g2", owner_uid="uid-label"))
    assert c.info() == {("ml", "wl-owner", "g1", "coscheduling", "owner_uid"), ("ml", "wl-label", "g2", "coscheduling", "owner_uid")}


def test_owner_name_equals_podgroup_name_in_same_namespace() -> None:
    c = Cluster()
    c.add_wl(workload("job-mpi-abcde", owner=("MPIJob", "mpi", "u")))
    c.add_pg(podgroup("mpi"))
    c.add_pg(podgroup("mpi", ns="other", created=T0))
    assert c.info() == {("ml", "job-mpi-abcde", "mpi", "coscheduling", "owner_name")}
    assert c.stage("other", "mpi") == "assembling"  # unjoined groups still get a stage (workload="")


def test_native_1_35_workload_joins_by_controller_ref_name() -> None:
    c = Cluster()
    c.add_wl(workload("lws-wl", owner=("LeaderWorkerSet", "llama-70b", "u")))
    c.pgs["workloads_native"].apply("ADDED", {
        "apiVersion": "scheduling.k8s.io/v1alpha1", "kind": "Workload",
        "metadata": {"name": "lws-llama", "namespace": "ml", "creationTimestamp": ts(T0)},
        "spec": {"controllerRef": {"apiGroup": "leaderworkerset.x-k8s.io", "kind": "LeaderWorkerSet", "name": "llama-70b"},
                 "podGroups": [{"name": "workers", "policy": {"gang": {"minCount": 4}}}]}})
    assert c.info() == {("ml", "lws-wl", "lws-llama/workers", "native", "owner_name")}
    assert c.stage("ml", "lws-llama/workers") == "unreported"


def test_native_pod_template_scheduling_group_joins_by_template() -> None:
    """A pod template's ``spec.schedulingGroup.podGroupName`` names a native PodGroup (1.36+):
    that is a template join, and it outranks an owner-name match of another Workload."""
    c = Cluster()
    ps = podset("workers", 8, 4)
    ps["template"]["spec"]["schedulingGroup"] = {"podGroupName": "ray-workers"}
    c.add_wl(workload("ray-wl", podsets=[ps], owner=("RayCluster", "ppo", "u-ray")))
    c.add_wl(workload("decoy", owner=("Job", "ray-workers", "u-decoy")))
    c.pgs["podgroups_native"].apply("ADDED", {
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "ray-workers", "namespace": "ml", "uid": "pg-ray", "creationTimestamp": ts(T0)},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 8}}},
        "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "False", "reason": "Unschedulable",
                                   "message": "minCount (8) cannot be satisfied", "lastTransitionTime": ts(T0)}]}})
    assert c.info() == {("ml", "ray-wl", "ray-workers", "native", "template")}
    bad = podset("workers", 8, 4)
    bad["template"]["spec"]["schedulingGroup"] = {"podGroupName": 7}
    c.add_wl(workload("bad-wl", podsets=[bad]))
    assert c.store.workload("ml", "bad-wl").problems  # a wrong type is a counted problem, not a join


def test_join_follows_changes_on_both_sides() -> None:
    c = Cluster()
    c.add_pg(podgroup("g", owner_uid="u9"))
    assert c.info() == set()
    c.add_wl(workload("wl", owner=("Job", "j", "u9")))
    assert c.info() == {("ml", "wl", "g", "coscheduling", "owner_uid")}
    # The Workload now names another group in its template: the owner-uid pair stays (no better key for g).
    c.wl.apply("MODIFIED", workload("wl", owner=("Job", "j", "u9"),
                                    podsets=[podset("main", 4, 8, labels={"scheduling.x-k8s.io/pod-group": "h"})]))
    c.add_pg(podgroup("h"))
    assert c.info() == {("ml", "wl", "g", "coscheduling", "owner_uid"), ("ml", "wl", "h", "coscheduling", "template")}
    c.wl.apply("DELETED", workload("wl"))
    assert c.info() == set()
    # Alone again, the group waits from its creation (T0 - 600): past the 600 s default.
    assert c.value("gangscope_gang_assembly_stuck", "ml", "g") == 1
    c.pgs["podgroups_coscheduling"].apply("DELETED", podgroup("g"))
    assert c.value("gangscope_gang_stage", "ml", "g") is None


# ---- stages ---------------------------------------------------------------------------------

def test_stage_transitions_through_a_gang_life() -> None:
    c = Cluster(now=T0 - 300)
    c.add_wl(workload("wl", owner=("Job", "g", "u"), admitted_at=None))
    c.add_pg(podgroup("g", timeout=120))
    assert c.stage("ml", "g") == "not_admitted"
    assert c.value("gangscope_gang_assembly_stuck", "ml", "g") == 0
    assert c.value("gangscope_gang_assembly_deadline_timestamp_seconds", "ml", "g") is None
    c.now = T0 + 60
    c.wl.apply("MODIFIED", workload("wl", owner=("Job", "g", "u"), admitted_at=T0))
    assert c.stage("ml", "g") == "assembling"
    assert c.value("gangscope_gang_assembly_deadline_timestamp_seconds", "ml", "g") == T0 + 120
    c.now = T0 + 121
    c.gangs.reevaluate()
    assert (c.stage("ml", "g"), c.value("gangscope_gang_assembly_stuck", "ml", "g")) == ("stuck", 1)
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Scheduling", timeout=120))
    assert c.stage("ml", "g") == "stuck"  # the window counts from admission, not from the phase
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Running", running=4, timeout=120))
    assert (c.stage("ml", "g"), c.value("gangscope_gang_assembly_stuck", "ml", "g")) == ("assembled", 0)
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Finished", timeout=120))
    assert c.stage("ml", "g") == "finished"
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Failed", running=1, timeout=120))
    assert c.stage("ml", "g") == "failed"


def podgroup_and_gang_families(c: Cluster) -> set[str]:
    text = c.expo.render(False).decode()
    return {line.split("{")[0] for line in text.splitlines() if line.startswith(("gangscope_gang", "gangscope_podgroup"))}


def test_a_finished_workload_takes_its_gang_and_podgroup_series_with_it() -> None:
    """Finished or deactivated: the gang's and the PodGroup's series go (the Workload keeps its
    summary); the records stay for explain, and the series return if it runs again."""
    c = Cluster()
    c.add_wl(workload("wl", owner=("Job", "g", "u")))
    c.add_pg(podgroup("g", owner_uid="u", phase="Running", running=4))
    everything = podgroup_and_gang_families(c)
    assert {"gangscope_gang_info", "gangscope_gang_stage", "gangscope_podgroup_phase", "gangscope_podgroup_info",
            "gangscope_podgroup_min_member", "gangscope_gang_idle_gpu_seconds_total"} <= everything
    c.wl.apply("MODIFIED", workload("wl", owner=("Job", "g", "u"), finished=True))
    assert podgroup_and_gang_families(c) == set()
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", owner_uid="u", phase="Finished"))
    assert podgroup_and_gang_families(c) == set()  # a PodGroup event does not bring them back
    assert [g.stage for g in c.gangs.gangs_of(("ml", "wl"))] == ["finished"]  # explain still has the gang
    inactive = workload("wl", owner=("Job", "g", "u"))
    inactive["spec"]["active"] = False
    c.wl.apply("MODIFIED", inactive)
    assert podgroup_and_gang_families(c) == set()
    c.wl.apply("MODIFIED", workload("wl", owner=("Job", "g", "u")))
    assert {"gangscope_gang_stage", "gangscope_podgroup_phase"} <= podgroup_and_gang_families(c)


def test_the_podgroup_lines_of_a_hidden_gang_are_never_formatted(monkeypatch: pytest.MonkeyPatch) -> None:
    """Most PodGroups of a cluster belong to finished jobs: their lines are not formatted at all
    (they were, then left out), and are when the gang is shown again."""
    from test_sync_costs import formatting_counted

    formatted = formatting_counted(monkeypatch)
    c = Cluster()
    c.add_wl(workload("wl", owner=("Job", "g", "u"), finished=True))
    c.add_pg(podgroup("g", owner_uid="u", phase="Finished"))
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", owner_uid="u", phase="Finished", running=1))
    assert podgroup_and_gang_families(c) == set()
    assert not {name for name in formatted if name.startswith(("gangscope_podgroup", "gangscope_gang"))}
    c.wl.apply("MODIFIED", workload("wl", owner=("Job", "g", "u")))
    assert {"gangscope_podgroup_phase", "gangscope_podgroup_info"} <= podgroup_and_gang_families(c)


def test_unjoined_podgroups_keep_their_series_whatever_their_phase() -> None:
    c = Cluster()
    c.add_pg(podgroup("lonely", phase="Finished"))
    assert {"gangscope_podgroup_phase", "gangscope_gang_stage"} <= podgroup_and_gang_families(c)


def test_finished_detail_keeps_gang_series_for_the_window() -> None:
    c = Cluster(now=T0 + 60 + 299)  # finished at T0 + 60
    c.store.finished_detail = 300
    c.store.clock = lambda: c.now
    c.add_wl(workload("wl", owner=("Job", "g", "u"), finished=True))
    c.add_pg(podgroup("g", owner_uid="u", phase="Finished"))
    assert "gangscope_gang_stage" in podgroup_and_gang_families(c)
    c.now += 1
    c.store.refresh(("ml", "wl"))  # the store's timer in the collector
    assert podgroup_and_gang_families(c) == set()


def wl_stage(c: Cluster, name: str) -> str:
    current = [dict(k)["stage"] for k, v in c.series("gangscope_workload_stage").items() if v == 1 and dict(k)["workload"] == name]
    assert len(current) == 1
    return current[0]


def test_workload_without_pods_ready_is_running_unless_its_gang_assembles() -> None:
    """Kueue without waitForPodsReady writes no PodsReady (kueue jobframework/reconciler.go:558-560):
    the Workload is running unless a joined gang says its pods are still assembling, whichever
    of the two objects changes, and whichever arrives first."""
    c = Cluster()
    c.add_wl(workload("wl", owner=("Job", "g", "u")))
    assert wl_stage(c, "wl") == "running"  # nothing joined: nothing says otherwise
    c.add_pg(podgroup("g", phase="Scheduling"))
    assert (c.stage("ml", "g"), wl_stage(c, "wl")) == ("assembling", "assembling")
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Scheduling", running=2))
    assert (c.stage("ml", "g"), wl_stage(c, "wl")) == ("partially_bound", "assembling")
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Running", running=4))
    assert (c.stage("ml", "g"), wl_stage(c, "wl")) == ("assembled", "running")
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Pending"))
    assert wl_stage(c, "wl") == "assembling"
    c.pgs["podgroups_coscheduling"].apply("DELETED", podgroup("g"))
    assert wl_stage(c, "wl") == "running"
    # the group first, then the Workload: the Workload's first render already knows
    d = Cluster()
    d.add_pg(podgroup("g", phase="Scheduling"))
    d.add_wl(workload("wl", owner=("Job", "g", "u")))
    assert wl_stage(d, "wl") == "assembling"
    # Kueue's own word wins where it speaks: PodsReady True is running whatever the gang says
    ready = workload("wl", owner=("Job", "g", "u"))
    ready["status"]["conditions"].append({"type": "PodsReady", "status": "True", "reason": "Started", "message": "",
                                          "lastTransitionTime": ts(T0 + 30)})
    d.wl.apply("MODIFIED", ready)
    assert wl_stage(d, "wl") == "running"


def test_default_assembly_timeout_applies_without_schedule_timeout() -> None:
    c = Cluster(now=T0 + 599, timeout=600)
    c.add_wl(workload("wl", owner=("Job", "g", "u")))
    c.add_pg(podgroup("g", group="scheduling.volcano.sh", phase="Inqueue"))
    assert c.stage("ml", "g") == "assembling"
    c.now = T0 + 600
    c.gangs.reevaluate()
    assert c.stage("ml", "g") == "stuck"


def test_unjoined_group_waits_from_its_creation() -> None:
    c = Cluster(now=T0 + 10)
    c.add_pg(podgroup("lonely", timeout=60, created=T0))
    assert c.stage("ml", "lonely") == "assembling"
    c.now = T0 + 61
    c.gangs.reevaluate()
    assert c.stage("ml", "lonely") == "stuck"
    assert c.value("gangscope_gang_idle_gpus", "ml", "lonely") is None  # no Workload: per-pod GPUs unknown


def test_the_stage_is_one_series_of_the_current_stage() -> None:
    c = Cluster()
    c.add_pg(podgroup("g"))
    assert [(dict(k)["stage"], v) for k, v in c.series("gangscope_gang_stage").items()] == [(c.stage("ml", "g"), 1)]
    assert c.stage("ml", "g") in GANG_STAGES


# ---- idle GPUs ------------------------------------------------------------------------------

def test_idle_gpus_of_a_partial_gang() -> None:
    c = Cluster()
    c.add_wl(workload("wl", owner=("Job", "g", "u"), podsets=[podset("main", 4, 8)]))
    c.add_pg(podgroup("g", phase="Pending", running=2, min_member=4))
    assert c.stage("ml", "g") == "partially_bound"
    assert c.value("gangscope_gang_idle_gpus", "ml", "g") == 16
    c.pgs["podgroups_coscheduling"].apply("MODIFIED", podgroup("g", phase="Running", running=4))
    assert c.value("gangscope_gang_idle_gpus", "ml", "g") == 0


def test_idle_gpus_use_the_template_that_names_the_group() -> None:
    c = Cluster()
    c.add_wl(workload("wl", owner=None, podsets=[
        podset("launcher", 1, 0, annotations={"scheduling.k8s.io/group-name": "vg"}),
        podset("worker", 4, 8, annotations={"scheduling.k8s.io/group-name": "vg"}),
    ]))
    c.add_pg(podgroup("vg", group="scheduling.volcano.sh", phase="Unknown", running=3, min_member=5))
    # Two templates name the group with different GPUs: the first (launcher, 0) wins; this is
    # why a per-template join matters. Same group, worker template only:
    assert c.stage("ml", "vg") == "partially_bound"
    c.wl.apply("MODIFIED", workload("wl", owner=None, podsets=[
        podset("launcher", 1, 0), podset("worker", 4, 8, annotations={"scheduling.k8s.io/group-name": "vg"})]))
    assert c.value("gangscope_gang_idle_gpus", "ml", "vg") == 24


def test_owner_joined_gang_uses_the_smallest_per_pod_gpus() -> None:
    rec = parse_coscheduling("s", podgroup("g", running=1, min_member=3))
    c = Cluster()
    c.add_wl(workload("wl", owner=("Job", "g", "u"), podsets=[podset("a", 1, 4), podset("b", 2, 8)]))
    gang = evaluate(rec, c.store.workloads[("ml", "wl")], "owner_name", T0, 600)
    assert (gang.gpus_per_pod, gang.idle_gpus) == (4, 4)


# ---- timers -----------------------------------------------------------------------------------

async def test_timer_marks_a_gang_stuck_without_any_event() -> None:
    import time

    start = time.time()
    c = Cluster(now=start)
    c.gangs.clock = time.time
    c.add_wl(workload("wl", owner=("Job", "g", "u"), admitted_at=None))
    obj = podgroup("g", created=start)
    obj["spec"]["scheduleTimeoutSeconds"] = 1
    c.add_pg(obj)
    c.gangs.start_timers()
    # Not admitted: no deadline, no timer.
    assert c.gangs._timers == {}
    wl = workload("wl", owner=("Job", "g", "u"), admitted_at=start)
    wl["status"]["conditions"][1]["lastTransitionTime"] = ts(int(start))
    c.wl.apply("MODIFIED", wl)
    assert c.stage("ml", "g") == "assembling"
    assert len(c.gangs._timers) == 1
    await asyncio.sleep(max(0.0, int(start) + 1 - time.time()) + 0.2)
    assert (c.stage("ml", "g"), c.value("gangscope_gang_assembly_stuck", "ml", "g")) == ("stuck", 1)
    assert c.gangs._timers == {}
    c.gangs.stop_timers()


def test_relist_drops_groups_that_vanished() -> None:
    c = Cluster()
    h = c.pgs["podgroups_coscheduling"]
    h.replace([podgroup("a"), podgroup("b")])
    h.replace([copy.deepcopy(podgroup("b"))])
    assert {k[2] for k in c.gangs.podgroups} == {"b"}
    assert c.value("gangscope_podgroup_min_member", "ml", "a") is None


@pytest.mark.parametrize("event", ["BOOKMARK", "ERROR"])
def test_other_event_types_are_ignored(event: str) -> None:
    c = Cluster()
    c.pgs["podgroups_volcano"].apply(event, {"metadata": {"resourceVersion": "5"}})
    assert c.gangs.podgroups == {}
