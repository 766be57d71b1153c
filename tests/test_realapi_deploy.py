"""Server-side validation of what users install: the kustomize base (``kubectl kustomize deploy/base``)
and the Helm chart with several value sets, applied with ``dryRun=All`` to a real kube-apiserver
(the request ``kubectl apply --server-side --dry-run=server`` sends: a server-side apply patch).

The server runs every object through its own decoding, defaulting, validation and admission, and
the Prometheus Operator's ServiceMonitor and PrometheusRule through their upstream CRDs' schemas
(tests/fixtures/realapi/monitoring.coreos.com_*.yaml). A server-side apply patch is typed against
the server's schema, so a field the server does not know is an error (``field not declared in
schema``), not silently dropped: the strict check ``fieldValidation=Strict`` gives on servers newer
than 1.20. The client-side check (tests/manifests.py, kubernetes-validate strict at a current
Kubernetes version) stays: together they say the objects are valid for today's schema and
accepted by a 1.20 server.

The server is :meth:`realapi.RealCluster.plain`: a kube-apiserver of the test cluster with its own
store and the built-in ``scheduling.k8s.io`` group on (the base ships a PriorityClass).
"""

from __future__ import annotations

from typing import Any

import pytest

from manifests import DEPLOY, kustomize
from realapi import FIXTURES, MONITORING_CRD_FILES, ApiServer, ApiStatusError, RealCluster, load_yaml
from test_helm import VALUE_SETS, render

MANAGER = "gangscope-deploy-test"
CUSTOM_KINDS = {crd["spec"]["names"]["kind"] for f in MONITORING_CRD_FILES for crd in load_yaml(FIXTURES / f)}


@pytest.fixture(scope="module")
def server(real_api: RealCluster) -> ApiServer:
    plain = real_api.plain()
    real_api.install_crds(MONITORING_CRD_FILES, admin=plain.admin)
    return plain


OUTPUTS = ("kustomize base", "helm defaults", "helm everything", "helm namespaced", "helm sharded")


def output(name: str) -> list[dict[str, Any]]:
    """What users apply: the kustomize base, and the chart with its defaults, with every value set
    to something else (EVERYTHING: release "prod" in namespace "monitoring-ns"), namespaced, sharded."""
    if name == "kustomize base":
        return kustomize(DEPLOY / "base")
    values = name.removeprefix("helm ")
    if values == "everything":
        return render(VALUE_SETS[values], name="prod", namespace="monitoring-ns")["objects"]
    return render(VALUE_SETS[values])["objects"]


# What 1.20's server-side apply refuses that later servers accept: a Service port without
# ``protocol``. The port list's merge key is (port, protocol) and 1.20's structured-merge-diff does
# not apply the key's default (TCP), so the typed patch cannot be built: kubernetes-sigs/
# structured-merge-diff issues #130 and #183 (the latter on 1.20.1, with this exact message); servers
# from 1.21 default the key. Such an object is checked by a dry-run create instead (the request
# ``kubectl apply --dry-run=server`` sends for a new object), which validates and admits it in full
# but decodes leniently, so the strict field check is lost for it; the test counts these.
SSA_1_20_PROTOCOL = 'omits key field "protocol" (and doesn\'t have default value)'


def pruned(sent: Any, kept: Any, path: str = "") -> list[str]:
    """Paths of ``sent`` that the server's answer ``kept`` lacks. 1.20 prunes the fields of a custom
    resource that its CRD's schema does not declare, silently (``fieldValidation=Strict``, which
    refuses them, is 1.25+); a server-side apply of a built-in kind refuses them instead."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [path or "."]
        return [p for k, v in sent.items() for p in (pruned(v, kept[k], f"{path}.{k}") if k in kept else [f"{path}.{k}"])]
    if isinstance(sent, list):
        if not isinstance(kept, list) or len(kept) != len(sent):
            return [path]
        return [p for i, (a, b) in enumerate(zip(sent, kept)) for p in pruned(a, b, f"{path}[{i}]")]
    return []


def dry_run_apply(server: ApiServer, obj: dict[str, Any]) -> str | None:
    """Why the server refuses ``obj`` as a server-side apply, or which of its fields it would drop
    (None: accepted as it is, nothing stored)."""
    try:
        kept = server.admin.request("PATCH", server.admin.path(obj), obj, params={
            "dryRun": "All", "fieldManager": MANAGER, "force": "true"}, content_type="application/apply-patch+yaml")
    except ApiStatusError as e:
        return str(e)
    if obj["kind"] not in CUSTOM_KINDS:  # built-in kinds: refused above; their answers omit false and empty values
        return None
    dropped = pruned({k: v for k, v in obj.items() if k != "metadata"}, kept)
    return f"fields not in the schema, dropped: {', '.join(dropped)}" if dropped else None


def dry_run_create(server: ApiServer, obj: dict[str, Any]) -> str | None:
    """Why the server refuses to create ``obj`` (None: accepted, nothing stored)."""
    collection = server.admin.collection(obj["apiVersion"], obj["kind"], obj["metadata"].get("namespace"))
    try:
        server.admin.request("POST", collection, obj, params={"dryRun": "All", "fieldManager": MANAGER})
    except ApiStatusError as e:
        return str(e)
    return None


@pytest.mark.parametrize("name", OUTPUTS)
def test_deploy_output_is_accepted_by_a_real_api_server(server: ApiServer, name: str) -> None:
    objs = output(name)
    # Namespaced objects are admitted only into an existing namespace (NamespaceLifecycle): the
    # namespaces the outputs use exist for real; everything else is a dry run and leaves nothing.
    for ns in sorted({o["metadata"]["namespace"] for o in objs if o["metadata"].get("namespace")}):
        server.admin.ensure({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    errors, lenient = [], []
    for o in objs:
        error = dry_run_apply(server, o)
        if error and SSA_1_20_PROTOCOL in error:
            lenient.append(f"{o['kind']}/{o['metadata']['name']}")
            error = dry_run_create(server, o)
        if error:
            errors.append(f"{o['kind']}/{o['metadata']['name']}: {error}")
    assert errors == [], "\n".join(errors)
    # Only the Services meet the 1.20 limit (their ports carry no protocol; the containers' do).
    assert {n.split("/")[0] for n in lenient} <= {"Service"}
    kinds = sorted({o["kind"] for o in objs})
    print(f"{name}: {len(objs)} objects accepted by kube-apiserver v1.20.2 with dryRun=All, "
          f"{len(objs) - len(lenient)} as a server-side apply (strict), {len(lenient)} as a create "
          f"(1.20's server-side apply refuses a port without protocol: {', '.join(lenient) or 'none'}); kinds: {', '.join(kinds)}")
    assert {"DaemonSet", "ClusterRole", "ServiceAccount", "ServiceMonitor", "PrometheusRule"} <= set(kinds)
    assert {"Deployment", "StatefulSet"} & set(kinds)


def test_the_dry_run_refuses_what_the_server_does_not_know(server: ApiServer) -> None:
    """The check can fail: a misspelt field and an invalid value, each in a built-in kind and in a
    custom resource, are refused."""
    base = kustomize(DEPLOY / "base")
    deploy = next(o for o in base if o["kind"] == "Deployment")
    monitor = next(o for o in base if o["kind"] == "ServiceMonitor")
    misspelt = {**deploy, "spec": {**deploy["spec"], "replica": 1}}
    negative = {**deploy, "spec": {**deploy["spec"], "replicas": -1}}
    bad_monitor = {**monitor, "spec": {**monitor["spec"], "endpoint": []}}
    bad_interval = {**monitor, "spec": {**monitor["spec"], "endpoints": [{**monitor["spec"]["endpoints"][0], "interval": "soon"}]}}
    server.admin.ensure({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": deploy["metadata"]["namespace"]}})
    assert "field not declared in schema" in (dry_run_apply(server, misspelt) or "")
    assert "replicas" in (dry_run_apply(server, negative) or "")
    assert "fields not in the schema, dropped: .spec.endpoint" in (dry_run_apply(server, bad_monitor) or "")
    assert "interval" in (dry_run_apply(server, bad_interval) or "")
    assert dry_run_apply(server, deploy) is None
