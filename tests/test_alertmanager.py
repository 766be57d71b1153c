"""The example Alertmanager configuration: valid, routes as documented, inhibits as documented.

amtool (Debian's prometheus-alertmanager, 0.25) checks and routes; inhibition is only visible in
a running Alertmanager, so one is started on loopback and fed alerts through its v2 API.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "alerts" / "alertmanager.yml"


def test_amtool_check_config() -> None:
    result = subprocess.run(["amtool", "check-config", str(CONFIG)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


@pytest.mark.parametrize(
    ("labels", "receiver"),
    [
        ({"alertname": "GangscopeDomainNodeFailureEvictions", "severity": "critical", "block": "b1", "rack": "r1"}, "infra-pager"),
        ({"alertname": "GangscopeNVLinkDown", "severity": "warning", "node": "n1"}, "infra-tickets"),
        ({"alertname": "GangscopePCIeLinkWidthDegraded", "severity": "warning", "node": "n1"}, "infra-tickets"),
        ({"alertname": "GangscopeSourceDown", "severity": "warning", "source": "workloads"}, "observability"),
        ({"alertname": "GangscopeGangIdleGPUs", "severity": "warning", "cluster_queue": "team-a-h100"}, "team-a-tickets"),
        ({"alertname": "GangscopeGangIdleGPUs", "severity": "critical", "cluster_queue": "team-a-h100"}, "team-a-pager"),
        ({"alertname": "GangscopeWorkloadInadmissible", "severity": "warning", "namespace": "team-b-research", "cluster_queue": "shared"}, "team-b-tickets"),
        ({"alertname": "GangscopeClusterQueueInadmissible", "severity": "warning", "cluster_queue": "shared"}, "platform-tickets"),
        ({"alertname": "GangscopeSomethingNew", "severity": "critical", "cluster_queue": "shared"}, "platform-pager"),
    ],
)
def test_routes(labels: dict[str, str], receiver: str) -> None:
    args = [f"{k}={v}" for k, v in labels.items()]
    result = subprocess.run(["amtool", "config", "routes", "test", f"--config.file={CONFIG}", *args], capture_output=True, text=True)
    assert result.stdout.strip() == receiver, result.stdout + result.stderr


def test_inhibit_rules_use_the_domain_labels_of_the_rules() -> None:
    rules_config = yaml.safe_load((ROOT / "alerts" / "config.yaml").read_text())
    levels = rules_config["topology_levels"]
    domain = levels[: levels.index(rules_config["domain_alert_level"]) + 1]
    config = yaml.safe_load(CONFIG.read_text())
    rack_rule = next(r for r in config["inhibit_rules"] if "GangscopeDomainNodeFailureEvictions" in r["source_matchers"][0])
    assert rack_rule["equal"] == domain
    rack_route = next(r for r in config["route"]["routes"] if "GangscopeDomainNodeFailureEvictions" in r["matchers"][0])
    assert rack_route["group_by"] == ["alertname", *domain]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str) -> object:
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def alertmanager(tmp_path: Path) -> Iterator[str]:
    port = _free_port()
    proc = subprocess.Popen(
        [
            "prometheus-alertmanager",
            f"--config.file={CONFIG}",
            f"--storage.path={tmp_path}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
            "--log.level=warn",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                _get(f"{url}/api/v2/status")
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"alertmanager did not start: {proc.stderr.read().decode() if proc.stderr else ''}")
                time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _post(url: str, alerts: list[dict]) -> None:
    request = urllib.request.Request(f"{url}/api/v2/alerts", data=json.dumps(alerts).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=5) as response:
        assert response.status == 200


def test_rack_alert_inhibits_the_workload_alerts_of_that_rack_only(alertmanager: str) -> None:
    workload = {"alertname": "GangscopeWorkloadNodeFailureEviction", "severity": "warning", "namespace": "team-a",
                "workload": "job-1", "cluster_queue": "cq-a", "block": "b1"}
    _post(
        alertmanager,
        [
            {"labels": {"alertname": "GangscopeDomainNodeFailureEvictions", "severity": "critical", "block": "b1", "rack": "r1"}},
            {"labels": {**workload, "rack": "r1"}},
            {"labels": {**workload, "rack": "r2"}},
            {"labels": {"alertname": "GangscopeGangIdleGPUs", "severity": "warning", "namespace": "team-a", "workload": "job-1",
                        "podgroup": "pg", "cluster_queue": "cq-a"}},
        ],
    )
    deadline = time.monotonic() + 10
    while True:
        alerts = _get(f"{alertmanager}/api/v2/alerts")
        state = {(a["labels"]["alertname"], a["labels"].get("rack", "")): a["status"] for a in alerts}  # type: ignore[union-attr]
        if len(state) == 4 or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    assert state[("GangscopeWorkloadNodeFailureEviction", "r1")]["state"] == "suppressed"
    assert state[("GangscopeWorkloadNodeFailureEviction", "r1")]["inhibitedBy"]
    assert state[("GangscopeWorkloadNodeFailureEviction", "r2")]["state"] == "active"
    assert state[("GangscopeGangIdleGPUs", "")]["state"] == "active"
    assert state[("GangscopeDomainNodeFailureEvictions", "r1")]["state"] == "active"
