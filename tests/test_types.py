"""The package's annotations hold: it ships ``py.typed``, so type checkers of its users read them.

mypy, configured in pyproject.toml (``[tool.mypy]``: the whole ``exporter`` package, simulators
included, the benchmarks, the rules' and dashboards' generators, the GPU smoke check and the Kueue
TAS case converter, every function annotated, the generated gRPC stubs exempt), must find no error. Its
cache goes to a temporary folder so that the check always runs on the files as they are.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run_mypy(cache: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_package_type_checks(tmp_path: Path) -> None:
    done = run_mypy(tmp_path)
    assert done.returncode == 0 and "Success: no issues found" in done.stdout, done.stdout + done.stderr


def test_the_check_finds_an_error(tmp_path: Path) -> None:
    """The same configuration on a module with a wrong annotation fails, naming it: the check
    above can fail."""
    bad = tmp_path / "bad_module.py"
    bad.write_text("def count(names: list[str]) -> int:\n    return names[0]\n\n\ndef untyped(x):\n    return x\n")
    done = run_mypy(tmp_path / "cache", str(bad))
    assert done.returncode == 1, done.stdout + done.stderr
    assert 'Incompatible return value type (got "str", expected "int")' in done.stdout
    assert "Function is missing a type annotation" in done.stdout
