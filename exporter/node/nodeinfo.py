"""The agent's own Node and the Kueue Topologies: together they give ``node`` plus the topology
labels on every series.

The Node is watched by ``metadata.name=<node>`` so a label change (a node moved between racks,
Topograph relabelling blocks) reaches the series within seconds. The levels (which node label
keys are topology, top first) come from ``--topology-levels`` when given, else from the Kueue
``Topology`` objects, merged by the collector's own :func:`merge_levels` so that the agent's
``block``/``rack`` labels are the collector's. Until the Node is read, or without Kubernetes
access, the topology labels are empty except ``host``, which is the node name.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ..topologies import Topology, merge_levels, parse_topology
from ..topology import TopologyError, TopologyLevels


class NodeTopology:
    """Informer handler (``replace``/``apply``) for the agent's Node; ``labels`` is read on every render."""

    def __init__(self, node_name: str, levels: TopologyLevels, on_change: Callable[[], None],
                 on_labels: Callable[[Mapping[str, str]], None] | None = None) -> None:
        self.node_name = node_name
        self.levels = levels
        self.on_change = on_change  # the topology labels changed
        self.on_labels = on_labels  # every reading of the Node's labels (the NVML life cycle follows them)
        self.node_labels: Mapping[str, str] = {}
        self.labels: tuple[tuple[str, str], ...] = self._compute({})

    def _compute(self, node_labels: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
        return (("node", self.node_name), *self.levels.labels_from_node(node_labels, self.node_name))

    def base_labels(self) -> tuple[tuple[str, str], ...]:
        return self.labels

    def set_levels(self, levels: TopologyLevels) -> None:
        """New topology levels (from the Topology watch): every series is re-labelled if the labels change."""
        self.levels = levels
        self._set(self.node_labels)

    def _set(self, node_labels: Mapping[str, str]) -> None:
        self.node_labels = node_labels
        if self.on_labels is not None:
            self.on_labels(node_labels)
        labels = self._compute(node_labels)
        if labels != self.labels:
            self.labels = labels
            self.on_change()

    def _labels_of(self, obj: Mapping[str, Any]) -> Mapping[str, str] | None:
        meta = obj.get("metadata")
        if not isinstance(meta, dict) or meta.get("name") != self.node_name:
            return None
        labels = meta.get("labels") or {}
        if not isinstance(labels, dict) or not all(isinstance(v, str) for v in labels.values()):
            raise ValueError(f"node {self.node_name} has malformed labels")
        return labels

    def replace(self, objects: list[dict[str, Any]]) -> None:
        for obj in objects:
            labels = self._labels_of(obj)
            if labels is not None:
                self._set(labels)
                return
        self._set({})

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        labels = self._labels_of(obj)
        if labels is not None:
            self._set({} if event_type == "DELETED" else labels)


class TopologyLevelsWatch:
    """Informer handler for Kueue ``Topology`` objects: feeds the merged levels to a :class:`NodeTopology`.

    The rules are the collector's (``ClusterStore._update_levels``): all Topologies merged by
    :func:`merge_levels`, aliases from ``--topology-alias``, the hostname level always last; a
    merge whose aliases collide keeps the previous levels. An object that cannot be parsed is
    skipped (on an update, its previous version stays), and every problem is raised as one
    ``ValueError`` after the rest is applied, which the informer counts as a parse error.
    """

    def __init__(self, node: NodeTopology, overrides: Mapping[str, str]) -> None:
        self.node = node
        self.overrides = dict(overrides)
        self.topologies: dict[str, Topology] = {}

    def replace(self, objects: list[dict[str, Any]]) -> None:
        topologies: dict[str, Topology] = {}
        problems: list[str] = []
        for obj in objects:
            topo = self._parse(obj, problems)
            if topo is not None:
                topologies[topo.name] = topo
        self.topologies = topologies
        self._update(problems)

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        if event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return
        problems: list[str] = []
        if event_type == "DELETED":
            meta = obj.get("metadata") if isinstance(obj, dict) else None
            name = meta.get("name") if isinstance(meta, dict) else None
            if isinstance(name, str):
                self.topologies.pop(name, None)
        elif (topo := self._parse(obj, problems)) is not None:
            self.topologies[topo.name] = topo
        self._update(problems)

    @staticmethod
    def _parse(obj: Any, problems: list[str]) -> Topology | None:
        try:
            topo = parse_topology(obj)
        except ValueError as exc:  # ParseError: not a usable Topology at all
            problems.append(str(exc))
            return None
        problems.extend(f"topology {topo.name}: {p}" for p in topo.problems)
        return topo

    def _update(self, problems: list[str]) -> None:
        keys = merge_levels(self.topologies.values())
        try:
            self.node.set_levels(TopologyLevels.build(keys, self.overrides))
        except TopologyError as exc:
            problems.append(f"topology levels rejected, keeping {list(self.node.levels.keys)}: {exc}")
        if problems:
            raise ValueError("; ".join(problems[:3]))
