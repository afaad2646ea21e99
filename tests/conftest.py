"""Root conftest: puts ``tests/`` on ``sys.path`` so that every test folder (each a package,
like ``tests/diagnostics``) can import the shared helpers as ``support.<module>``, whatever
pytest's import mode."""

import sys
from pathlib import Path

import pytest
import torch

_TESTS = str(Path(__file__).resolve().parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tests use small tensors: one intra-op thread avoids thread start-up and contention
    costs (measured ~10x on small ops on a loaded 2-core machine) and makes timings stable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
