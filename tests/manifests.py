"""Rendering and validating Kubernetes manifests, for the kustomize base (tests/test_deploy.py)
and the Helm chart (tests/test_helm.py).

:func:`validate` checks each object client side: core kinds with kubernetes-validate (strict:
an unknown field fails), the Prometheus Operator's kinds against their CRD schemas
(tests/fixtures/crds, made strict the same way). Further checks plug in as ``checks``: callables
that take one object and return its errors. The server-side check, a dry run of every object
against a real kube-apiserver, is tests/test_realapi_deploy.py.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml
from kubernetes_validate.utils import latest_version
from referencing import Registry, Resource
from referencing.jsonschema import DRAFT7

CRDS = Path(__file__).resolve().parent / "fixtures" / "crds"
DEPLOY = Path(__file__).resolve().parents[1] / "deploy"
K8S_VERSION = latest_version()  # newest schema kubernetes-validate ships
CRD_KINDS = {"ServiceMonitor": "servicemonitor.json", "PrometheusRule": "prometheusrule.json"}

Check = Callable[[dict[str, Any]], list[str]]


def kustomize(path: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize PATH``: the objects a cluster would receive."""
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with its built-in kustomize) is required to render deploy/"
    out = subprocess.run([kubectl, "kustomize", str(path)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def with_components(tmp_path: Path, *components: str) -> list[dict[str, Any]]:
    """The base plus ``deploy/components/<name>`` for each name, as a user's overlay combines them."""
    rel = Path(os.path.relpath(DEPLOY, tmp_path))  # kustomize rejects absolute paths here
    (tmp_path / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": [str(rel)],
        "components": [str(rel / "components" / c) for c in components],
    }))
    return kustomize(tmp_path)


def parse_container_args(args: list[str]) -> argparse.Namespace:
    """A container's args through the subcommand's own parser (its module's add_arguments), as
    ``gangscope`` builds it: an unknown flag is an error."""
    from exporter.cli import SUBCOMMANDS

    command, *flags = args
    parser = argparse.ArgumentParser(prog=f"gangscope {command}", exit_on_error=False)
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    return parser.parse_args([a.replace("$(NODE_NAME)", "gpu-node-1") for a in flags])


def _strict(schema: Any) -> Any:
    """kubeconform -strict for a CRD schema: objects with listed properties allow no others."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if "properties" in out and "additionalProperties" not in out \
                and not out.get("x-kubernetes-preserve-unknown-fields") and out["properties"]:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


def crd_validator(kind: str) -> jsonschema.Draft7Validator:
    schema = _strict(json.loads((CRDS / CRD_KINDS[kind]).read_text()))
    # The package refers to ObjectMeta by its OpenAPI name; resolve it from kubernetes-validate's
    # definitions for the same Kubernetes version as the core objects.
    defs_path = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema" / f"v{K8S_VERSION}-local-strict" / "_definitions.json"
    defs = json.loads(defs_path.read_text())
    schema["properties"]["metadata"] = {"$ref": f"{defs['$id']}#/$defs/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}
    registry = Registry().with_resource(defs["$id"], Resource.from_contents(defs, default_specification=DRAFT7))
    # Draft7Validator directly: Go regexes in CRD patterns need not pass check_schema.
    return jsonschema.Draft7Validator(schema, registry=registry)


def client_side(obj: dict[str, Any]) -> list[str]:
    """Errors of one object against its schema (empty: valid)."""
    if obj["kind"] in CRD_KINDS:
        return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator(obj["kind"]).iter_errors(obj)]
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except kubernetes_validate.ValidationError as e:
        return [str(e)]
    return []


def validate(objs: Iterable[dict[str, Any]], checks: Iterable[Check] = (client_side,)) -> int:
    """Run every check on every object; fails listing all errors. Returns the number checked."""
    objs = list(objs)
    errors = [f"{o['kind']}/{o['metadata']['name']}: {e}" for o in objs for check in checks for e in check(o)]
    assert errors == [], "\n".join(errors)
    return len(objs)
