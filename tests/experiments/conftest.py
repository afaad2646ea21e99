import pytest


@pytest.fixture
def no_files(tmp_path, monkeypatch):
    """No data folder anywhere (and an empty cache): an experiment must fall back to its
    simulator or synthetic stand-in, and say so."""
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("STRUCTMC_DATA", str(empty))
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    return empty
