"""The Dockerfile, without Docker (none on these machines): hadolint-style rules read from the file,
and a build of the very wheel its builder stage makes, from the context .dockerignore lets through.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

import exporter
from exporter import SIMULATORS_INSTALL

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPILERS = re.compile(r"\b(gcc|g\+\+|clang|build-essential|make|cmake|cc|python3?-dev|libc6?-dev)\b")


@dataclass
class Instruction:
    op: str
    args: str
    comments: list[str]  # the comment lines right above it


def parse(text: str) -> list[Instruction]:
    """Instructions with continuations joined; comments kept for the rules that want a reason."""
    out: list[Instruction] = []
    comments: list[str] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            comments = comments + [stripped] if stripped.startswith("#") else []
            continue
        if stripped.startswith("#"):  # a comment inside a continued instruction
            continue
        pending += " " + stripped.removesuffix("\\").strip() if pending else stripped.removesuffix("\\").strip()
        if stripped.endswith("\\"):
            continue
        op, _, args = pending.partition(" ")
        out.append(Instruction(op.upper(), args.strip(), comments))
        pending, comments = "", []
    return out


def stages(instructions: list[Instruction]) -> list[list[Instruction]]:
    result: list[list[Instruction]] = []
    for ins in instructions:
        if ins.op == "FROM":
            result.append([])
        if result:  # ARGs before the first FROM belong to no stage
            result[-1].append(ins)
    return result


@pytest.fixture(scope="module")
def parsed() -> list[list[Instruction]]:
    return stages(parse(DOCKERFILE.read_text()))


def test_parser_understands_continuations_and_comments() -> None:
    text = "# why\nFROM a:1 AS b\nRUN x \\\n  # note\n  && y\n"
    assert [(i.op, i.args, i.comments) for i in parse(text)] == [
        ("FROM", "a:1 AS b", ["# why"]),
        ("RUN", "x && y", []),
    ]


def test_every_base_image_is_a_pinned_slim_python(parsed: list[list[Instruction]]) -> None:
    assert len(parsed) >= 2, "multi-stage: a builder and a final stage"
    names = set()
    for stage in parsed:
        image, *rest = stage[0].args.split()
        if image in names:
            continue  # FROM an earlier stage
        name, _, tag = image.partition(":")
        assert name == "python" and re.fullmatch(r"3\.11-slim(-[a-z]+)?", tag), image  # DL3006/DL3007
        if rest:
            assert rest[0].upper() == "AS"
            names.add(rest[1])


def test_final_stage_installs_the_builders_wheels_and_nothing_else(parsed: list[list[Instruction]]) -> None:
    builder = parsed[0][0].args.split()[-1]
    final = parsed[-1]
    assert final[0].args.split()[0].startswith("python:"), "the final stage starts from the slim base, not the builder"
    builds = [i.args for i in parsed[0] if i.op == "RUN" and "pip wheel" in i.args]
    assert builds and "/wheels" in builds[0]
    installs = [i.args for i in final if i.op == "RUN" and "pip install" in i.args]
    assert len(installs) == 1
    assert f"from={builder}" in installs[0] and "/wheels" in installs[0]
    assert "--no-index" in installs[0], "offline from the builder's wheels only"
    assert not any(i.op == "COPY" and f"--from={builder}" not in i.args for i in final), "no sources in the final image"


def test_no_compilers_in_the_final_image(parsed: list[list[Instruction]]) -> None:
    for ins in parsed[-1]:
        if ins.op == "RUN":
            for command in re.split(r"&&|;", ins.args):
                if "apt-get install" in command or "apk add" in command:
                    assert not COMPILERS.search(command.split("install", 1)[-1]), command


def test_apt_usage_follows_the_rules(parsed: list[list[Instruction]]) -> None:
    """DL3009/DL3015: where apt-get installs, no recommends and the lists are removed in the same layer."""
    for stage in parsed:
        for ins in stage:
            if ins.op == "RUN" and "apt-get install" in ins.args:
                assert "--no-install-recommends" in ins.args
                assert "rm -rf /var/lib/apt/lists" in ins.args


def test_pip_keeps_no_cache(parsed: list[list[Instruction]]) -> None:
    """DL3042: no pip cache in a layer, either by flag or by PIP_NO_CACHE_DIR in the stage."""
    for stage in parsed:
        env = " ".join(i.args for i in stage if i.op == "ENV")
        for ins in stage:
            if ins.op == "RUN" and re.search(r"pip (install|wheel)", ins.args):
                assert "--no-cache-dir" in ins.args or "PIP_NO_CACHE_DIR=1" in env, ins.args


def test_no_add_and_no_downloads(parsed: list[list[Instruction]]) -> None:
    """DL3020: COPY, not ADD (ADD fetches URLs and unpacks archives)."""
    assert not [i for s in parsed for i in s if i.op == "ADD"]
    assert not [i for s in parsed for i in s if i.op == "RUN" and re.search(r"\b(curl|wget)\b", i.args)]


def test_runs_as_a_numeric_non_root_user(parsed: list[list[Instruction]]) -> None:
    users = [i.args for i in parsed[-1] if i.op == "USER"]
    assert users, "the final stage sets USER"
    uid, _, gid = users[-1].partition(":")
    assert uid.isdigit() and int(uid) != 0, "numeric, so kubelet can check runAsNonRoot"
    assert not gid or gid.isdigit()
    assert uid == "65534"


def test_entrypoint_is_exec_form_gangscope(parsed: list[list[Instruction]]) -> None:
    entry = [i for i in parsed[-1] if i.op == "ENTRYPOINT"]
    assert len(entry) == 1
    assert json.loads(entry[0].args) == ["gangscope"]  # exec form: signals reach the process
    for ins in parsed[-1]:
        if ins.op == "CMD":
            assert isinstance(json.loads(ins.args), list)


def test_healthcheck_present_or_explained(parsed: list[list[Instruction]]) -> None:
    checks = [i for i in parsed[-1] if i.op == "HEALTHCHECK"]
    assert len(checks) == 1
    if checks[0].args.upper() == "NONE":
        assert any("HEALTHCHECK" in c for c in checks[0].comments), "say why there is no health check"


# --- the build context and the wheel ---------------------------------------------------------------

def _glob(pattern: str) -> re.Pattern[str]:
    """Docker's (Go filepath.Match) glob, anchored at the context root: ``*`` stops at ``/``, ``**`` does not."""
    out = ""
    for token in re.split(r"(\*\*/?|\*|\?)", pattern.strip("/")):
        out += {"**/": "(.*/)?", "**": ".*", "*": "[^/]*", "?": "[^/]"}.get(token, re.escape(token))
    return re.compile(out + r"\Z")


def dockerignore_patterns() -> list[tuple[bool, re.Pattern[str]]]:
    patterns = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            negate = line.startswith("!")
            patterns.append((negate, _glob(line.lstrip("!"))))
    return patterns


def in_context(rel: str, patterns: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Docker's rule: the last pattern that matches the path, or a folder above it, decides."""
    parts = rel.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    included = True
    for negate, pattern in patterns:
        if any(pattern.match(p) for p in prefixes):
            included = negate
    return included


def test_dockerignore_matching_follows_docker() -> None:
    patterns = [(False, _glob("*")), (True, _glob("README.md")), (True, _glob("exporter/")), (False, _glob("**/__pycache__"))]
    assert in_context("README.md", patterns)
    assert not in_context("tests/fixtures/README.md", patterns)
    assert in_context("exporter/node/agent.py", patterns)
    assert not in_context("exporter/node/__pycache__/agent.cpython-311.pyc", patterns)


def build_context(dest: Path) -> list[str]:
    patterns = dockerignore_patterns()
    files = []
    for path in sorted(ROOT.rglob("*")):
        rel = path.relative_to(ROOT).as_posix()
        if path.is_file() and not rel.startswith((".git/", ".venv/")) and in_context(rel, patterns):
            target = dest / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            files.append(rel)
    return files


def test_context_holds_the_sources_and_nothing_more(tmp_path: Path, parsed: list[list[Instruction]]) -> None:
    files = build_context(tmp_path)
    assert "pyproject.toml" in files and "exporter/cli.py" in files
    assert not [f for f in files if f.startswith(("tests/", "deploy/", "bench/", "docs/", "exporter/sim/")) or "__pycache__" in f]
    for ins in parsed[0]:
        if ins.op == "COPY" and "--from" not in ins.args:
            for source in ins.args.split()[:-1]:
                assert (tmp_path / source).exists(), f"COPY {source}: not in the build context"


def build_wheel(source: Path, out: Path) -> Path:
    """``pip wheel`` of one project, as the builder stage does, less the dependencies' wheels (no
    network in tests) and pip's isolated build environment (the test environment has setuptools)."""
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--disable-pip-version-check",
         "-q", "-w", str(out), str(source)],
        capture_output=True, text=True, timeout=300,
    )
    assert build.returncode == 0, build.stderr
    [wheel] = out.glob("*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The runtime wheel built from the image's build context, and the simulators' wheel built
    from a copy of exporter/sim (so no build folder is left in the checkout)."""
    tmp = tmp_path_factory.mktemp("wheels")
    context = tmp / "context"
    build_context(context)
    runtime = build_wheel(context, tmp / "runtime")
    shutil.copytree(ROOT / "exporter" / "sim", tmp / "sim", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    sim = build_wheel(tmp / "sim", tmp / "simwheel")
    return {"runtime": runtime, "sim": sim}


def test_the_wheel_the_image_installs_holds_the_package_and_the_command(wheels: dict[str, Path]) -> None:
    assert wheels["runtime"].name.startswith("gangscope-")
    with zipfile.ZipFile(wheels["runtime"]) as whl:
        names = set(whl.namelist())
        assert {"exporter/__init__.py", "exporter/cli.py", "exporter/py.typed"} <= names
        assert not [n for n in names if n.startswith("tests/")]
        assert not [n for n in names if n.startswith("exporter/sim")], "simulator code in the runtime wheel"
        entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
        text = whl.read(entry_points).decode()
        requires = [line.split(":", 1)[1].strip() for line in whl.read(next(n for n in names if n.endswith("METADATA"))).decode().splitlines()
                    if line.startswith("Requires-Dist:")]
    assert re.search(r"^\[console_scripts\]\s*\ngangscope = exporter\.cli:main$", text, re.M), text
    runtime = sorted(r.split(">")[0].split("=")[0].split(";")[0].strip().lower() for r in requires if "extra ==" not in r)
    # Exactly what runs: every runtime dependency is imported by the code the image runs.
    assert runtime == ["aiohttp", "grpcio", "isal", "kubernetes", "msgspec", "nvidia-ml-py", "orjson", "prometheus-client",
                       "protobuf", "pyyaml", "structlog"]


def test_runtime_dependencies_are_imported_at_run_time(tmp_path: Path) -> None:
    """Each runtime dependency's module is imported by the collector, the agent or the one-shot
    commands (psutil, imported by nothing at run time, is a test dependency now)."""
    modules = {"aiohttp": "aiohttp", "grpcio": "grpc", "kubernetes": "kubernetes", "msgspec": "msgspec", "nvidia-ml-py": "pynvml",
               "orjson": "orjson", "prometheus-client": "prometheus_client", "protobuf": "google.protobuf",
               "pyyaml": "yaml", "structlog": "structlog"}
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443", "insecure-skip-tls-verify": True}}],
        "users": [{"name": "u", "user": {"token": "t"}}], "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
    }))
    code = ("import sys, exporter.cluster.main, exporter.node.main, exporter.node.agent, exporter.node.podresources, "
            "exporter.serving, exporter.snapshot, exporter.explain, exporter.loader, exporter.kube.credentials\n"
            "from exporter.kube.credentials import Credentials\n"
            f"Credentials.load(kubeconfig={str(kubeconfig)!r})  # a kubeconfig outside a pod: the kubernetes package's loader\n"
            "import exporter.node.podresources_pb2_grpc\n"
            "from exporter.node.agent import nvml_factory; nvml_factory('real')()\n"
            "print(' '.join(sorted(sys.modules)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    loaded = set(out.stdout.split())
    assert {d for d, m in modules.items() if m not in loaded} == set()
    assert "psutil" not in loaded


def _clean_python(target: Path, *code: str) -> subprocess.CompletedProcess[str]:
    """Python with ``target`` (a pip --target install) first and the test environment's
    dependencies after it, without its .pth files (-S): the checkout's editable installs of
    gangscope and gangscope-sim are invisible, as on a machine that installed only the wheels."""
    site = next(p for p in sys.path if p.endswith("site-packages"))
    env = {"PYTHONPATH": f"{target}:{site}", "PATH": "/usr/bin:/bin", "GANGSCOPE_LOG_LEVEL": "error"}
    return subprocess.run([sys.executable, "-S", *code], capture_output=True, text=True, timeout=60, env=env, cwd=target)


def _pip_target(target: Path, *wheels: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--disable-pip-version-check", "-q",
                          "--target", str(target), *map(str, wheels)], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr


def test_without_the_simulators_the_demo_says_how_to_get_them(wheels: dict[str, Path], tmp_path: Path) -> None:
    _pip_target(tmp_path / "t", wheels["runtime"])
    demo = _clean_python(tmp_path / "t", "-m", "exporter", "demo", "--duration", "1")
    assert demo.returncode == 2, demo.stdout + demo.stderr
    assert demo.stderr.strip() == f"gangscope demo needs the simulators, which the runtime image does not ship: {SIMULATORS_INSTALL}"
    agent = _clean_python(tmp_path / "t", "-m", "exporter", "agent", "--nvml", "sim", "--listen", "127.0.0.1:0",
                          "--kubeconfig", str(tmp_path / "none"))
    assert agent.returncode == 2 and SIMULATORS_INSTALL in agent.stderr, agent.stderr
    assert _clean_python(tmp_path / "t", "-m", "exporter", "collector", "--version").returncode == 0


def test_the_simulators_wheel_holds_the_simulators_and_the_demo_rules(wheels: dict[str, Path], tmp_path: Path) -> None:
    with zipfile.ZipFile(wheels["sim"]) as whl:
        names = {n for n in whl.namelist() if ".dist-info/" not in n}
        metadata = whl.read(next(n for n in whl.namelist() if n.endswith("METADATA"))).decode()
    sim = ROOT / "exporter" / "sim"
    assert names == {f"exporter/sim/{p.name}" for p in sim.glob("*.py")} | {f"exporter/sim/rules/{p.name}" for p in (sim / "rules").glob("*.yaml")}

    assert f"Version: {exporter.__version__}" in metadata and f"Requires-Dist: gangscope=={exporter.__version__}" in metadata
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert sorted(extras) == ["test"], "an extra naming gangscope-sim would name a distribution on no index"
    # Installed over the runtime wheel: the simulators import, and the demo finds its rules.
    _pip_target(tmp_path / "t", wheels["runtime"], wheels["sim"])
    code = ("import exporter.sim.apiserver, exporter.sim.scenario, pathlib, tempfile\n"
            "from exporter.demo import demo_rules, simulators_installed\n"
            "assert simulators_installed()\n"
            "paths, interval = demo_rules(pathlib.Path(tempfile.mkdtemp()))\n"
            "print(exporter.sim.__file__, sorted(p.name for p in paths), interval)")
    out = _clean_python(tmp_path / "t", "-c", code)
    assert out.returncode == 0, out.stderr
    where, rest = out.stdout.split(" ", 1)
    assert where.startswith(str(tmp_path / "t"))
    assert rest.strip() == "['gangscope-alerts.yaml', 'gangscope-rules.yaml'] 1s"


@pytest.mark.slow
def test_the_printed_install_builds_both_wheels_that_run_the_demo_in_a_fresh_venv(tmp_path: Path) -> None:
    """SIMULATORS_INSTALL, word for word: ``pip wheel --no-deps -w dist . ./exporter/sim`` in a
    checkout (a copy of its tracked files), then ``pip install dist/*.whl`` into a fresh venv (the
    dependencies from the configured index), whose ``gangscope demo`` runs, from outside the checkout."""
    assert "pip wheel --no-deps -w dist . ./exporter/sim" in SIMULATORS_INSTALL and "pip install dist/*.whl" in SIMULATORS_INSTALL
    checkout = tmp_path / "checkout"
    tracked = subprocess.run(["git", "ls-files", "-z", "pyproject.toml", "README.md", "exporter"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout.split("\0")
    for rel in filter(None, tracked):
        if (ROOT / rel).is_file():
            (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, checkout / rel)
    build = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", "dist",
                            ".", "./exporter/sim"], cwd=checkout, capture_output=True, text=True, timeout=300)
    assert build.returncode == 0, build.stderr
    built = sorted(p.name for p in (checkout / "dist").glob("*.whl"))
    assert built == [f"gangscope-{exporter.__version__}-py3-none-any.whl", f"gangscope_sim-{exporter.__version__}-py3-none-any.whl"]
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    install = subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "--disable-pip-version-check",
                              *map(str, (checkout / "dist").glob("*.whl"))], capture_output=True, text=True, timeout=600)
    assert install.returncode == 0, install.stderr
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path)}
    demo = subprocess.run([str(venv / "bin" / "gangscope"), "demo", "--duration", "2", "--scenario", "static"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert demo.returncode == 0, demo.stderr
    assert "gangscope demo is running" in demo.stdout and "$ gangscope explain ml-team/mixtral-sft" in demo.stdout
    where = subprocess.run([str(venv / "bin" / "python"), "-c", "import exporter.sim; print(exporter.sim.__file__)"],
                           capture_output=True, text=True, cwd=tmp_path, env=env)
    assert where.stdout.startswith(str(venv)), where
