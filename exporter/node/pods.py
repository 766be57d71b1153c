"""Pods on this node: the Kueue workload, podset and PodGroup keys of each, from a watch.

The informer watches only ``spec.nodeName=<this node>`` (a DaemonSet pod must never hold the
whole cluster's pods), and this handler keeps three strings per pod. Join keys, in order:

- workload: annotation ``kueue.x-k8s.io/workload``; podset: label ``kueue.x-k8s.io/podset``;
- podgroup: label ``scheduling.x-k8s.io/pod-group`` (coscheduling; legacy
  ``pod-group.scheduling.sigs.k8s.io``), Volcano annotation ``scheduling.k8s.io/group-name``, KAI
  annotation ``pod-group-name`` (KAI-Scheduler pkg/common/constants/constants.go:54), native
  ``spec.schedulingGroup.podGroupName`` (the collector's exporter/cluster/pods.py reads the same keys).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
PODSET_LABEL = "kueue.x-k8s.io/podset"
PODGROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
VOLCANO_ANNOTATION = "scheduling.k8s.io/group-name"
KAI_ANNOTATION = "pod-group-name"


@dataclass(frozen=True, slots=True)
class PodMeta:
    workload: str = ""
    podset: str = ""
    podgroup: str = ""


NO_META = PodMeta()


def _str_map(value: object, what: str) -> Mapping[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ValueError(f"pod {what} is not an object")
    return value


def pod_key_and_meta(obj: Mapping[str, Any]) -> tuple[tuple[str, str], PodMeta]:
    """``((namespace, name), PodMeta)``; raises ValueError for an object that is not a pod's shape."""
    meta = obj.get("metadata")
    if not isinstance(meta, dict) or not isinstance(meta.get("name"), str) or not meta["name"]:
        raise ValueError("pod without metadata.name")
    labels = _str_map(meta.get("labels"), "labels")
    annotations = _str_map(meta.get("annotations"), "annotations")
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        spec = {}
    group = spec.get("schedulingGroup")
    if not isinstance(group, dict):
        group = {}
    podgroup = (next((labels[k] for k in PODGROUP_LABELS if labels.get(k)), "") or annotations.get(VOLCANO_ANNOTATION)
                or annotations.get(KAI_ANNOTATION) or group.get("podGroupName") or "")
    values = (annotations.get(WORKLOAD_ANNOTATION) or "", labels.get(PODSET_LABEL) or "", podgroup)
    if not all(isinstance(v, str) for v in values):
        raise ValueError("pod label or annotation value is not a string")
    return (str(meta.get("namespace") or ""), meta["name"]), PodMeta(*values)


class PodIndex:
    """Informer handler (``replace``/``apply``): (namespace, name) -> :class:`PodMeta`."""

    def __init__(self, on_change: Callable[[], None]) -> None:
        self.on_change = on_change
        self.pods: dict[tuple[str, str], PodMeta] = {}

    def get(self, namespace: str, name: str) -> PodMeta:
        return self.pods.get((namespace, name), NO_META)

    def replace(self, objects: list[dict[str, Any]]) -> None:
        pods: dict[tuple[str, str], PodMeta] = {}
        bad = 0
        for obj in objects:
            try:
                key, meta = pod_key_and_meta(obj)
            except ValueError:
                bad += 1
                continue
            pods[key] = meta
        changed = pods != self.pods
        self.pods = pods
        if changed:
            self.on_change()
        if bad:
            raise ValueError(f"{bad} malformed pod(s) skipped")  # the informer counts it as a parse error

    def apply(self, event_type: str, obj: dict[str, Any]) -> None:
        key, meta = pod_key_and_meta(obj)
        if event_type == "DELETED":
            changed = self.pods.pop(key, None) is not None
        else:
            changed = self.pods.get(key) != meta
            self.pods[key] = meta
        if changed:
            self.on_change()
