"""A namespaced object that cannot be used says exactly what it lacks (exporter.fields.require_identity)."""

from __future__ import annotations

import pytest

from exporter.cluster.localqueues import parse_local_queue
from exporter.cluster.workloads import parse_workload
from exporter.fields import ParseError


@pytest.mark.parametrize("meta, says", [
    ({"name": "trainjob-test-tas-95b32"}, "Workload trainjob-test-tas-95b32 without metadata.namespace"),
    ({"namespace": "ml-team"}, "Workload in namespace ml-team without metadata.name"),
    ({"name": "", "namespace": 3}, "Workload without metadata.name and metadata.namespace"),
])
def test_a_workload_without_its_identity(meta: dict, says: str) -> None:
    with pytest.raises(ParseError) as err:
        parse_workload({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload", "metadata": meta, "spec": {}})
    assert str(err.value) == says


def test_a_local_queue_without_its_namespace() -> None:
    with pytest.raises(ParseError) as err:
        parse_local_queue({"metadata": {"name": "tas-user-queue"}, "spec": {"clusterQueue": "cq"}})
    assert str(err.value) == "LocalQueue tas-user-queue without metadata.namespace"
