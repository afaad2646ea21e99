"""The wheel is what a user gets (issue 38 item 5): the ``structmc`` wheel, built from this
checkout, holds the library and nothing of the papers' reproductions (no ``structmc/experiments``,
no ``structmc_papers``), no tests, no docs/results; the companion's wheel (``papers/``) holds
``structmc_papers`` and the entry point through which ``structmc reproduce`` finds it."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _build(project: Path, files: tuple[str, ...], tmp_path: Path) -> zipfile.ZipFile:
    """``pip wheel --no-deps --no-build-isolation`` of a copy of ``files`` of ``project`` (a copy:
    no stale ``build/`` folder of the checkout can leak into the wheel); skips when it cannot."""
    if importlib.util.find_spec("setuptools") is None:  # setuptools >= 70.1 builds wheels itself
        pytest.skip("building a wheel needs setuptools in this environment (pip install setuptools)")
    src = tmp_path / "project"
    src.mkdir()
    for name in files:
        (shutil.copytree if (project / name).is_dir() else shutil.copy2)(project / name, src / name)
    for cache in src.rglob("__pycache__"):
        shutil.rmtree(cache)
    out = tmp_path / "wheel"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(out),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 and "No module named" in proc.stderr:
        pytest.skip(f"cannot build a wheel here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


def test_the_library_wheel_holds_no_reproduction_no_tests_no_results(tmp_path):
    wheel = _build(ROOT, ("pyproject.toml", "README.md", "LICENSE", "src"), tmp_path)
    names = wheel.namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"structmc", "structmc-0.1.0.dist-info"}, tops
    assert "structmc/__init__.py" in names and "structmc/demo.py" in names and "structmc/py.typed" in names
    banned = [
        n
        for n in names
        if n.startswith(("structmc/experiments/", "structmc_papers/", "tests/", "docs/", "papers/"))
        or "/results/" in n
        or "/tests/" in n
    ]
    assert not banned, banned
    entry_points = wheel.read("structmc-0.1.0.dist-info/entry_points.txt").decode()
    assert "structmc.reproductions" not in entry_points  # the library registers no reproduction


def test_the_companion_wheel_holds_the_reproductions_and_their_entry_point(tmp_path):
    wheel = _build(ROOT / "papers", ("pyproject.toml", "README.md", "src"), tmp_path)
    names = wheel.namelist()
    assert {n.split("/")[0] for n in names} == {"structmc_papers", "structmc_papers-0.1.0.dist-info"}
    assert "structmc_papers/__init__.py" in names and "structmc_papers/gibbs_xor.py" in names
    assert not any(n.startswith("structmc/") for n in names)
    entry_points = wheel.read("structmc_papers-0.1.0.dist-info/entry_points.txt").decode()
    assert "[structmc.reproductions]" in entry_points and "papers = structmc_papers" in entry_points
