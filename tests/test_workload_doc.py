"""The typed path of a Workload (exporter/cluster/workload_doc.py, exporter/kube/typed.py) reads
every object exactly as the tolerant dict parser does: the same record, the same problems.

Evidence: every Workload real clusters, Kueue's docs and its e2e/envtest runs printed (the
fixtures of tests/fixtures/kueue/real and ../shared/fixtures/real), a benchmark cluster's, and
generated objects with fields of every wrong type (hypothesis). The typed path must be taken for
the clean ones (a test that only ever fell back would prove nothing), and must give way to the
dict parser wherever that one reports a problem.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import msgspec
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cluster.workload_doc import WorkloadDoc, as_doc, read_workload, workload_from_doc
from exporter.cluster.workloads import Workload, parse_workload
from exporter.exposition import Exposition
from exporter.fields import ParseError
from exporter.health import SourceHealth
from exporter.kube.typed import Unclean, page_decoder
from kueue_objects import FIXTURES, cond, workload
from typed_docs import reach, real_objects, typed_item

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
from cluster import build_cluster  # noqa: E402

GPUS = ("nvidia.com/gpu",)


def real_workloads() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((FIXTURES / "real").glob("*.y*ml")) + sorted((FIXTURES / "real").glob("*.json"))
    return real_objects(files + sorted(FIXTURES.glob("*.yaml")), lambda o: o.get("kind") == "Workload"
                        and str(o.get("apiVersion", "")).startswith("kueue.x-k8s.io/"))


def _comparable(wl: Workload) -> Workload:
    """A parsed hostname assignment's ``shape`` is a fresh identity per parse (exporter.cluster.workloads.Shape)."""
    for a in wl.assignments:
        a.shape = None
    return wl


def _read(read: Any, obj: Any) -> Workload | str:
    """A record, or the ParseError of an object without a usable identity."""
    try:
        return _comparable(read(obj, GPUS))
    except ParseError as exc:
        return f"ParseError: {exc}"


def _typed(obj: dict[str, Any]) -> Any:
    """``obj`` through the LIST's typed decode: a page of one item, as the informer receives it."""
    return typed_item(WorkloadDoc, obj)


REAL = real_workloads()


def test_the_fixtures_hold_real_workloads_of_both_api_versions():
    versions = {obj["apiVersion"] for _, obj in REAL}
    assert len(REAL) >= 25, [n for n, _ in REAL]
    assert {"kueue.x-k8s.io/v1beta1", "kueue.x-k8s.io/v1beta2"} <= versions


@pytest.mark.parametrize("name,obj", REAL, ids=[n for n, _ in REAL])
def test_a_real_workload_reads_the_same_through_the_typed_path(name, obj):
    expected = _read(parse_workload, obj)
    assert _read(read_workload, _typed(obj)) == expected
    assert _read(read_workload, as_doc(obj)) == expected  # a watch event's path


def test_clean_real_workloads_take_the_typed_path():
    """Every real Workload without a problem decodes into a document and is read from it whole."""
    clean = [(n, o) for n, o in REAL if not isinstance(_read(parse_workload, o), str) and not parse_workload(o, GPUS).problems]
    assert len(clean) >= 20
    for name, obj in clean:
        doc = _typed(obj)
        assert isinstance(doc, WorkloadDoc), name
        assert _comparable(workload_from_doc(doc, GPUS)) == _comparable(parse_workload(obj, GPUS)), name


def test_the_benchmark_clusters_workloads_read_the_same_and_typed():
    cluster = build_cluster(workloads=600, nodes=2048)
    objs = [o for o in cluster.workloads]
    page = page_decoder(WorkloadDoc)(orjson.dumps({"kind": "WorkloadList", "metadata": {"resourceVersion": "7"}, "items": objs}))
    assert page["metadata"] == {"resourceVersion": "7"}
    assert all(isinstance(d, WorkloadDoc) for d in page["items"])
    for doc, obj in zip(page["items"], objs, strict=True):
        assert _comparable(workload_from_doc(doc, GPUS)) == _comparable(parse_workload(obj, GPUS))


# ---- refusals: what the dict parser reports, the typed path does not read


def test_a_field_of_another_type_fails_only_its_own_object():
    good, bad = workload("good"), workload("bad")
    bad["spec"]["priority"] = "high"  # an int in the API
    page = page_decoder(WorkloadDoc)(orjson.dumps({"metadata": {}, "items": [good, bad, workload("other")]}))
    kinds = [type(o).__name__ for o in page["items"]]
    assert kinds == ["WorkloadDoc", "dict", "WorkloadDoc"]
    assert read_workload(page["items"][1], GPUS).problems == ("spec.priority: expected an integer, got str",)


@pytest.mark.parametrize("mutate,problem", [
    (lambda o: o["status"]["conditions"].append(cond("Admitted", "True", "Admitted", at="yesterday")),
     "status.conditions[0].lastTransitionTime: not an RFC 3339 time: 'yesterday'"),
    (lambda o: o["status"]["conditions"].append({"type": "", "status": "True"}), "status.conditions[0].type missing"),
    (lambda o: o["metadata"].update(creationTimestamp="noon"), "metadata.creationTimestamp: not an RFC 3339 time: 'noon'"),
    (lambda o: o["status"].update(admissionChecks=[{"name": "prov", "state": "Sleeping"}]),
     "status.admissionChecks[0].state: unknown admission check state 'Sleeping'"),
    (lambda o: o["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"].update(
        {"nvidia.com/gpu": "eight"}), "spec.podSets[0].template.spec.containers[0].resources: bad quantity for nvidia.com/gpu: 'eight'"),
])
def test_a_value_the_parser_reports_is_read_by_the_parser(mutate, problem):
    """The document decodes (the types are right), but the value is one the dict parser counts:
    the typed reader refuses it and the record carries the parser's problem."""
    obj = workload("w", admitted_cq=None, hosts=[])
    mutate(obj)
    doc = _typed(obj)
    assert isinstance(doc, WorkloadDoc)
    with pytest.raises(Unclean):
        workload_from_doc(doc, GPUS)
    wl = read_workload(doc, GPUS)
    assert problem in wl.problems
    assert _comparable(wl) == _comparable(parse_workload(obj, GPUS))


def test_the_envelope_says_what_the_informer_needs():
    decode = page_decoder(WorkloadDoc)
    assert decode(b'{"metadata": {"continue": "x"}, "items": null}') == {"metadata": {"continue": "x"}, "items": []}
    assert "items" not in decode(b'{"metadata": {}}')  # no List: the informer rejects the page
    with pytest.raises(msgspec.DecodeError):
        decode(b'{"metadata": {}, "items": [')
    assert decode(b'{"metadata": {}, "items": [3, "x"]}')["items"] == [3, "x"]  # no object: the informer drops them


def test_a_bad_object_in_a_typed_page_is_counted_and_the_rest_stored():
    from exporter.cluster.collector import build_collector

    store, handlers, _ = build_collector(Exposition(1_000_000))
    h = handlers["workloads"]
    h.health = SourceHealth("workloads", Exposition(1000))
    bad = workload("bad")
    bad["status"]["conditions"] = "Admitted"  # a list in the API
    page = page_decoder(WorkloadDoc)(orjson.dumps({"metadata": {}, "items": [workload("a"), bad, workload("b")]}))
    h.replace(page["items"])
    assert set(store.workloads) == {("team", "a"), ("team", "bad"), ("team", "b")}
    assert store.workloads[("team", "bad")].problems == ("status.conditions: expected a list, got str",)
    assert h.health.parse_errors == 1


def test_a_watch_event_that_changes_nothing_read_is_dropped_after_a_typed_list():
    """The LIST's items are documents and a watch event is a dict: the handler converts the event,
    so their digests compare, and an event that changes only resourceVersion is not parsed."""
    from exporter.cluster.collector import build_collector

    store, handlers, _ = build_collector(Exposition(1_000_000))
    h = handlers["workloads"]
    obj = workload("a")
    h.replace(page_decoder(WorkloadDoc)(orjson.dumps({"metadata": {}, "items": [obj]}))["items"])
    first = store.workloads[("team", "a")]
    h.apply("MODIFIED", {**obj, "metadata": {**obj["metadata"], "resourceVersion": "99", "managedFields": [{}]}})
    assert store.workloads[("team", "a")] is first
    changed = {**obj, "spec": {**obj["spec"], "queueName": "other"}}
    h.apply("MODIFIED", changed)
    assert store.workloads[("team", "a")].queue_name == "other"


def test_an_integer_messagepack_cannot_hold_is_parsed_and_counted_each_time():
    """A field kept as Any may hold an integer beyond 64 bits (JSON allows it); its document has
    no digest, so the event is read (and its problem counted), never dropped or raised."""
    from exporter.cluster.collector import build_collector

    store, handlers, _ = build_collector(Exposition(1_000_000))
    h = handlers["workloads"]
    h.health = SourceHealth("workloads", Exposition(1000))
    obj = workload("a")
    obj["status"] = {"admission": {"clusterQueue": "cq", "podSetAssignments": [{"name": "main", "topologyAssignment": {"slices": -(2**63) - 1}}]}}
    h.apply("ADDED", obj)
    h.apply("MODIFIED", obj)
    assert store.workloads[("team", "a")].problems
    assert h.health.parse_errors == 2


# ---- generated objects: whatever the input, both paths give one record


_ANY = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.sampled_from(["", "x", "2026-08-20T10:00:00Z", "8"]),
                 st.just([]), st.just({}))
_TIME = st.sampled_from(["2026-08-20T10:00:00Z", "2026-08-20T10:00:00.5+02:00", "", "soon"])


def _field(value: st.SearchStrategy, wrong: bool) -> st.SearchStrategy:
    """A field's valid value, or (``wrong``) sometimes a value of any other type."""
    return st.one_of(value, value, value, _ANY) if wrong else value


def _condition(wrong: bool) -> st.SearchStrategy:
    return st.fixed_dictionaries({}, optional={
        "type": _field(st.sampled_from(["QuotaReserved", "Admitted", "Finished", "Evicted", "PodsReady", ""]), wrong),
        "status": _field(st.sampled_from(["True", "False", "Unknown"]), wrong),
        "reason": _field(st.sampled_from(["Pending", "Admitted", "Preempted"]), wrong),
        "message": _field(st.sampled_from(["", "couldn't assign flavors"]), wrong),
        "lastTransitionTime": _field(_TIME, wrong),
    })


@st.composite
def _workloads(draw: Any) -> dict[str, Any]:
    """A Workload whose fields are absent, valid, or (one example in three) of any type: valid
    ones take the typed reader, or its refusal where a value is one the parser reports."""
    wrong = draw(st.sampled_from([False, False, True]))
    obj = workload("w", hosts=draw(st.sampled_from([[], ["h1"], ["h1", "h2", "h3"]])),
                   admitted_cq=draw(st.sampled_from(["cq", None])), version=draw(st.sampled_from(["v1beta1", "v1beta2"])))
    meta, spec, status = obj["metadata"], obj["spec"], obj["status"]
    podset = spec["podSets"][0]
    fields: list[tuple[dict[str, Any], str, st.SearchStrategy]] = [
        (meta, "creationTimestamp", _TIME),
        (meta, "labels", st.just({"a": "b"})),
        (meta, "annotations", st.just({"kueue.x-k8s.io/workload-slice-replacement-for": "x"})),
        (spec, "priority", st.integers(-5, 5)),
        (spec, "active", st.booleans()),
        (spec, "queueName", st.just("q2")),
        (spec, "priorityClassRef", st.just({"name": "p"})),
        (spec, "priorityClassName", st.just("p")),
        (podset, "count", st.integers(0, 4)),
        (podset, "minCount", st.integers(0, 4)),
        (podset, "name", st.just("workers")),
        (podset, "topologyRequest", st.just({"required": "rack"})),
        (status, "conditions", st.lists(_condition(wrong), max_size=3)),
        (status, "requeueState", st.fixed_dictionaries({}, optional={"count": _field(st.integers(0, 3), wrong),
                                                                     "requeueAt": _field(_TIME, wrong)})),
        (status, "schedulingStats", st.fixed_dictionaries({}, optional={"evictions": st.lists(st.fixed_dictionaries(
            {}, optional={"reason": _field(st.just("Preempted"), wrong), "underlyingCause": _field(st.just(""), wrong),
                          "count": _field(st.integers(0, 3), wrong)}), max_size=2)})),
        (status, "unhealthyNodes", st.lists(st.fixed_dictionaries(
            {}, optional={"name": _field(st.sampled_from(["h1", ""]), wrong)}), max_size=2)),
        (status, "admissionChecks", st.lists(st.fixed_dictionaries(
            {"name": _field(st.sampled_from(["prov", ""]), wrong)}, optional={
                "state": _field(st.sampled_from(["Pending", "Ready", "Retry", "Sleeping"]), wrong),
                "lastTransitionTime": _field(_TIME, wrong), "requeueAfterSeconds": _field(st.integers(0, 60), wrong)}),
            max_size=2)),
        (status, "nominatedClusterNames", st.lists(_field(st.just("worker-1"), wrong), max_size=2)),
        (status, "clusterName", st.just("worker-1")),
        (status, "accumulatedPastExecutionTimeSeconds", st.integers(0, 100)),
        (status, "accumulatedPastExexcutionTimeSeconds", st.integers(0, 100)),
    ]
    for parent, key, valid in fields:
        choice = draw(st.sampled_from(["keep", "set", "set", "other"] if wrong else ["keep", "set"]))
        if choice == "set":
            parent[key] = draw(valid)
        elif choice == "other":
            parent[key] = draw(_ANY)
    if wrong and draw(st.booleans()) and status.get("admission"):
        status["admission"]["clusterQueue"] = draw(_ANY)
    return obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_workloads())
def test_any_workload_reads_the_same_through_both_paths(obj):
    expected = _read(parse_workload, obj)
    assert _read(read_workload, _typed(obj)) == expected
    assert _read(read_workload, as_doc(obj)) == expected


def test_the_generator_reaches_the_typed_reader():
    """The property above is only evidence if generated objects are read from documents, and some
    are refused by that reader."""
    typed, refused = reach(_workloads(), WorkloadDoc, workload_from_doc, GPUS)
    assert typed >= 20 and refused >= 20, (typed, refused)
