"""Nodes: only their labels matter, for the topology path (block, rack, host) of a hostname.

The collector lists Nodes as metadata only. Kueue stores the value of the node's
``kubernetes.io/hostname`` label in assignments and the node *name* in ``unhealthyNodes``;
both usually agree, and the record keeps both so either lookup works.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..fields import ParseError, Problems, as_dict, str_map
from ..topology import HOSTNAME_LABEL


@dataclass(slots=True)
class Node:
    name: str
    labels: dict[str, str]
    problems: list[str]

    @property
    def hostname(self) -> str:
        """The ``kubernetes.io/hostname`` label value Kueue's assignments name (the name if unset)."""
        return self.labels.get(HOSTNAME_LABEL) or self.name


def parse_node(obj: Any) -> Node:
    if not isinstance(obj, dict):
        raise ParseError(f"expected an object, got {type(obj).__name__}")
    p: Problems = []
    meta = as_dict(obj.get("metadata"), "metadata", p)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        raise ParseError("Node without metadata.name")
    return Node(name, str_map(meta.get("labels"), "metadata.labels", p), p)
