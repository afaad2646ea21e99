"""The documentation site builds with warnings as errors (a renamed function leaves no dead
reference), and a dead reference does fail the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytest.importorskip("mkdocs", reason="the docs extra is not installed (pip install -e '.[docs]')")
pytest.importorskip("mkdocstrings", reason="the docs extra is not installed (pip install -e '.[docs]')")


def _build(config: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-f", str(config), "-d", str(site)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=config.parent,
    )


def test_the_site_builds_strictly(tmp_path):
    out = _build(ROOT / "mkdocs.yml", tmp_path / "site")
    assert out.returncode == 0, out.stdout + out.stderr
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    assert "ScaleAdaptedSGHMC" in api and "structmc.evaluate" in api
    for page in ("index.html", "examples/index.html", "guides/models/index.html", "conventions/index.html"):
        assert (tmp_path / "site" / page).exists(), page


def test_a_dead_api_reference_fails_the_build(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    (copy / "src").symlink_to(ROOT / "src")
    api = copy / "docs" / "api.md"
    api.write_text(api.read_text() + "\n::: structmc.no_such_function\n")
    out = _build(copy / "mkdocs.yml", tmp_path / "site")
    assert out.returncode != 0 and "no_such_function" in out.stdout + out.stderr


def test_every_public_name_has_a_line_in_the_markdown_reference():
    """Issue 36 §18: docs/reference.md, readable without building the site, names every public
    name (and a class's public methods: ParamSpace.unflatten, Run.theta, ...); it is what
    docs/gen_reference.py writes from the code."""
    import importlib
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "docs"))
    try:
        gen = importlib.import_module("gen_reference")
    finally:
        sys.path.pop(0)
    text = (root / "docs" / "reference.md").read_text()
    for ns in gen.NAMESPACES:
        for name in gen.public_names(ns):
            assert f"`{ns}.{name}" in text, f"{ns}.{name} is missing from docs/reference.md"
    for member in (
        "ParamSpace.unflatten",
        "Run.theta",
        "structmc.diagnostics.plot_trace",
        "structmc.recorders.Recorder",
    ):
        assert member in text, member
    out = subprocess.run([sys.executable, str(root / "docs" / "gen_reference.py"), "--check"], cwd=root)
    assert out.returncode == 0, "docs/reference.md is out of date: run python docs/gen_reference.py"
