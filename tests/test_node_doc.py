"""The typed path of a Node (exporter/cluster/node_doc.py) reads every Node exactly as the dict
parser does: the same record, the same problems, on the Nodes real clusters printed (the
fixtures of tests/fixtures/nodes and ../shared/fixtures/real), the benchmark cluster's, and
generated Nodes with fields of every type (hypothesis); and it is taken for the clean ones."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from exporter.cluster.node_doc import NodeDoc, node_from_doc, read_node
from exporter.cluster.nodes import Node, parse_node
from exporter.fields import ParseError
from exporter.kube.typed import Unclean, page_decoder
from typed_docs import reach, real_objects, typed_item

GPUS = ("nvidia.com/gpu",)
HERE = Path(__file__).resolve().parent


def real_nodes() -> list[tuple[str, dict[str, Any]]]:
    files = sorted((HERE / "fixtures").rglob("*.yaml")) + sorted((HERE / "fixtures").rglob("*.json"))
    return real_objects(files, lambda o: o.get("kind") == "Node" and o.get("apiVersion") == "v1")


def _read(read: Any, obj: Any) -> Node | str:
    try:
        return read(obj, GPUS)
    except ParseError as exc:
        return f"ParseError: {exc}"


def _typed(obj: Any) -> Any:
    return typed_item(NodeDoc, obj)


REAL = real_nodes()


def test_the_fixtures_hold_real_nodes():
    assert len(REAL) >= 5, [n for n, _ in REAL]


@pytest.mark.parametrize("name,obj", REAL, ids=[n for n, _ in REAL])
def test_a_real_node_reads_the_same_through_the_typed_path(name, obj):
    assert _read(read_node, _typed(obj)) == _read(parse_node, obj)


def test_clean_real_nodes_take_the_typed_path():
    clean = [(n, o) for n, o in REAL if not isinstance(_read(parse_node, o), str) and not parse_node(o, GPUS).problems]
    assert len(clean) >= 5
    for name, obj in clean:
        doc = _typed(obj)
        assert isinstance(doc, NodeDoc), name
        assert node_from_doc(doc, GPUS) == parse_node(obj, GPUS), name


def test_the_benchmark_clusters_nodes_read_the_same_and_typed():
    import sys
    sys.path.insert(0, str(HERE.parent / "bench"))
    from cluster import build_cluster

    objs = build_cluster(workloads=100, nodes=1024).nodes
    page = page_decoder(NodeDoc)(orjson.dumps({"kind": "NodeList", "metadata": {}, "items": objs}))
    assert all(isinstance(d, NodeDoc) for d in page["items"])
    for doc, obj in zip(page["items"], objs, strict=True):
        assert node_from_doc(doc, GPUS) == parse_node(obj, GPUS)


@pytest.mark.parametrize("obj,problem", [
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"nvidia.com/gpu": "eight"}}},
     "status.allocatable: bad quantity for nvidia.com/gpu: 'eight'"),
    ({"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "lots"}}}, "status.allocatable: bad quantity for cpu: 'lots'"),
    ({"metadata": {"name": "n"}, "spec": {"taints": [{"key": "k"}]}}, "spec.taints[0]: a taint needs a key and an effect"),
])
def test_a_value_the_parser_reports_is_read_by_the_parser(obj, problem):
    doc = _typed(obj)
    assert isinstance(doc, NodeDoc)
    with pytest.raises(Unclean):
        node_from_doc(doc, GPUS)
    assert problem in read_node(doc, GPUS).problems
    assert read_node(doc, GPUS) == parse_node(obj, GPUS)


def test_a_prefer_no_schedule_taint_is_kept_on_neither_path():
    """Kueue's IsSchedulingTaint (pkg/util/taints/taints.go:31-34): only NoSchedule and NoExecute
    keep pods off a node."""
    obj = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {"taints": [
        {"key": "a", "effect": "PreferNoSchedule"}, {"key": "b", "effect": "NoSchedule"},
        {"key": "c", "effect": "NoExecute"}]}, "status": {}}
    for node in (read_node(_typed(obj), GPUS), parse_node(obj, GPUS)):
        assert [(t.key, t.effect) for t in node.taints] == [("b", "NoSchedule"), ("c", "NoExecute")]


def test_a_node_without_a_name_is_refused_on_both_paths():
    with pytest.raises(ParseError):
        read_node(_typed({"metadata": {"labels": {}}}), GPUS)


_ANY = st.one_of(st.none(), st.booleans(), st.integers(-2, 2), st.sampled_from(["", "x", "8", "True"]), st.just([]), st.just({}))


def _field(value: st.SearchStrategy, wrong: bool) -> st.SearchStrategy:
    return st.one_of(value, value, value, _ANY) if wrong else value


@st.composite
def _nodes(draw: Any) -> dict[str, Any]:
    wrong = draw(st.sampled_from([False, False, True]))
    quantity = st.sampled_from(["8", "0", "4Gi", "100m", "bad"])
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": draw(_field(st.sampled_from(["n1", ""]), wrong))}}
    if draw(st.booleans()):
        obj["metadata"]["labels"] = draw(st.dictionaries(st.sampled_from(["kubernetes.io/hostname", "rack"]),
                                                         _field(st.just("v"), wrong), max_size=2))
    spec: dict[str, Any] = {}
    if draw(st.booleans()):
        spec["unschedulable"] = draw(_field(st.booleans(), wrong))
    if draw(st.booleans()):
        spec["taints"] = draw(st.lists(st.fixed_dictionaries({}, optional={
            "key": _field(st.sampled_from(["nvidia.com/gpu", ""]), wrong), "value": _field(st.just("x"), wrong),
            "effect": _field(st.sampled_from(["NoSchedule", "PreferNoSchedule", "NoExecute", ""]), wrong)}), max_size=2))
    status: dict[str, Any] = {}
    for field in ("allocatable", "capacity"):
        if draw(st.booleans()):
            status[field] = draw(st.dictionaries(st.sampled_from(["nvidia.com/gpu", "cpu", "memory"]),
                                                 _field(quantity, wrong), max_size=3))
    if draw(st.booleans()):
        status["conditions"] = draw(st.lists(st.fixed_dictionaries({}, optional={
            "type": _field(st.sampled_from(["Ready", "MemoryPressure"]), wrong),
            "status": _field(st.sampled_from(["True", "False", "Unknown"]), wrong)}), max_size=2))
    for key, value in (("spec", spec), ("status", status)):
        obj[key] = draw(_ANY) if wrong and draw(st.integers(0, 9)) == 0 else value
    return obj


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_nodes())
def test_any_node_reads_the_same_through_both_paths(obj):
    assert _read(read_node, _typed(obj)) == _read(parse_node, obj)


def test_the_generator_reaches_the_typed_reader():
    """The property above is evidence only if generated Nodes are read from documents, and some
    are refused by that reader."""
    typed, refused = reach(_nodes(), NodeDoc, node_from_doc, GPUS)
    assert typed >= 20 and refused >= 20, (typed, refused)
