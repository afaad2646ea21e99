import pytest
import torch


@pytest.fixture(autouse=True, scope="session")
def _one_thread():
    """Tests use small tensors: one intra-op thread avoids thread start-up and contention
    costs (measured ~10x on small ops on a loaded 2-core machine) and makes timings stable."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
