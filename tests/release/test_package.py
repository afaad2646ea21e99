"""The wheel a user installs: licence, type marker, metadata that matches what is tested."""

from __future__ import annotations

import email
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(ROOT)],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        pytest.skip(f"pip wheel could not build here: {proc.stderr[-400:]}")
    (path,) = out.glob("structmc-*.whl")
    return zipfile.ZipFile(path)


def test_the_wheel_ships_the_licence_and_the_type_marker(wheel):
    names = wheel.namelist()
    assert "structmc/py.typed" in names
    licence = [n for n in names if n.endswith("LICENSE")]
    assert licence and b"MIT License" in wheel.read(licence[0])


def test_metadata_matches_what_is_tested(wheel):
    meta_name = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
    meta = email.message_from_bytes(wheel.read(meta_name))
    assert meta["Requires-Python"] == ">=3.11"
    classifiers = meta.get_all("Classifier")
    versions = sorted(
        c.rsplit(":: ", 1)[1] for c in classifiers if c.startswith("Programming Language :: Python :: 3.")
    )
    assert versions == ["3.11", "3.12"]  # CI runs 3.11; bench/check_arviz1.py runs 3.12
    assert "License :: OSI Approved :: MIT License" in classifiers
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in versions


def test_the_changelog_names_the_current_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    text = (ROOT / "CHANGELOG.md").read_text()
    assert f"## [{version}]" in text and "## [Unreleased]" in text
