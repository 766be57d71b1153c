"""Resource lists, a pod's effective requests and required node affinity, as Kueue reads them.

Kueue's topology-aware placement counts every resource a pod requests, and one ``pods`` unit,
against a node's ``status.allocatable`` (kueue ff69552e pkg/cache/scheduler/
tas_flavor_snapshot.go:896-899, :1899-1928), in its own integer units: cpu in millicores, every
other resource in whole units (pkg/resources/requests.go:146-151). A pod's requests are
``resourcehelpers.PodRequests`` (pkg/resources/factory.go:71-77; k8s.io/component-helpers
resource/helpers.go): the app containers and restartable init containers (sidecars) summed, at
least each init container with the sidecars started before it, plus ``spec.overhead``.

The maps are shared (a cluster has a handful of distinct node shapes and pod requests), so a
record holds a reference, not a copy.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..fields import Problems, as_dict, as_list, parse_quantity, shared
from .tas_fit import SelectorRequirement, SelectorTerm, resource_value

_SHARED: dict[Any, Any] = {}
EMPTY: Mapping[str, int] = {}


def resource_list(raw: Any, where: str, p: Problems) -> Mapping[str, int]:
    """A ``ResourceList`` (name -> quantity) in Kueue's units; a bad quantity is a problem and left out."""
    if raw is None:
        return EMPTY
    d = raw if raw.__class__ is dict else as_dict(raw, where, p)
    out: dict[str, int] = {}
    for name, q in d.items():
        try:
            out[name] = resource_value(name, parse_quantity(q))
        except ValueError:
            p.append(f"{where}: bad quantity for {name}: {q!r}")
    return shared(_SHARED, tuple(sorted(out.items())), out) if out else EMPTY


def _container_requests(c: Any, where: str, p: Problems) -> Mapping[str, int]:
    if c.__class__ is not dict:
        c = as_dict(c, where, p)
    res = c.get("resources")
    if res is None:
        return EMPTY
    if res.__class__ is not dict:
        res = as_dict(res, where + ".resources", p)
    requests = resource_list(res.get("requests"), where + ".resources.requests", p)
    limits = resource_list(res.get("limits"), where + ".resources.limits", p)
    if not limits:
        return requests
    # The API server defaults a missing request to its limit (core/v1 defaults.go SetDefaults_Pod
    # for pods; Kueue reads the template as the Job controller writes it, defaulted).
    merged = dict(limits)
    merged.update(requests)
    return merged


def _resources_key(containers: Any) -> tuple[Any, ...] | None:
    """The raw requests, limits and restart policy of each container, as a key of the pods'
    cache; None for a shape the full parse must see (and report)."""
    if containers is None:
        return ()
    if containers.__class__ is not list:
        return None
    out: list[tuple[Any, ...]] = []
    for c in containers:
        if c.__class__ is not dict:
            return None
        res = c.get("resources")
        if res is None:
            out.append(((), (), c.get("restartPolicy")))
            continue
        if res.__class__ is not dict:
            return None
        req, lim = _quantities(res.get("requests")), _quantities(res.get("limits"))
        if req is None or lim is None:
            return None
        out.append((req, lim, c.get("restartPolicy")))
    return tuple(out)


def _quantities(raw: Any) -> tuple[tuple[Any, str], ...] | None:
    """A resource list's items when every quantity is a string (as the API server writes them):
    ``1`` and ``True`` are equal keys, and only one of them is a quantity."""
    if raw is None:
        return ()
    if raw.__class__ is not dict:
        return None
    for q in raw.values():
        if q.__class__ is not str:
            return None
    return tuple(raw.items())


_PODS: dict[Any, Mapping[str, int]] = {}


def pod_requests(spec: Mapping[str, Any], where: str, p: Problems) -> Mapping[str, int]:
    """One pod's effective requests (see module doc), cached by the raw quantities: a job's pods
    repeat one template, and parsing its quantities was the larger part of parsing a pod event."""
    overhead = spec.get("overhead")
    containers, inits = _resources_key(spec.get("containers")), _resources_key(spec.get("initContainers"))
    extra = _quantities(overhead)
    key = None
    if containers is not None and inits is not None and extra is not None:
        key = (containers, inits, extra)
        try:
            hit = _PODS.get(key)
        except TypeError:  # a resource name or restart policy no key can hold: the full parse reports it
            key = hit = None
        if hit is not None:
            return hit
    reported = len(p)
    out = _pod_requests(spec, where, p)
    if key is not None and len(p) == reported:
        shared(_PODS, key, out)
    return out


def _pod_requests(spec: Mapping[str, Any], where: str, p: Problems) -> Mapping[str, int]:
    app: dict[str, int] = {}
    for i, c in enumerate(as_list(spec.get("containers"), where + ".containers", p)):
        for k, v in _container_requests(c, f"{where}.containers[{i}]", p).items():
            app[k] = app.get(k, 0) + v
    sidecars: dict[str, int] = {}
    peak: dict[str, int] = {}
    inits = spec.get("initContainers")
    if inits is not None:
        for i, c in enumerate(as_list(inits, where + ".initContainers", p)):
            r = _container_requests(c, f"{where}.initContainers[{i}]", p)
            if c.__class__ is dict and c.get("restartPolicy") == "Always":
                for k, v in r.items():
                    sidecars[k] = sidecars.get(k, 0) + v
            else:
                for k in set(r) | set(sidecars):
                    peak[k] = max(peak.get(k, 0), r.get(k, 0) + sidecars.get(k, 0))
    out = {k: max(app.get(k, 0) + sidecars.get(k, 0), peak.get(k, 0)) for k in set(app) | set(sidecars) | set(peak)}
    for k, v in resource_list(spec.get("overhead"), where + ".overhead", p).items():
        out[k] = out.get(k, 0) + v
    out = {k: v for k, v in out.items() if v}
    return shared(_SHARED, tuple(sorted(out.items())), out) if out else EMPTY


def required_affinity(spec: Mapping[str, Any], where: str, p: Problems) -> tuple[SelectorTerm, ...] | None:
    """``affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms``
    (tas_flavor_snapshot.go:979-986), None without one."""
    aff = spec.get("affinity")
    if aff is None:
        return None
    na = as_dict(aff, where + ".affinity", p).get("nodeAffinity")
    if na is None:
        return None
    req = as_dict(na, where + ".affinity.nodeAffinity", p).get("requiredDuringSchedulingIgnoredDuringExecution")
    if req is None:
        return None
    w = where + ".affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    terms = []
    for i, t in enumerate(as_list(as_dict(req, w, p).get("nodeSelectorTerms"), w + ".nodeSelectorTerms", p)):
        tw = f"{w}.nodeSelectorTerms[{i}]"
        t = as_dict(t, tw, p)
        terms.append(SelectorTerm(_requirements(t.get("matchExpressions"), tw + ".matchExpressions", p),
                                  _requirements(t.get("matchFields"), tw + ".matchFields", p)))
    out = tuple(terms)
    return shared(_SHARED, ("affinity", out), out)


def _requirements(raw: Any, where: str, p: Problems) -> tuple[SelectorRequirement, ...]:
    out = []
    for i, r in enumerate(as_list(raw, where, p)):
        r = as_dict(r, f"{where}[{i}]", p)
        key, op = r.get("key"), r.get("operator")
        values = r.get("values") or []
        if not isinstance(key, str) or not isinstance(op, str) or not isinstance(values, list):
            p.append(f"{where}[{i}]: a requirement needs a key, an operator and a list of values")
            continue
        out.append(SelectorRequirement(key, op, tuple(str(v) for v in values)))
    return tuple(out)
