"""The image's installed size, without Docker: gangscope's runtime wheel and every runtime
dependency installed by pip into an empty folder, as the Dockerfile's final stage installs them
(``pip install gangscope`` from the builder's wheels, byte-compiling as pip does by default).

    .venv/bin/python bench/image_size.py                 # the working tree
    .venv/bin/python bench/image_size.py --ref main      # a commit, for a before/after comparison

Prints one row per installed distribution (its files and their size, .pyc included) and the
total, largest first. The base image (python:3.11-slim) is the same for every row and is not
counted. Needs the package index pip is configured with (dependencies are resolved as
``docker build`` would).
"""

from __future__ import annotations

import argparse
import csv
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def source_tree(ref: str | None, into: Path) -> Path:
    """A clean copy of the working tree's files (what git tracks or would add; no build/ left
    over from an earlier in-tree build), or ``ref``'s files exported by ``git archive``."""
    if ref is None:
        listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard"],
                                capture_output=True, text=True, check=True).stdout.splitlines()
        for rel in listed:
            if (ROOT / rel).is_file():
                (into / "src" / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, into / "src" / rel)
        return into / "src"
    archive = into / "src.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(archive), ref], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "src", filter="data")
    return into / "src"


def install(source: Path, work: Path) -> Path:
    """Build the runtime wheel of ``source`` and pip-install it with its dependencies into a fresh folder."""
    wheels, target = work / "wheels", work / "site"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "--disable-pip-version-check", "-w", str(wheels), str(source)], check=True)
    [wheel] = wheels.glob("gangscope-*.whl")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--target", str(target),
                    str(wheel)], check=True)
    return target


def sizes(site: Path) -> dict[str, tuple[int, int]]:
    """Distribution -> (files, bytes), from each dist-info's RECORD (.pyc files pip wrote included)."""
    out: dict[str, tuple[int, int]] = {}
    for info in sorted(site.glob("*.dist-info")):
        name = info.name.rsplit("-", 1)[0]
        files = total = 0
        with (info / "RECORD").open() as record:
            for row in csv.reader(record):
                path = site / row[0]
                if path.is_file():
                    files += 1
                    total += path.stat().st_size
        out[name] = (files, total)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", default=None, help="git ref to measure instead of the working tree")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="gangscope-size-") as tmp:
        work = Path(tmp)
        site = install(source_tree(args.ref, work), work)
        table = sizes(site)
        on_disk = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    rows = sorted(table.items(), key=lambda item: -item[1][1])
    print(f"installed size of gangscope ({args.ref or 'working tree'}) and its runtime dependencies")
    print(f"{'distribution':<28}{'files':>8}{'MiB':>10}")
    for name, (files, size) in rows:
        print(f"{name:<28}{files:>8}{size / 2**20:>10.2f}")
    print(f"{'total (' + str(len(rows)) + ' distributions)':<28}{sum(f for f, _ in table.values()):>8}"
          f"{sum(s for _, s in table.values()) / 2**20:>10.2f}")
    print(f"{'all files in the folder':<28}{'':>8}{on_disk / 2**20:>10.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
