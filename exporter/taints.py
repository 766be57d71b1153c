"""Node taints and pod tolerations, and when one tolerates the other, as Kubernetes decides it.

A GPU node tainted ``NoSchedule`` or ``NoExecute`` takes no new pod that does not tolerate the
taint, so its GPUs are no capacity for a waiting job. Kueue's topology-aware scheduling excludes
such nodes the same way: every node whose scheduling taint the pod set's tolerations (plus its
ResourceFlavor's ``spec.tolerations``) do not tolerate (kueue
pkg/cache/scheduler/scheduling_simulator_default.go:81-87, tas_flavor_snapshot.go:961;
``IsSchedulingTaint``: pkg/util/taints/taints.go:31-34). The matching rule is core/v1's
``Toleration.ToleratesTaint`` (k8s.io/api core/v1/toleration.go:39-77), which Kueue calls with
the numeric ``Lt``/``Gt`` operators enabled. Both the collector (nodes, flavors, pod sets) and
the flavor parser outside ``exporter.cluster`` read these records, so they live here.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from .fields import Problems, as_list, as_str, shared

SCHEDULING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})
_DECIMAL = frozenset("0123456789")


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # "" (Equal), Equal, Exists, Lt, Gt
    value: str
    effect: str  # "" matches every effect

    def tolerates(self, taint: Taint) -> bool:
        """core/v1 toleration.go:52-77: effect, then key, then the operator."""
        if self.effect and self.effect != taint.effect:
            return False
        if self.key and self.key != taint.key:
            return False
        op = self.operator
        if op in ("", "Equal"):
            return self.value == taint.value
        if op == "Exists":
            return True
        if op in ("Lt", "Gt"):
            want, have = _decimal(self.value), _decimal(taint.value)
            if want is None or have is None:
                return False
            return have < want if op == "Lt" else have > want
        return False


def _decimal(text: str) -> int | None:
    """A decimal integer as content.IsDecimalInteger accepts it (an optional sign, digits), else None."""
    digits = text[1:] if text[:1] in ("-", "+") else text
    if not digits or not set(digits) <= _DECIMAL:
        return None
    return int(text)


def tolerated(taint: Taint, tolerations: Iterable[Toleration]) -> bool:
    return any(t.tolerates(taint) for t in tolerations)


def scheduling_taints(taints: tuple[Taint, ...]) -> tuple[Taint, ...]:
    """The taints that keep pods off a node (``IsSchedulingTaint``, above): PreferNoSchedule
    keeps none off, so a node records only the others."""
    if any(t.effect not in SCHEDULING_EFFECTS for t in taints):
        return tuple(t for t in taints if t.effect in SCHEDULING_EFFECTS)
    return taints


def untolerated(taints: Iterable[Taint], tolerations: Iterable[Toleration]) -> tuple[Taint, ...]:
    """The scheduling taints (NoSchedule, NoExecute) that none of ``tolerations`` tolerates."""
    tols = tuple(tolerations)
    return tuple(t for t in taints if t.effect in SCHEDULING_EFFECTS and not tolerated(t, tols))


# Records repeat across thousands of nodes and pod sets (the same GPU taint, the same
# tolerations): one shared tuple per distinct list keeps them out of the per-object memory.
_SHARED: dict[tuple[Any, ...], tuple[Any, ...]] = {}


def _objects(raw: Any, where: str, p: Problems) -> Iterator[tuple[str, dict[str, Any]]]:
    """(path, entry) of each object of a list field; an entry that is no object is a problem."""
    for i, t in enumerate(as_list(raw, where, p)):
        w = f"{where}[{i}]"
        if isinstance(t, dict):
            yield w, t
        else:
            p.append(f"{w}: expected an object, got {type(t).__name__}")


def parse_taints(raw: Any, where: str, p: Problems) -> tuple[Taint, ...]:
    """``spec.taints[]`` of a Node; an entry without a key or effect is a problem and left out."""
    out = []
    for w, t in _objects(raw, where, p):
        key, effect = as_str(t.get("key"), w + ".key", p), as_str(t.get("effect"), w + ".effect", p)
        if not key or not effect:
            p.append(f"{w}: a taint needs a key and an effect")
            continue
        out.append(Taint(key, as_str(t.get("value"), w + ".value", p), effect))
    return shared(_SHARED, tuple(out), tuple(out)) if out else ()


def parse_tolerations(raw: Any, where: str, p: Problems) -> tuple[Toleration, ...]:
    """``tolerations[]`` of a pod template or a ResourceFlavor."""
    out = tuple(Toleration(as_str(t.get("key"), w + ".key", p), as_str(t.get("operator"), w + ".operator", p),
                           as_str(t.get("value"), w + ".value", p), as_str(t.get("effect"), w + ".effect", p))
                for w, t in _objects(raw, where, p))
    return shared(_SHARED, out, out) if out else ()
