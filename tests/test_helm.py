"""The Helm chart (deploy/helm/gangscope), linted and rendered by Helm v4's own Go SDK
(helm-python-sdk: no helm binary), with several value sets.

One source of truth: with default values the chart renders exactly the kustomize base's objects
(less the Namespace, which Helm users create with --create-namespace or namespace.create), and
with the secure or network-policy values exactly the base plus that component. The comparison
ignores only the three labels Helm adds to every object and selector. Every rendered object is
validated (manifests.validate: kubernetes-validate strict, CRD schemas), and every flag of the
collector and the agent is a value that reaches the real argument parser.
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path
from typing import Any

import helm_python as helm
import pytest
import yaml

from exporter.cli import SUBCOMMANDS
from manifests import kustomize, parse_container_args, validate, with_components

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "deploy" / "helm" / "gangscope"
HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by", "app.kubernetes.io/instance")

# Every flag set to a value other than its default (release "prod": names are prod-gangscope-*).
EVERYTHING: dict[str, Any] = {
    "image": {"repository": "registry.example/ml/gangscope", "tag": "0.1.0-rc1", "pullPolicy": "Always"},
    "imagePullSecrets": [{"name": "registry-creds"}],
    "namespace": {"create": True},
    "topology": {"levels": ["example.com/block", "example.com/rack"], "aliases": {"example.com/rack": "row", "example.com/block": "pod"}},
    "tls": {"enabled": True, "collectorSecretName": "c-cert", "agentSecretName": "a-cert"},
    "metricsAuth": {"enabled": True},
    "clusterName": "eu-west-1",
    "collector": {"port": 9500, "logLevel": "debug", "maxSeriesPerFamily": 50000, "discoveryInterval": 30,
                  "maxSeriesPerOwner": 5000, "metricAllowlist": ["gangscope_workload_.*", "gangscope_gang_.*"],
                  "metricDenylist": ["gangscope_workload_condition"],
                  "metricLabelsAllowlist": {"workloads": ["team", "app.kubernetes.io/*"], "podgroups": ["*"]}, "namespaces": ["ml-team", "research"],
                  "namespacesDenylist": ["kube-system"], "sources": ["workloads", "nodes"], "shard": 1, "totalShards": 3, "shardRanges": "equal", "shardCutsInterval": 300,
                  "insecureSkipTLSVerify": True, "assemblyTimeout": 900, "evictionLevel": "example.com/block", "evictionDomainGrace": 600, "finishedDetail": 900, "kaiStalenessGracePeriod": 120,
                  "queuePositionInterval": 0, "queuePositionLimit": 200, "placementSizes": [8, 16], "gpuResources": ["nvidia.com/gpu", "amd.com/gpu"],
                  "watchPods": False, "kaiSchedulerName": "kai", "volcanoSchedulerName": "volcano-v2", "progressStaleAfter": 3600,
                  "extraArgs": ["--log-level=info"], "resources": {"requests": {"cpu": "1", "memory": "2Gi"}, "limits": {"memory": "4Gi"}},
                  "nodeSelector": {"node-role.kubernetes.io/infra": ""}, "tolerations": [{"key": "infra", "operator": "Exists"}],
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                      {"matchExpressions": [{"key": "kubernetes.io/arch", "operator": "In", "values": ["amd64"]}]}]}}},
                  "priorityClassName": "system-cluster-critical", "podAnnotations": {"example.com/team": "ml-platform"}},
    "agent": {"port": 9501, "logLevel": "warning", "maxSeriesPerFamily": 20000, "discoveryInterval": 120,
              "maxSeriesPerOwner": 500, "metricAllowlist": ["gangscope_nvlink_.*"], "metricDenylist": ["gangscope_nic_.*"],
              "insecureSkipTLSVerify": True, "gpuResources": ["nvidia.com/gpu", "nvidia.com/mig-*"], "nvml": "real",
              "sampleInterval": 2, "nvmlTimeout": 5, "simProfile": "gb200", "pcieInterval": 0, "podResourcesInterval": 20,
              "podResourcesDir": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources", "hostSysfs": "/host-sys",
              "runtimeClassName": "nvidia", "maxUnavailable": 1, "priorityClass": {"create": True, "value": 2000000},
              "nodeSelector": {"gpu": "h100"}, "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}],
              "podAnnotations": {"example.com/team": "ml-platform"}},
    "serviceMonitor": {"interval": "15s", "scrapeTimeout": "5s", "labels": {"release": "kube-prometheus-stack"}},
    "prometheusRule": {"labels": {"release": "kube-prometheus-stack"}, "runbookBaseUrl": "https://wiki.example/ml/runbook/"},
    "dashboards": {"namespace": "monitoring", "labels": {"grafana_dashboard": "1", "team": "ml"}},
    "networkPolicy": {"enabled": True, "prometheus": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}},
                      "apiServer": {"ports": [6443], "cidrs": ["10.0.0.1/32"]}},
}
VALUE_SETS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "secure": {"tls": {"enabled": True}, "metricsAuth": {"enabled": True}},
    "network-policy": {"networkPolicy": {"enabled": True}},
    "everything": EVERYTHING,
    "sharded": {"collector": {"sharding": {"enabled": True}}},
    "namespaced": {"rbac": {"namespaced": True}, "collector": {"namespaces": ["ml-team"]}},
    "minimal": {"serviceMonitor": {"enabled": False}, "prometheusRule": {"enabled": False}, "dashboards": {"enabled": False},
                "agent": {"priorityClass": {"create": False}}},
}

# Flag -> the arguments EVERYTHING makes of it, per process (what the real parser then reads).
COLLECTOR_FLAGS = {
    "--listen": ["--listen=:9500"],
    "--max-series-per-family": ["--max-series-per-family=50000"],
    "--max-series-per-owner": ["--max-series-per-owner=5000"],
    "--cluster-name": ["--cluster-name=eu-west-1"],
    "--metric-allowlist": ["--metric-allowlist=gangscope_workload_.*,gangscope_gang_.*"],
    "--metric-denylist": ["--metric-denylist=gangscope_workload_condition"],
    "--metric-labels-allowlist": ["--metric-labels-allowlist=podgroups=[*],workloads=[team,app.kubernetes.io/*]"],
    "--namespaces": ["--namespaces=ml-team,research"],
    "--namespaces-denylist": ["--namespaces-denylist=kube-system"],
    "--resources": ["--resources=workloads,nodes"],
    "--shard": ["--shard=1"],
    "--total-shards": ["--total-shards=3"],
    "--shard-ranges": ["--shard-ranges=equal"],
    "--shard-cuts-interval": ["--shard-cuts-interval=300"],
    "--tls-cert": ["--tls-cert=/etc/gangscope/tls/tls.crt"],
    "--tls-key": ["--tls-key=/etc/gangscope/tls/tls.key"],
    "--metrics-auth": ["--metrics-auth"],
    "--insecure-skip-tls-verify": ["--insecure-skip-tls-verify"],
    "--discovery-interval": ["--discovery-interval=30"],
    "--topology-levels": ["--topology-levels=example.com/block,example.com/rack"],
    "--topology-alias": ["--topology-alias=example.com/block=pod", "--topology-alias=example.com/rack=row"],
    "--gpu-resource": ["--gpu-resource=nvidia.com/gpu", "--gpu-resource=amd.com/gpu"],
    "--assembly-timeout": ["--assembly-timeout=900"],
    "--eviction-level": ["--eviction-level=example.com/block"],
    "--eviction-domain-grace": ["--eviction-domain-grace=600"],
    "--finished-detail": ["--finished-detail=900"],
    "--kai-staleness-grace-period": ["--kai-staleness-grace-period=120"],
    "--queue-position-interval": ["--queue-position-interval=0"],
    "--queue-position-limit": ["--queue-position-limit=200"],
    "--placement-sizes": ["--placement-sizes=8,16"],
    "--no-pods": ["--no-pods"],
    "--kai-scheduler-name": ["--kai-scheduler-name=kai"],
    "--volcano-scheduler-name": ["--volcano-scheduler-name=volcano-v2"],
    "--progress-stale-after": ["--progress-stale-after=3600"],
    "--log-level": ["--log-level=debug"],
}
AGENT_FLAGS = {
    "--listen": ["--listen=:9501"],
    "--max-series-per-family": ["--max-series-per-family=20000"],
    "--max-series-per-owner": ["--max-series-per-owner=500"],
    "--cluster-name": ["--cluster-name=eu-west-1"],
    "--metric-allowlist": ["--metric-allowlist=gangscope_nvlink_.*"],
    "--metric-denylist": ["--metric-denylist=gangscope_nic_.*"],
    "--tls-cert": ["--tls-cert=/etc/gangscope/tls/tls.crt"],
    "--tls-key": ["--tls-key=/etc/gangscope/tls/tls.key"],
    "--metrics-auth": ["--metrics-auth"],
    "--insecure-skip-tls-verify": ["--insecure-skip-tls-verify"],
    "--discovery-interval": ["--discovery-interval=120"],
    "--topology-levels": ["--topology-levels=example.com/block,example.com/rack"],
    "--topology-alias": ["--topology-alias=example.com/block=pod", "--topology-alias=example.com/rack=row"],
    "--node-name": ["--node-name=$(NODE_NAME)"],
    "--nvml": ["--nvml=real"],
    "--sample-interval": ["--sample-interval=2"],
    "--nvml-timeout": ["--nvml-timeout=5"],
    "--sim-profile": ["--sim-profile=gb200"],
    "--pcie-interval": ["--pcie-interval=0"],
    "--pod-resources-socket": ["--pod-resources-socket=/var/snap/microk8s/common/var/lib/kubelet/pod-resources/kubelet.sock"],
    "--pod-resources-interval": ["--pod-resources-interval=20"],
    "--gpu-resource": ["--gpu-resource=nvidia.com/gpu", "--gpu-resource=nvidia.com/mig-*"],
    "--sysfs": ["--sysfs=/host/sys"],
    "--log-level": ["--log-level=warning"],
}
# Flags that are not values, and why.
NOT_VALUES = {
    "--pod": "collector.sharding.enabled sets it from the downward API (test_sharded_values_...)",
    "--pod-namespace": "collector.sharding.enabled sets it from the downward API (test_sharded_values_...)",
    "--shard-cuts-configmap": "its default, in the release namespace ($POD_NAMESPACE), is the one the chart's Role names",
    "--kubeconfig": "in a pod the process uses its service account",
    "--context": "in a pod the process uses its service account",
    "--version": "prints and exits",
    "--help": "prints and exits",
}


def render(values: dict[str, Any], name: str = "gangscope", namespace: str = "gangscope") -> dict[str, Any]:
    """Rendered objects (and NOTES) for ``values``, after the chart's schema accepted them."""
    with helm.Chart.load(CHART) as chart:
        chart.validate_schema(values)
        out = chart.render(values, name=name, namespace=namespace, is_install=True)
    objs = [d for path, text in sorted(out.items()) if path.endswith(".yaml") for d in yaml.safe_load_all(text) if d]
    return {"objects": objs, "notes": out.get("gangscope/templates/NOTES.txt", "")}


@pytest.fixture(scope="module")
def rendered() -> dict[str, dict[str, Any]]:
    """Each value set rendered; EVERYTHING as release "prod" in namespace "monitoring-ns"."""
    return {key: render(values, name="prod", namespace="monitoring-ns") if key == "everything" else render(values)
            for key, values in VALUE_SETS.items()}


def without_helm_labels(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_helm_labels(v) for k, v in value.items() if k not in HELM_LABELS}
    if isinstance(value, list):
        return [without_helm_labels(v) for v in value]
    return value


def by_key(objs: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    out = {(o["kind"], o["metadata"]["name"]): without_helm_labels(o) for o in objs}
    assert len(out) == len(objs), "two objects of one kind and name"
    return out


def one(objs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    [found] = [o for o in objs if o["kind"] == kind and o["metadata"]["name"] == name]
    return found


# --- lint, schema, validation -------------------------------------------------------------------

@pytest.mark.parametrize("key", VALUE_SETS)
def test_chart_lints_clean(key: str) -> None:
    report = helm.lint(CHART, VALUE_SETS[key], strict=True, namespace="gangscope", kube_version="v1.30.0")
    assert report["errors"] == []
    assert [m for m in report["messages"] if m["severity"] >= 2] == []


@pytest.mark.parametrize("key", VALUE_SETS)
def test_every_rendered_object_validates(rendered: dict[str, dict[str, Any]], key: str) -> None:
    assert validate(rendered[key]["objects"]) >= 10


def test_schema_rejects_misspelt_and_wrong_values() -> None:
    with helm.Chart.load(CHART) as chart:
        for bad in ({"agent": {"sampleIntervl": 2}}, {"collector": {"logLevel": "verbose"}}, {"agent": {"nvml": "fake"}},
                    {"topology": {"levels": "a,b"}}, {"serviceMonitor": {"interval": "30 seconds"}},
                    {"networkPolicy": {"apiServer": {"ports": []}}}, {"prometheusRule": {"runbookBaseUrl": "wiki/runbook"}}):
            with pytest.raises(helm.HelmValuesError):
                chart.validate_schema(bad)


# --- one source of truth: the kustomize base ------------------------------------------------------

def test_defaults_render_the_kustomize_base(rendered: dict[str, dict[str, Any]]) -> None:
    base = by_key(kustomize(ROOT / "deploy"))
    namespace = base.pop(("Namespace", "gangscope"))
    assert by_key(rendered["defaults"]["objects"]) == base
    created = by_key(render({"namespace": {"create": True}})["objects"])
    assert created[("Namespace", "gangscope")] == namespace


def test_secure_values_render_the_base_with_secure_metrics(rendered: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    want = by_key(with_components(tmp_path, "secure-metrics"))
    want.pop(("Namespace", "gangscope"))
    assert by_key(rendered["secure"]["objects"]) == want


def test_network_policy_values_render_the_base_with_its_component(rendered: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    want = by_key(with_components(tmp_path, "network-policy"))
    want.pop(("Namespace", "gangscope"))
    got = by_key(rendered["network-policy"]["objects"])
    assert got == want
    policy = got[("NetworkPolicy", "gangscope-collector")]["spec"]
    assert policy["ingress"][0]["ports"] == [{"port": "metrics", "protocol": "TCP"}]
    assert [p["port"] for p in policy["egress"][0]["ports"]] == [443, 6443] and "to" not in policy["egress"][0]


def test_sharded_values_render_the_base_with_the_sharded_component(rendered: dict[str, dict[str, Any]],
                                                                  tmp_path: Path) -> None:
    want = by_key(with_components(tmp_path, "sharded"))
    want.pop(("Namespace", "gangscope"))
    got = by_key(rendered["sharded"]["objects"])
    assert got == want
    ss = got[("StatefulSet", "gangscope-collector")]
    args = parse_container_args(ss["spec"]["template"]["spec"]["containers"][0]["args"])
    assert (args.pod, args.pod_namespace) == ("$(POD_NAME)", "$(POD_NAMESPACE)")
    assert ("Deployment", "gangscope-collector") not in got


def test_namespaced_values_render_the_base_with_the_namespaced_component(rendered: dict[str, dict[str, Any]],
                                                                        tmp_path: Path) -> None:
    want = by_key(with_components(tmp_path, "namespaced"))
    want.pop(("Namespace", "gangscope"))
    got = by_key(rendered["namespaced"]["objects"])
    assert got == want
    assert got[("Role", "gangscope-collector")]["metadata"]["namespace"] == "ml-team"
    assert ("ClusterRole", "gangscope-collector") not in got


# --- every flag is a value ------------------------------------------------------------------------

def parser_flags(command: str) -> set[str]:
    parser = argparse.ArgumentParser(exit_on_error=False)
    importlib.import_module(SUBCOMMANDS[command][0]).add_arguments(parser)
    parser.add_argument("--version", action="store_true")  # the command line's own, on every subcommand
    return {o for a in parser._actions for o in a.option_strings if o.startswith("--")}


@pytest.mark.parametrize(("command", "kind", "flags"), [("collector", "Deployment", COLLECTOR_FLAGS), ("agent", "DaemonSet", AGENT_FLAGS)])
def test_every_flag_is_a_value(rendered: dict[str, dict[str, Any]], command: str, kind: str, flags: dict[str, list[str]]) -> None:
    assert parser_flags(command) - set(NOT_VALUES) == set(flags), "a flag without a chart value (or a stale row here)"
    container = one(rendered["everything"]["objects"], kind, f"prod-gangscope-{command}")["spec"]["template"]["spec"]["containers"][0]
    args = container["args"]
    for flag, expected in flags.items():
        assert [a for a in args if a == flag or a.startswith(flag + "=")][:len(expected)] == expected, flag
    parsed = parse_container_args(args)  # the real parser accepts them all
    assert parsed.metrics_auth and parsed.insecure_skip_tls_verify
    assert parsed.log_level == ("info" if command == "collector" else "warning")  # extraArgs come last and win
    assert parsed.topology_alias == ["example.com/block=pod", "example.com/rack=row"]
    assert container["ports"][0]["containerPort"] == int(parsed.listen.rsplit(":", 1)[1])


def test_everything_reaches_its_objects(rendered: dict[str, dict[str, Any]]) -> None:
    objs = rendered["everything"]["objects"]
    assert all(o["metadata"]["name"].startswith("prod-gangscope") for o in objs if o["kind"] != "Namespace")
    dep, ds = one(objs, "Deployment", "prod-gangscope-collector"), one(objs, "DaemonSet", "prod-gangscope-agent")
    pod, agent_pod = dep["spec"]["template"]["spec"], ds["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == "registry.example/ml/gangscope:0.1.0-rc1"
    assert pod["containers"][0]["imagePullPolicy"] == "Always" and pod["imagePullSecrets"] == [{"name": "registry-creds"}]
    assert pod["priorityClassName"] == "system-cluster-critical" and pod["tolerations"] == [{"key": "infra", "operator": "Exists"}]
    assert pod["containers"][0]["resources"]["limits"] == {"memory": "4Gi"}
    assert dep["spec"]["template"]["metadata"]["annotations"] == {"example.com/team": "ml-platform"}
    assert {"name": "tls", "secret": {"secretName": "c-cert"}} in pod["volumes"]
    assert agent_pod["runtimeClassName"] == "nvidia" and agent_pod["priorityClassName"] == "prod-gangscope-node-agent"
    # Helm merges maps with the defaults (a key set to null removes one): GPU nodes that are also h100.
    assert agent_pod["nodeSelector"] == {"gpu": "h100", "nvidia.com/gpu.present": "true"}
    assert {"name": "tls", "secret": {"secretName": "a-cert"}} in agent_pod["volumes"]
    host = {v["name"]: v["hostPath"]["path"] for v in agent_pod["volumes"] if "hostPath" in v}
    assert host == {"pod-resources": "/var/snap/microk8s/common/var/lib/kubelet/pod-resources", "sys": "/host-sys"}
    assert ds["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"] == 1
    assert one(objs, "PriorityClass", "prod-gangscope-node-agent")["value"] == 2000000
    for name in ("prod-gangscope-collector", "prod-gangscope-agent"):
        sm = one(objs, "ServiceMonitor", name)
        assert sm["metadata"]["labels"]["release"] == "kube-prometheus-stack"
        endpoint = sm["spec"]["endpoints"][0]
        assert (endpoint["interval"], endpoint["scrapeTimeout"], endpoint["scheme"]) == ("15s", "5s", "https")
        assert endpoint["tlsConfig"]["serverName"] == f"{name}.monitoring-ns.svc"
        policy = one(objs, "NetworkPolicy", name)["spec"]
        assert policy["egress"][0] == {"ports": [{"port": 6443, "protocol": "TCP"}], "to": [{"ipBlock": {"cidr": "10.0.0.1/32"}}]}
        assert policy["ingress"][0]["from"][0]["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    assert one(objs, "PrometheusRule", "prod-gangscope-rules")["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    alerts = [r for g in one(objs, "PrometheusRule", "prod-gangscope-rules")["spec"]["groups"] for r in g["rules"] if "alert" in r]
    assert alerts and all(r["annotations"]["runbook_url"] == f"https://wiki.example/ml/runbook#{r['alert'].lower()}" for r in alerts)
    dashboards = [o for o in objs if o["kind"] == "ConfigMap"]
    assert dashboards and {o["metadata"]["namespace"] for o in dashboards} == {"monitoring"}
    assert one(objs, "Namespace", "monitoring-ns")["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "privileged"
    # Every binding names service accounts the chart creates, in the release namespace.
    accounts = {(o["metadata"]["namespace"], o["metadata"]["name"]) for o in objs if o["kind"] == "ServiceAccount"}
    for b in (o for o in objs if o["kind"] == "ClusterRoleBinding"):
        assert {(s["namespace"], s["name"]) for s in b["subjects"]} <= accounts
        assert one(objs, "ClusterRole", b["roleRef"]["name"])
    # Static sharding: the Role of the shards' cuts ConfigMap, and its namespace from the downward API.
    role = one(objs, "Role", "prod-gangscope-collector-sharding")
    assert {"apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["gangscope-shard-cuts"],
            "verbs": ["get", "list", "watch", "update"]} in role["rules"]
    assert pod["containers"][0]["env"] == [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}]
    notes = rendered["everything"]["notes"]
    assert "prod-gangscope-explain-reader" in notes and "--metrics-auth is on" in notes


def test_minimal_values_leave_the_optional_objects_out(rendered: dict[str, dict[str, Any]]) -> None:
    kinds = {o["kind"] for o in rendered["minimal"]["objects"]}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap", "PriorityClass", "NetworkPolicy", "Namespace"}
    ds = one(rendered["minimal"]["objects"], "DaemonSet", "gangscope-agent")
    assert "priorityClassName" not in ds["spec"]["template"]["spec"]


def test_release_namespace_is_used_everywhere(rendered: dict[str, dict[str, Any]]) -> None:
    objs = rendered["everything"]["objects"]
    cluster_scoped = {"Namespace", "PriorityClass", "ClusterRole", "ClusterRoleBinding"}
    for o in objs:
        if o["kind"] in cluster_scoped:
            assert "namespace" not in o["metadata"], o["metadata"]
        elif o["kind"] != "ConfigMap":
            assert o["metadata"]["namespace"] == "monitoring-ns", o["metadata"]
