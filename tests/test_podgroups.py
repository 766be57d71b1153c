"""PodGroups of the three APIs: parsed from realistic objects, exported as exact series."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from exporter.cluster import podgroups as pg
from exporter.fields import ParseError
from exporter.cluster.gangs import GangIndex
from exporter.cluster.store import ClusterStore
from exporter.exposition import Exposition
from exporter.health import SourceHealth
from kueue_objects import family_series

FIXTURES = Path(__file__).parent / "fixtures" / "podgroups"


def items(name: str) -> list[dict]:
    return yaml.safe_load((FIXTURES / name).read_text())["items"]


def by_name(name: str) -> dict[str, dict]:
    return {o["metadata"].get("name", ""): o for o in items(name)}


series = family_series


def L(**labels: str) -> tuple:
    return tuple(sorted(labels.items()))


def test_coscheduling_fields() -> None:
    objs = by_name("coscheduling.yaml")
    rec = pg.parse_coscheduling("podgroups_coscheduling", objs["llama-train"])
    assert (rec.api, rec.namespace, rec.name, rec.min_member, rec.schedule_timeout_seconds) == (
        "coscheduling", "ml-team", "llama-train", 16, 300)
    assert (rec.phase, rec.running, rec.succeeded, rec.failed, rec.gang_state) == ("Running", 16, 0, 0, "assembled")
    assert rec.owner_uids == ("3f1c9a52-7d4e-4b8a-9c21-5e6f7a8b9c0d",)
    assert rec.owner_names == (("Job", "llama-train"),)
    assert rec.occupied_by == "ml-team/llama-train"
    assert rec.errors == ()
    legacy = pg.parse_coscheduling("podgroups_coscheduling_legacy", objs["legacy-mpi"])
    assert (legacy.phase, legacy.gang_state, legacy.errors) == ("PreScheduling", "waiting", ())
    states = {n: pg.parse_coscheduling("s", o).gang_state for n, o in objs.items()}
    assert states == {"llama-train": "assembled", "mixtral-sft": "waiting", "t5-pretrain": "waiting",
                      "bert-eval": "finished", "gpt-crash": "failed", "legacy-mpi": "waiting"}


def test_volcano_fields_and_message() -> None:
    objs = by_name("volcano.yaml")
    rec = pg.parse_volcano("podgroups_volcano", objs["resnet-dist-5c1a2b3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"])
    assert (rec.phase, rec.queue, rec.min_member, rec.running) == ("Pending", "vision-gpu", 8, 0)
    assert rec.message.startswith("8/8 tasks in gang unschedulable")
    assert rec.conditions[0].reason == "NotEnoughResources"
    assert pg.parse_volcano("s", objs["whisper-ft"]).gang_state == "waiting"  # Inqueue
    assert pg.parse_volcano("s", objs["clip-partial"]).gang_state == "partial"  # Unknown
    assert pg.parse_volcano("s", objs["tts-done"]).gang_state == "finished"
    assert pg.parse_volcano("s", objs["sd-xl"]).message == ""


def test_native_podgroups_and_1_35_workload() -> None:
    objs = by_name("native.yaml")
    beta = pg.parse_native("podgroups_native", objs["ray-workers"])
    assert (beta.phase, beta.min_member, beta.workload_ref, beta.since_source) == ("Scheduled", 8, "ppo", "condition")
    assert beta.phase_since == pytest.approx(1787230930.0)  # 2026-08-20T13:02:10Z
    assert beta.running is None  # native groups report no pod counters
    alpha2 = pg.parse_native("podgroups_native", objs["jax-tpu-sim"])
    assert (alpha2.phase, alpha2.min_member, alpha2.workload_ref) == ("Unschedulable", 16, "jax-tpu-sim")
    assert alpha2.message == "minCount (16) cannot be satisfied: 6 scheduled, 10 remaining"
    recs = pg.parse_native_workload("workloads_native", objs["lws-llama"]).records
    assert [(r.name, r.min_member, r.phase, r.gang_state) for r in recs] == [
        ("lws-llama/leader", None, None, "unreported"), ("lws-llama/workers", 4, None, "unreported")]
    assert recs[1].owner_names[0] == ("LeaderWorkerSet", "llama-70b")


def test_source_of_dumped_objects() -> None:
    sources = [pg.source_of(o) for f in ("coscheduling.yaml", "volcano.yaml", "native.yaml") for o in items(f)]
    assert sources == (["podgroups_coscheduling"] * 5 + ["podgroups_coscheduling_legacy"] + ["podgroups_volcano"] * 5
                       + ["podgroups_native"] * 2 + ["workloads_native"])
    assert pg.source_of({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"}) is None


def load(index: GangIndex, *files: str) -> None:
    grouped: dict[str, list] = {s: [] for s in pg.PARSERS}
    for f in files:
        for o in items(f):
            grouped[pg.source_of(o) or "podgroups_coscheduling"].append(o)
    for source, objs in grouped.items():
        index.handlers()[source].replace(objs)


def test_exposition_of_every_api() -> None:
    expo = Exposition()
    index = GangIndex(ClusterStore(expo), clock=lambda: 1787240000.0)
    load(index, "coscheduling.yaml", "volcano.yaml", "native.yaml")
    phase = series(expo, "gangscope_podgroup_phase")
    llama = {k: v for k, v in phase.items() if ("podgroup", "llama-train") in k}
    assert llama == {L(namespace="ml-team", podgroup="llama-train", api="coscheduling", phase="Running"): 1.0}  # current only
    assert phase[L(namespace="speech", podgroup="whisper-ft", api="volcano", phase="Inqueue")] == 1
    assert phase[L(namespace="rl", podgroup="jax-tpu-sim", api="native", phase="Unschedulable")] == 1
    assert not [k for k in phase if ("podgroup", "lws-llama/workers") in k]  # no status, no phase
    mins = series(expo, "gangscope_podgroup_min_member")
    assert mins[L(namespace="serving", podgroup="lws-llama/workers", api="native")] == 4
    assert L(namespace="serving", podgroup="lws-llama/leader", api="native") not in mins  # basic policy
    assert mins[L(namespace="hpc", podgroup="legacy-mpi", api="coscheduling_legacy")] == 8
    pods = series(expo, "gangscope_podgroup_pods")
    assert pods[L(namespace="vision", podgroup="clip-partial", api="volcano", state="running")] == 2
    assert pods[L(namespace="research", podgroup="gpt-crash", api="coscheduling", state="failed")] == 1
    assert not [k for k in pods if ("api", "native") in k]
    ts = series(expo, "gangscope_podgroup_phase_timestamp_seconds")
    # Coscheduling Pending at first sight: since creation. Running at first sight: observed now.
    assert ts[L(namespace="research", podgroup="t5-pretrain", api="coscheduling")] == pytest.approx(1787223600.0)
    assert ts[L(namespace="ml-team", podgroup="llama-train", api="coscheduling")] == 1787240000.0
    # Volcano: the condition's lastTransitionTime.
    assert ts[L(namespace="vision", podgroup="sd-xl", api="volcano")] == pytest.approx(1787209290.0)


def test_phase_timestamp_follows_observed_changes() -> None:
    now = [1787240000.0]
    expo = Exposition()
    index = GangIndex(ClusterStore(expo), clock=lambda: now[0])
    h = index.handlers()["podgroups_coscheduling"]
    obj = by_name("coscheduling.yaml")["mixtral-sft"]
    h.apply("ADDED", obj)
    key = L(namespace="ml-team", podgroup="mixtral-sft", api="coscheduling")
    assert series(expo, "gangscope_podgroup_phase_timestamp_seconds")[key] == 1787240000.0
    now[0] += 30
    h.apply("MODIFIED", obj)  # same phase: keeps its start
    assert series(expo, "gangscope_podgroup_phase_timestamp_seconds")[key] == 1787240000.0
    obj = {**obj, "status": {**obj["status"], "phase": "Running", "running": 4}}
    h.apply("MODIFIED", obj)
    assert series(expo, "gangscope_podgroup_phase_timestamp_seconds")[key] == 1787240030.0
    h.apply("DELETED", obj)
    assert series(expo, "gangscope_podgroup_phase_timestamp_seconds") == {}
    assert series(expo, "gangscope_podgroup_phase") == {}


def test_malformed_objects_are_counted_and_exported_as_they_are() -> None:
    expo = Exposition()
    index = GangIndex(ClusterStore(expo))
    healths = {s: SourceHealth(s, expo) for s in pg.PARSERS}
    for s, h in index.handlers().items():
        h.health = healths[s]
    load(index, "malformed.yaml")
    # future-phase: unknown phase + minMember string (2 errors); nameless object (1); odd-volcano: running + condition (2).
    assert healths["podgroups_coscheduling"].parse_errors == 3
    assert healths["podgroups_volcano"].parse_errors == 2
    assert healths["podgroups_coscheduling"].objects == 1
    phase = series(expo, "gangscope_podgroup_phase")
    assert phase[L(namespace="ml-team", podgroup="future-phase", api="coscheduling", phase="Preempting")] == 1
    assert [k for k in phase if ("podgroup", "future-phase") in k] == [
        L(namespace="ml-team", podgroup="future-phase", api="coscheduling", phase="Preempting")]
    assert L(namespace="ml-team", podgroup="future-phase", api="coscheduling") not in series(expo, "gangscope_podgroup_min_member")
    pods = series(expo, "gangscope_podgroup_pods")
    assert pods[L(namespace="vision", podgroup="odd-volcano", api="volcano", state="running")] == 0
    errors = series(expo, "gangscope_parse_errors_total")
    assert errors[L(source="podgroups_coscheduling")] == 3


@pytest.mark.parametrize("obj", [None, 3, "x", {"metadata": "x"}, {"metadata": {"name": ""}}, {"metadata": {"name": 5}}])
def test_unusable_objects_raise_parse_error(obj: object) -> None:
    for parse in (pg.parse_coscheduling, pg.parse_volcano, pg.parse_native):
        with pytest.raises(ParseError):
            parse("s", obj)
    with pytest.raises(ParseError):
        pg.parse_native_workload("s", {"metadata": {"name": "w", "namespace": "n"}, "spec": {"podGroups": "x"}})


def test_native_workload_update_drops_removed_groups() -> None:
    expo = Exposition()
    index = GangIndex(ClusterStore(expo))
    h = index.handlers()["workloads_native"]
    obj = by_name("native.yaml")["lws-llama"]
    h.apply("ADDED", obj)
    assert {k[2] for k in index.podgroups} == {"lws-llama/leader", "lws-llama/workers"}
    h.apply("MODIFIED", {**obj, "spec": {**obj["spec"], "podGroups": obj["spec"]["podGroups"][1:]}})
    assert {k[2] for k in index.podgroups} == {"lws-llama/workers"}
    h.apply("DELETED", obj)
    assert index.podgroups == {}
    assert series(expo, "gangscope_podgroup_min_member") == {}


def test_odd_phase_text_is_escaped() -> None:
    expo = Exposition()
    index = GangIndex(ClusterStore(expo))
    obj = by_name("coscheduling.yaml")["mixtral-sft"]
    index.handlers()["podgroups_coscheduling"].apply("ADDED", {**obj, "status": {"phase": 'Odd "phase"\\ \n x'}})
    phase = series(expo, "gangscope_podgroup_phase")
    assert phase[L(namespace="ml-team", podgroup="mixtral-sft", api="coscheduling", phase='Odd "phase"\\ \n x')] == 1
