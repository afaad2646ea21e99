"""Shared fixtures of the experiment tests: no data at all (``no_files``) and the checker of
the common report format. The data files or stand-ins for them (``uci_data``, ``mnist_data``,
``fashion_mnist_data``) are fixtures of the root conftest."""

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


VERDICT_PREFIXES = (
    "reproduced",
    "same ordering, smaller margin",
    "tied",
    "not reproduced",
    "not comparable",
    "not run",
    "not judged",
    "no published value",
    "check (",
)


def _check_common_report(report: dict, preset: str | None = None) -> dict:
    """``report`` (report.json, read back) is in the common format of
    structmc_papers._report: every REPORT_FIELDS key, every comparison with
    COMPARISON_FIELDS, verdicts from the vocabulary (issue 35: "not run" counted), a reason on
    every check, ``verdicts`` the tally of its rows; returns ``{quantity: comparison}``."""
    from structmc_papers._report import COMPARISON_FIELDS, REPORT_FIELDS, tally

    assert set(REPORT_FIELDS) <= set(report), set(REPORT_FIELDS) - set(report)
    if preset is not None:
        assert report["preset"] == preset
    assert report["comparisons"], "no comparison rows"
    for c in report["comparisons"]:
        assert set(COMPARISON_FIELDS) <= set(c), c
        assert c["verdict"].startswith(VERDICT_PREFIXES), c["verdict"]
        assert c["rule"] or c["verdict"].startswith(("no published value", "not run", "check (not run")), c
        assert not c["check"] or c["check_reason"], c
    settings = report.get("verdicts_by_setting") or {}
    assert report["verdicts"] == tally(report["comparisons"], report.get("paper_setting") if settings else None)
    assert report["wall_time_s"] > 0 and report["versions"]["torch"] and report["step_size_mapping"]
    assert report["reduced"] == bool(report["reductions"])
    return {c["quantity"]: c for c in report["comparisons"]}


@pytest.fixture
def common_report():
    """The checker of the common report format (see :func:`_check_common_report`)."""
    return _check_common_report
