"""The kustomize base in deploy/: renders, validates, grants exactly what the code reads, runs locked down.

Everything is checked on the output of the real ``kubectl kustomize``, not on the source files,
because that output is what a cluster receives. Core kinds are validated with kubernetes-validate
(strict: unknown fields fail), the Prometheus Operator kinds against their CRD schemas
(tests/fixtures/crds, made strict the same way). The RBAC expectations are derived from
exporter/kube/resources.py, the table the informers themselves read.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from exporter.kube.resources import AGENT_RESOURCES, COLLECTOR_READS, COLLECTOR_RESOURCES
from manifests import CRD_KINDS, K8S_VERSION, crd_validator, kustomize, parse_container_args, with_components

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
NAMESPACE = "gangscope"

# The one exception to "get/list/watch on watched resources": --metrics-auth reviews callers'
# tokens (TokenReview) and their right to the routes (SubjectAccessReview), for both servers.
METRICS_AUTH_GRANTS = {
    ("authentication.k8s.io", "tokenreviews", "create"),
    ("authorization.k8s.io", "subjectaccessreviews", "create"),
}
READ_VERBS = {"get", "list", "watch"}


@pytest.fixture(scope="module")
def base() -> list[dict[str, Any]]:
    return kustomize(DEPLOY)


@pytest.fixture(scope="module")
def secure(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return with_components(tmp_path_factory.mktemp("overlay"), "secure-metrics")


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name}: {len(found)} rendered"
    return found[0]


def dashboard_files() -> list[Path]:
    return sorted((ROOT / "dashboards").glob("*.json"))


# --- rendering and schemas -------------------------------------------------------------------

def test_base_renders_exactly_the_expected_objects(base: list[dict[str, Any]]) -> None:
    kinds = sorted((o["kind"], o["metadata"]["name"]) for o in base)
    expected = sorted([
        ("Namespace", NAMESPACE),
        ("PriorityClass", "gangscope-node-agent"),
        ("ServiceAccount", "gangscope-collector"), ("ServiceAccount", "gangscope-agent"),
        ("ClusterRole", "gangscope-collector"), ("ClusterRole", "gangscope-agent"),
        ("ClusterRole", "gangscope-metrics-auth"), ("ClusterRole", "gangscope-metrics-reader"),
        ("ClusterRole", "gangscope-explain-reader"),
        ("ClusterRoleBinding", "gangscope-collector"), ("ClusterRoleBinding", "gangscope-agent"),
        ("ClusterRoleBinding", "gangscope-metrics-auth"),
        ("Service", "gangscope-collector"), ("Service", "gangscope-agent"),
        ("Deployment", "gangscope-collector"), ("DaemonSet", "gangscope-agent"),
        ("ServiceMonitor", "gangscope-collector"), ("ServiceMonitor", "gangscope-agent"),
        ("PrometheusRule", "gangscope-rules"),
    ] + [("ConfigMap", f"gangscope-dashboard-{p.stem}") for p in dashboard_files()])
    assert kinds == expected
    cluster_scoped = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"}
    for o in base:
        assert o["metadata"].get("namespace") == (None if o["kind"] in cluster_scoped else NAMESPACE), o["metadata"]
        assert o["metadata"]["labels"]["app.kubernetes.io/part-of"] == "gangscope"


def _core(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [o for o in objs if o["kind"] not in CRD_KINDS]


def test_every_core_object_validates_strictly(base: list[dict[str, Any]], secure: list[dict[str, Any]]) -> None:
    for obj in _core(base) + _core(secure):
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def test_strict_validation_rejects_an_unknown_field(base: list[dict[str, Any]]) -> None:
    """The check above can fail: a misspelt field is an error, not silently pruned."""
    ds = copy.deepcopy(one(base, "DaemonSet", "gangscope-agent"))
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, K8S_VERSION, strict=True)


def test_prometheus_operator_objects_validate_against_their_crds(base: list[dict[str, Any]], secure: list[dict[str, Any]]) -> None:
    checked = 0
    for obj in base + secure:
        if obj["kind"] in CRD_KINDS:
            errors = [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in crd_validator(obj["kind"]).iter_errors(obj)]
            assert errors == [], f"{obj['kind']}/{obj['metadata']['name']}"
            checked += 1
    assert checked == 6  # two ServiceMonitors and a PrometheusRule, in each rendering


def test_crd_validation_rejects_an_unknown_field(base: list[dict[str, Any]]) -> None:
    sm = copy.deepcopy(one(base, "ServiceMonitor", "gangscope-agent"))
    sm["spec"]["endpoints"][0]["honorLabel"] = True
    assert list(crd_validator("ServiceMonitor").iter_errors(sm))


# --- RBAC --------------------------------------------------------------------------------------

def grants_of(objs: list[dict[str, Any]], account: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource, verb) triples the ServiceAccount receives through ClusterRoleBindings."""
    roles = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRole"}
    grants: set[tuple[str, str, str]] = set()
    for b in objs:
        if b["kind"] != "ClusterRoleBinding":
            continue
        if {"kind": "ServiceAccount", "name": account, "namespace": NAMESPACE} not in b["subjects"]:
            continue
        for rule in roles[b["roleRef"]["name"]]["rules"]:
            assert "nonResourceURLs" not in rule and "resourceNames" not in rule, rule
            grants |= {(g, r, v) for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}
    return grants


def expected_grants(resources: tuple[Any, ...]) -> set[tuple[str, str, str]]:
    assert all(set(r.verbs) <= READ_VERBS for r in resources), "the code may only read the API"
    return {(r.group, r.plural, v) for r in resources for v in r.verbs} | METRICS_AUTH_GRANTS


@pytest.mark.parametrize(("account", "resources"), [
    ("gangscope-collector", COLLECTOR_READS),
    ("gangscope-agent", AGENT_RESOURCES),
])
def test_service_account_gets_exactly_what_its_process_watches(
        base: list[dict[str, Any]], account: str, resources: tuple[Any, ...]) -> None:
    assert grants_of(base, account) == expected_grants(resources)


def test_no_rbac_beyond_the_service_accounts_and_the_metrics_reader(base: list[dict[str, Any]]) -> None:
    assert not [o for o in base if o["kind"] in ("Role", "RoleBinding")]
    for role in (o for o in base if o["kind"] == "ClusterRole"):
        for rule in role["rules"]:
            for key in ("apiGroups", "resources", "verbs", "nonResourceURLs"):
                assert "*" not in rule.get(key, []), (role["metadata"]["name"], rule)
    reader = one(base, "ClusterRole", "gangscope-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    explain = one(base, "ClusterRole", "gangscope-explain-reader")
    assert explain["rules"] == [{"nonResourceURLs": ["/debug/explain"], "verbs": ["get"]}]
    # Bound by the user to their scraper or readers (docs/deploy.md); the base binds them to nobody.
    assert all(b["roleRef"]["name"] not in ("gangscope-metrics-reader", "gangscope-explain-reader")
               for b in base if b["kind"] == "ClusterRoleBinding")
    subjects = {s["name"] for b in base if b["kind"] == "ClusterRoleBinding" for s in b["subjects"]}
    assert subjects == {"gangscope-collector", "gangscope-agent"}


# --- workloads ---------------------------------------------------------------------------------

def pod_spec(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["template"]["spec"]


@pytest.mark.parametrize(("kind", "name"), [("Deployment", "gangscope-collector"), ("DaemonSet", "gangscope-agent")])
def test_containers_are_locked_down(base: list[dict[str, Any]], kind: str, name: str) -> None:
    spec = pod_spec(one(base, kind, name))
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not spec.get(key), key
    assert spec.get("automountServiceAccountToken", True)  # it talks to the API server
    for c in spec["containers"] + spec.get("initContainers", []):
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False
        assert sc["readOnlyRootFilesystem"] is True
        assert sc["capabilities"] == {"drop": ["ALL"]}
        assert sc["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not sc.get("privileged")
        assert not any("hostPort" in p for p in c.get("ports", []))
        image, _, tag = c["image"].rpartition(":")
        assert image and tag and tag != "latest", c["image"]
        assert c["resources"]["requests"].keys() == {"cpu", "memory"}
        assert "memory" in c["resources"]["limits"]
        assert c["livenessProbe"]["httpGet"]["path"] == "/healthz"
        assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"


def test_collector_runs_as_nobody(base: list[dict[str, Any]]) -> None:
    dep = one(base, "Deployment", "gangscope-collector")
    assert dep["spec"]["replicas"] == 1
    spec = pod_spec(dep)
    for sc in [spec["securityContext"]] + [c["securityContext"] for c in spec["containers"]]:
        assert sc["runAsNonRoot"] is True and sc["runAsUser"] == 65534 and sc["runAsGroup"] == 65534
    assert spec["serviceAccountName"] == "gangscope-collector"
    assert all("hostPath" not in v for v in spec.get("volumes", []))
    assert spec["containers"][0]["args"][0] == "collector"


def test_agent_reads_only_what_it_needs_from_the_host(base: list[dict[str, Any]]) -> None:
    """Root without capabilities (kubelet's pod-resources socket admits only UID 0), never
    privileged, and only two host paths, both read-only."""
    spec = pod_spec(one(base, "DaemonSet", "gangscope-agent"))
    container = spec["containers"][0]
    host = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    assert host == {"pod-resources": "/var/lib/kubelet/pod-resources", "sys": "/sys"}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert all(mounts[name].get("readOnly") is True for name in host)
    assert mounts["sys"]["mountPath"] == "/host/sys"
    args = container["args"]
    assert args[0] == "agent"
    assert "--node-name=$(NODE_NAME)" in args
    assert "--sysfs=/host/sys" in args
    socket = next(a.split("=", 1)[1] for a in args if a.startswith("--pod-resources-socket="))
    assert Path(socket).parent == Path(mounts["pod-resources"]["mountPath"])
    env = {e["name"]: e for e in container["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert env["NVIDIA_VISIBLE_DEVICES"]["value"] == "all"
    assert env["NVIDIA_DRIVER_CAPABILITIES"]["value"] == "utility"
    assert "nvidia.com/gpu" not in container["resources"].get("limits", {})  # sees GPUs, takes none
    for sc in (spec["securityContext"], container["securityContext"]):
        assert sc["runAsUser"] == 0 and sc["runAsNonRoot"] is False
    assert spec["serviceAccountName"] == "gangscope-agent"


def test_agent_schedules_on_every_gpu_node_without_preempting(base: list[dict[str, Any]]) -> None:
    spec = pod_spec(one(base, "DaemonSet", "gangscope-agent"))
    assert spec["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert {"key": "nvidia.com/gpu", "operator": "Exists"} in spec["tolerations"]
    pc = one(base, "PriorityClass", spec["priorityClassName"])
    assert pc["preemptionPolicy"] == "Never" and pc["value"] >= 1_000_000


@pytest.mark.parametrize(("kind", "name", "port"), [("Deployment", "gangscope-collector", 9400), ("DaemonSet", "gangscope-agent", 9401)])
def test_container_args_are_real_flags(base: list[dict[str, Any]], secure: list[dict[str, Any]], kind: str, name: str, port: int) -> None:
    """The manifests pass flags the real parser accepts (argparse exits on an unknown one)."""
    for objs in (base, secure):
        container = pod_spec(one(objs, kind, name))["containers"][0]
        args = parse_container_args(container["args"])
        assert args.listen == f":{port}"
        assert container["ports"][0]["containerPort"] == port


def test_services_and_monitors_reach_the_pods(base: list[dict[str, Any]]) -> None:
    for svc_name, kind in (("gangscope-collector", "Deployment"), ("gangscope-agent", "DaemonSet")):
        svc = one(base, "Service", svc_name)
        template = one(base, kind, svc_name)["spec"]["template"]
        assert svc["spec"]["selector"].items() <= template["metadata"]["labels"].items()
        container_ports = {p["name"] for p in template["spec"]["containers"][0]["ports"]}
        assert {p["targetPort"] for p in svc["spec"]["ports"]} <= container_ports
        sm = one(base, "ServiceMonitor", svc_name)
        assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
        assert {e["port"] for e in sm["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
        for endpoint in sm["spec"]["endpoints"]:
            assert endpoint["honorLabels"] is True and endpoint["path"] == "/metrics"


def test_secure_metrics_component_turns_on_tls_and_auth(secure: list[dict[str, Any]]) -> None:
    for kind, name in (("Deployment", "gangscope-collector"), ("DaemonSet", "gangscope-agent")):
        spec = pod_spec(one(secure, kind, name))
        c = spec["containers"][0]
        assert {"--metrics-auth", "--tls-cert=/etc/gangscope/tls/tls.crt", "--tls-key=/etc/gangscope/tls/tls.key"} <= set(c["args"])
        assert {"name": "tls", "secret": {"secretName": f"{name}-tls"}} in spec["volumes"]
        assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        endpoint = one(secure, "ServiceMonitor", name)["spec"]["endpoints"][0]
        assert endpoint["scheme"] == "https"
        assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
        assert endpoint["tlsConfig"]["serverName"] == f"{name}.{NAMESPACE}.svc"


def role_grants(objs: list[dict[str, Any]], kind: str, name: str, namespace: str | None = None) -> set[tuple[str, str, str]]:
    role = next(o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name
                and o["metadata"].get("namespace") == namespace)
    return {(g, r, v) for rule in role["rules"] for g in rule["apiGroups"] for r in rule["resources"] for v in rule["verbs"]}


def test_sharded_component_runs_the_same_pod_as_a_statefulset(base: list[dict[str, Any]], tmp_path: Path) -> None:
    sharded = with_components(tmp_path, "sharded")
    assert not [o for o in sharded if o["kind"] == "Deployment"]
    ss = one(sharded, "StatefulSet", "gangscope-collector")
    dep = copy.deepcopy(pod_spec(one(base, "Deployment", "gangscope-collector")))
    pod = copy.deepcopy(pod_spec(ss))
    container = pod["containers"][0]
    assert container.pop("args") == [*dep["containers"][0].pop("args"), "--pod=$(POD_NAME)", "--pod-namespace=$(POD_NAMESPACE)"]
    assert {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container.pop("env")} == {
        "POD_NAME": "metadata.name", "POD_NAMESPACE": "metadata.namespace"}
    assert pod == dep, "the same pod as the Deployment's otherwise (drift would go unnoticed)"
    assert ss["spec"]["serviceName"] == "gangscope-collector" and ss["metadata"]["namespace"] == NAMESPACE
    assert ss["spec"]["template"]["metadata"]["labels"] == one(base, "Deployment", "gangscope-collector")["spec"]["template"]["metadata"]["labels"]
    from exporter.kube.resources import SHARDING_RESOURCES
    assert role_grants(sharded, "Role", "gangscope-collector-sharding", NAMESPACE) == {
        (r.group, r.plural, v) for r in SHARDING_RESOURCES for v in r.verbs}
    assert ("", "pods", "list") not in role_grants(sharded, "Role", "gangscope-collector-sharding", NAMESPACE)
    # The shards' cuts: the one ConfigMap by name; a create cannot be narrowed to a name.
    from exporter.kube.resources import SHARD_CUTS_CONFIGMAP
    rules = one(sharded, "Role", "gangscope-collector-sharding")["rules"]
    assert [r for r in rules if r["resources"] == ["configmaps"]] == [
        {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": [SHARD_CUTS_CONFIGMAP],
         "verbs": ["get", "list", "watch", "update"]}]


def test_namespaced_component_grants_namespaced_resources_through_a_role(tmp_path: Path) -> None:
    objs = with_components(tmp_path, "namespaced")
    assert not [o for o in objs if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "gangscope-collector"]
    assert role_grants(objs, "Role", "gangscope-collector", "ml-team") == {
        (r.group, r.plural, v) for r in COLLECTOR_RESOURCES if r.namespaced for v in r.verbs}
    assert role_grants(objs, "ClusterRole", "gangscope-collector-cluster") == {
        (r.group, r.plural, v) for r in COLLECTOR_RESOURCES if not r.namespaced for v in r.verbs}
    args = parse_container_args(pod_spec(one(objs, "Deployment", "gangscope-collector"))["containers"][0]["args"])
    assert args.namespaces == ["ml-team"]


# --- generated parts -----------------------------------------------------------------------------

def gen_deploy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "scripts" / "gen-deploy"), *args],
                          capture_output=True, text=True, timeout=60)


def test_generated_files_are_current() -> None:
    out = gen_deploy("--check")
    assert out.returncode == 0, out.stderr


def test_generation_check_catches_a_hand_edit(tmp_path: Path) -> None:
    for name in ("deploy", "alerts", "dashboards"):
        if (ROOT / name).exists():
            shutil.copytree(ROOT / name, tmp_path / name)
    (tmp_path / "exporter").symlink_to(ROOT / "exporter")
    rbac = tmp_path / "deploy" / "base" / "rbac.yaml"
    rbac.write_text(rbac.read_text().replace("- watch\n", "- watch\n  - delete\n", 1))
    out = gen_deploy("--check", "--root", str(tmp_path))
    assert out.returncode == 1
    assert "stale: deploy/base/rbac.yaml" in out.stderr


def test_prometheus_rule_holds_exactly_the_tested_rule_files(base: list[dict[str, Any]]) -> None:
    groups = []
    for path in sorted((ROOT / "alerts").glob("*.y*ml")):
        data = yaml.safe_load(path.read_text())
        if isinstance(data, dict) and "groups" in data:  # promtool test files hold tests instead
            groups.extend(data["groups"])
    assert groups, "no rule files in alerts/"
    rendered = one(base, "PrometheusRule", "gangscope-rules")["spec"]["groups"]
    by_name = lambda g: g["name"]  # noqa: E731
    assert sorted(rendered, key=by_name) == sorted(groups, key=by_name)


def test_every_dashboard_is_a_configmap_for_the_grafana_sidecar(base: list[dict[str, Any]]) -> None:
    for path in dashboard_files():
        cm = one(base, "ConfigMap", f"gangscope-dashboard-{path.stem}")
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["data"] == {path.name: path.read_text()}
        # Client-side `kubectl apply` copies the object into an annotation limited to 256 KiB.
        assert len(json.dumps(cm)) < 262_144 - 4096, f"{path.name}: too big for kubectl apply"
