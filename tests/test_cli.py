"""The ``gangscope`` command: ``--version`` on every subcommand, and each subcommand's first log
line naming its version and effective configuration with secrets redacted. Run as the real
installed command, as a user or a manifest runs it."""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from exporter import __version__
from exporter.cli import SUBCOMMANDS
from exporter.logs import REDACTED, effective_config, redact

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"


def gangscope(*args: str) -> list[str]:
    script = Path(sys.executable).parent / "gangscope"
    return [str(script), *args] if script.exists() else [sys.executable, "-m", "exporter", *args]


def starting(stderr: str) -> dict:
    """The gangscope_starting event among JSON log lines (stderr is not a terminal here)."""
    events = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    found = [e for e in events if e.get("event") == "gangscope_starting"]
    assert len(found) == 1, stderr
    return found[0]


@pytest.mark.parametrize("command", [None, *SUBCOMMANDS])
def test_version_on_every_subcommand(command: str | None) -> None:
    out = subprocess.run(gangscope(*([command] if command else []), "--version"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == f"gangscope {__version__} (Python {platform.python_version()})"


def test_snapshot_logs_version_and_configuration_first() -> None:
    dump = FIXTURES / "kueue" / "workload-v1beta2-admitted-tas.yaml"
    out = subprocess.run(gangscope("snapshot", "--from-file", str(dump), "--topology-alias", "example.com/rack=rack",
                                   "--log-level", "info"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    event = starting(out.stderr)
    assert (event["command"], event["version"], event["python"], event["level"]) == (
        "snapshot", __version__, platform.python_version(), "info")
    assert event["config"] == {"assembly_timeout": 600.0, "eviction_domain_grace": 3600.0, "eviction_level": None,
                               "finished_detail": 0.0,
                               "format": "text", "from_file": str(dump), "gpu_resource": None, "log_level": "info", "metric_labels_allowlist": [], "placement_sizes": [1, 2, 4, 8], "topology_alias": ["example.com/rack=rack"], "topology_levels": "",
                               "no_pods": False, "kai_scheduler_name": "kai-scheduler", "volcano_scheduler_name": "volcano",
                               "progress_stale_after": 1800.0, "kai_staleness_grace_period": 60.0}


def test_explain_redacts_a_password_in_the_prometheus_url() -> None:
    dump = FIXTURES / "kueue" / "workload-v1beta2-admitted-tas.yaml"
    out = subprocess.run(gangscope("explain", "nowhere/nothing", "--from-file", str(dump), "--log-level", "debug",
                                   "--prometheus", "https://grafana:hunter2-secret@prom.example:9090/"),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0  # nothing of that name: fine, the start-up line came first
    assert "hunter2" not in out.stderr + out.stdout
    assert starting(out.stderr)["config"]["prometheus"] == f"https://grafana:{REDACTED}@prom.example:9090/"


def test_agent_process_logs_its_start_before_serving(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(gangscope("agent", "--nvml", "sim", "--listen", f"127.0.0.1:{port}", "--kubeconfig",
                                      str(tmp_path / "missing"), "--pod-resources-socket", str(tmp_path / "x.sock"),
                                      "--sysfs", str(FIXTURES / "sysfs"), "--node-name", "gpu-1"),
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=1).read()
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "agent did not start"
                time.sleep(0.1)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=20)
    first = json.loads(err.splitlines()[0])
    assert first["event"] == "gangscope_starting" and first["command"] == "agent"
    assert first["config"]["listen"] == f"127.0.0.1:{port}" and first["config"]["nvml"] == "sim"
    assert first["config"]["metrics_auth"] is False and first["config"]["sample_interval"] == 1.0


def test_effective_config_redacts_secret_flags_and_credentials_in_text() -> None:
    args = argparse.Namespace(
        _module="exporter.x", command="x", listen=":9400", api_token="abc123", token_file="/var/run/token",
        password=None, prometheus="http://u:p4ss@h:9090", note="Authorization: Bearer eyJhbGci.x.y",
        urls=["https://a:b@c/"], levels=("k",), interval=1.5,
    )
    assert effective_config(args) == {
        "listen": ":9400", "api_token": REDACTED, "token_file": "/var/run/token", "password": None,
        "prometheus": f"http://u:{REDACTED}@h:9090", "note": f"Authorization: Bearer {REDACTED}",
        "urls": [f"https://a:{REDACTED}@c/"], "levels": ["k"], "interval": 1.5,
    }
    assert redact("see http://host:9090/x?a=b@c") == "see http://host:9090/x?a=b@c"  # a port is no password


@pytest.mark.parametrize("flags, says", [
    (["--total-shards", "3", "--shard", "3"], "shard 3 is not in [0, 3)"),
    (["--total-shards", "0"], "--total-shards must be at least 1"),
    (["--shard-cuts-interval", "-5"], "--shard-cuts-interval must be a number of seconds >= 0"),
    (["--total-shards", "2", "--shard-cuts-configmap", "gs/Cuts_Here"], "'Cuts_Here' is not a ConfigMap name"),
    (["--namespaces", "Team_A"], "'Team_A' is not a namespace name"),
    (["--resources", "workloads,pods"], "unknown source(s) pods"),
    (["--metric-allowlist", "a", "--metric-denylist", "b"], "mutually exclusive"),
    (["--metric-denylist", "gangscope_(unclosed"], "is not a regular expression"),
])
def test_collector_rejects_bad_scope_flags(flags: list[str], says: str, tmp_path: Path) -> None:
    """A wrong scope is a configuration error: exit 2 naming it, before touching the cluster."""
    out = subprocess.run(gangscope("collector", "--kubeconfig", str(tmp_path / "none"), "--listen", "127.0.0.1:0", *flags),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out.stderr
    assert says in out.stderr


def test_an_unknown_flag_prints_the_subcommands_usage() -> None:
    out = subprocess.run(gangscope("explain", "ml-team/x", "--bogus"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.startswith("usage: gangscope explain [-h] [--version]")
    assert out.stderr.rstrip().endswith("gangscope explain: error: unrecognized arguments: --bogus")


def test_two_aliases_for_one_key_are_a_usage_error() -> None:
    dump = FIXTURES / "kueue" / "workload-v1beta2-admitted-tas.yaml"
    out = subprocess.run(gangscope("snapshot", "--from-file", str(dump), "--topology-alias", "example.com/rack=rack",
                                   "--topology-alias", "example.com/rack=row"), capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("usage: gangscope snapshot [-h] [--version]")
    assert out.stderr.rstrip().endswith("gangscope snapshot: error: --topology-alias example.com/rack given twice "
                                        "(example.com/rack=rack and example.com/rack=row): give each key once")


def test_one_shot_commands_say_nothing_but_their_answer_by_default() -> None:
    """snapshot and explain log warnings and errors only; explain on a folder of dumps says
    nothing about the objects besides the job asked about, unless that job is not found."""
    dump = FIXTURES / "kueue" / "workload-v1beta2-admitted-tas.yaml"
    env = {k: v for k, v in os.environ.items() if k != "GANGSCOPE_LOG_LEVEL"}
    snap = subprocess.run(gangscope("snapshot", "--from-file", str(dump)), capture_output=True, text=True, timeout=60, env=env)
    assert snap.returncode == 0 and snap.stderr == "" and "gangscope_workload_info" in snap.stdout
    real = FIXTURES / "kueue" / "real"  # printed by real clusters, some incomplete (no namespace, no name)
    found = subprocess.run(gangscope("explain", "default/job-tas-sample-preferredk2854-590e0", "--from-file", str(real)),
                           capture_output=True, text=True, timeout=60, env=env)
    assert found.returncode == 0 and found.stderr == "", found.stderr
    missing = subprocess.run(gangscope("explain", "default/nothing", "--from-file", str(real)),
                             capture_output=True, text=True, timeout=60, env=env)
    assert missing.returncode == 1
    assert missing.stderr.startswith("gangscope explain: default/nothing: no Kueue Workload, owner job of a Workload, "
                                     "or PodGroup of that name (")
    assert missing.stderr.endswith(" object(s) of the dump could not be read; --log-level info lists them)\n")
    assert missing.stderr.count("\n") == 1


# ---- ordinary mistakes: one line, a non-zero status, no traceback --------------------------


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig_for(tmp_path: Path, server: str) -> str:
    path = tmp_path / "kubeconfig"
    path.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": {"token": "t"}}]}))
    return str(path)


def assert_one_clean_line(out: subprocess.CompletedProcess[str], command: str, says: str) -> None:
    assert out.returncode != 0, out.stderr
    assert "Traceback" not in out.stderr and "Unclosed" not in out.stderr, out.stderr
    assert out.stderr.count("\n") == 1 and out.stderr.startswith(f"gangscope {command}: "), out.stderr
    assert says in out.stderr, out.stderr


@pytest.mark.parametrize("command", ["collector", "agent"])
@pytest.mark.parametrize("listen, says", [
    ("nonsense", "--listen wants HOST:PORT (a port 0-65535), got 'nonsense'"),
    ("127.0.0.1:65536", "got '127.0.0.1:65536'"),
])
def test_a_malformed_listen_address_is_one_line(command: str, listen: str, says: str, tmp_path: Path) -> None:
    """Refused before the start is logged or the API client opened: the whole of stderr is the line."""
    extra = ["--nvml", "sim", "--pod-resources-socket", str(tmp_path / "x.sock")] if command == "agent" else []
    out = subprocess.run(gangscope(command, "--listen", listen, "--kubeconfig",
                                   kubeconfig_for(tmp_path, f"http://127.0.0.1:{closed_port()}"), *extra),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert_one_clean_line(out, command, says)


@pytest.mark.parametrize("command", ["collector", "agent"])
def test_a_port_in_use_is_one_line_and_the_client_is_closed(command: str, tmp_path: Path) -> None:
    """Found only when binding, after the start is logged (at warning level not even that): one
    line that names the address, and the API client's session closed (no "Unclosed client session")."""
    extra = ["--nvml", "sim", "--pod-resources-socket", str(tmp_path / "x.sock")] if command == "agent" else []
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        listen = f"127.0.0.1:{taken.getsockname()[1]}"
        argv = [command, "--listen", listen, "--kubeconfig", kubeconfig_for(tmp_path, f"http://127.0.0.1:{closed_port()}"),
                *extra]
        quiet = subprocess.run(gangscope(*argv, "--log-level", "warning"), capture_output=True, text=True, timeout=60)
        logged = subprocess.run(gangscope(*argv), capture_output=True, text=True, timeout=60)
    assert quiet.returncode == 1
    assert_one_clean_line(quiet, command, f"cannot listen on {listen}: Address already in use")
    first, *rest = logged.stderr.splitlines(keepends=True)
    assert json.loads(first)["event"] == "gangscope_starting"
    assert_one_clean_line(subprocess.CompletedProcess(logged.args, logged.returncode, "", "".join(rest)), command,
                          f"cannot listen on {listen}")


def test_explain_against_a_refused_api_server_answers_at_once(tmp_path: Path) -> None:
    """Nothing listens at the kubeconfig's server: the connection's refusal is the answer, not a
    wait for --sync-timeout (30 s by default)."""
    port = closed_port()
    started = time.monotonic()
    out = subprocess.run(gangscope("explain", "ml-team/llama", "--kubeconfig", kubeconfig_for(tmp_path, f"http://127.0.0.1:{port}")),
                         capture_output=True, text=True, timeout=60)
    took = time.monotonic() - started
    assert_one_clean_line(out, "explain", f"cannot reach the API server at http://127.0.0.1:{port}: Connection refused")
    assert out.returncode == 1 and out.stdout == ""
    assert took < 10, f"{took:.1f} s"


def test_explain_against_a_silent_api_server_waits_for_the_sync_timeout(tmp_path: Path) -> None:
    """A server that accepts the connection and does not answer (slow, overloaded) gets the whole
    --sync-timeout: only a connection that fails as such is an answer at once."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(64)  # the kernel completes the handshakes; nothing reads
        server = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        out = subprocess.run(gangscope("explain", "ml-team/llama", "--kubeconfig", kubeconfig_for(tmp_path, server),
                                       "--sync-timeout", "3"), capture_output=True, text=True, timeout=60)
        took = time.monotonic() - started
    assert_one_clean_line(out, "explain", "cannot read the cluster: not within --sync-timeout 3s")
    assert out.returncode == 1 and took >= 3, f"{took:.1f} s"
