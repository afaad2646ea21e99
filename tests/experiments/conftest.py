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
    structmc.experiments._report: every REPORT_FIELDS key, every comparison with
    COMPARISON_FIELDS, verdicts from the new vocabulary, counts that match them; returns
    ``{quantity: comparison}``."""
    from structmc.experiments._report import COMPARISON_FIELDS, REPORT_FIELDS

    assert set(REPORT_FIELDS) <= set(report), set(REPORT_FIELDS) - set(report)
    if preset is not None:
        assert report["preset"] == preset
    assert report["comparisons"], "no comparison rows"
    for c in report["comparisons"]:
        assert set(COMPARISON_FIELDS) <= set(c), c
        assert c["verdict"].startswith(VERDICT_PREFIXES), c["verdict"]
        assert c["rule"] or c["verdict"] == "no published value", c
    v = report["verdicts"]
    counted = v["claims"] if "claims" in v else sum(v.values())
    judged = sum(
        not c["verdict"].startswith(("no published value", "not judged", "check (")) and not c.get("check")
        for c in report["comparisons"]
    )
    assert counted == judged
    assert report["wall_time_s"] > 0 and report["versions"]["torch"] and report["step_size_mapping"]
    assert report["reduced"] == bool(report["reductions"])
    return {c["quantity"]: c for c in report["comparisons"]}


@pytest.fixture
def common_report():
    """The checker of the common report format (see :func:`_check_common_report`)."""
    return _check_common_report
