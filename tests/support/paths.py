"""Repository locations shared by the tests that run scripts or read the reference data."""

from __future__ import annotations

from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data"  # reference copies of the paper's data sets
