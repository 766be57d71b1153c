"""LocalQueues: they name the ClusterQueue of a Workload that has no admission yet."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..fields import ParseError, Problems, as_dict, as_str, require_identity


@dataclass(slots=True)
class LocalQueue:
    namespace: str
    name: str
    cluster_queue: str
    problems: list[str]

    @property
    def key(self) -> tuple[str, str]:
        return (self.namespace, self.name)


def parse_local_queue(obj: Any) -> LocalQueue:
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    p: Problems = []
    meta = as_dict(obj.get("metadata"), "metadata", p)
    name, namespace = require_identity("LocalQueue", meta)
    spec = as_dict(obj.get("spec"), "spec", p)
    return LocalQueue(namespace, name, as_str(spec.get("clusterQueue"), "spec.clusterQueue", p), p)
