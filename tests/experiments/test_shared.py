"""structmc_papers._shared: where experiments find the data folder (the environment, a
source checkout's ../shared/data, the library's cache; never a folder next to an installed
package), and an experiment that fails midway leaves no global behind."""

from __future__ import annotations

import signal
import warnings
from dataclasses import replace

import pytest
import torch

import structmc_papers as E
from structmc import demo
from structmc.data import default_cache_dir
from structmc_papers import _shared as S


# -- the data folder --------------------------------------------------------------------------------
def _layout(monkeypatch, tmp_path, package_dir, *, pyproject: bool):
    """Pretend ``_shared.py`` lives in ``package_dir/structmc_papers`` with a
    ``shared/data`` folder beside ``tmp_path/root``."""
    (tmp_path / "shared" / "data").mkdir(parents=True, exist_ok=True)
    if pyproject:
        (tmp_path / "root" / "pyproject.toml").parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "root" / "pyproject.toml").write_text("[project]\nname = 'structmc'\n")
    monkeypatch.setattr(S, "__file__", str(package_dir / "structmc_papers" / "_shared.py"))


def test_the_environment_variable_wins(monkeypatch, tmp_path):
    monkeypatch.setenv("STRUCTMC_DATA", str(tmp_path / "mine"))
    _layout(monkeypatch, tmp_path, tmp_path / "root" / "src", pyproject=True)
    assert S.default_data_dir() == tmp_path / "mine"


def test_a_source_checkout_uses_its_shared_data(monkeypatch, tmp_path):
    monkeypatch.delenv("STRUCTMC_DATA", raising=False)
    monkeypatch.delenv(S.ENV_NO_SHARED, raising=False)
    _layout(monkeypatch, tmp_path, tmp_path / "root" / "src", pyproject=True)  # root/src/structmc, root/pyproject.toml
    assert S.checkout_data_dir() == S.default_data_dir() == (tmp_path / "shared" / "data").resolve()
    # ... unless told not to (CI's fresh-clone run): then the library's own folder, the cache
    monkeypatch.setenv(S.ENV_NO_SHARED, "1")
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    assert S.checkout_data_dir() is None and S.default_data_dir() == default_cache_dir() == tmp_path / "cache"


def test_the_companion_in_the_repository_uses_the_checkouts_shared_data(monkeypatch, tmp_path):
    """The companion's source lives in ``<checkout>/papers/src/structmc_papers`` (issue 38):
    its ``papers/pyproject.toml`` is beside the checkout's, whose ``../shared/data`` it uses."""
    monkeypatch.delenv("STRUCTMC_DATA", raising=False)
    monkeypatch.delenv(S.ENV_NO_SHARED, raising=False)
    _layout(monkeypatch, tmp_path, tmp_path / "root" / "papers" / "src", pyproject=True)
    (tmp_path / "root" / "papers").mkdir(parents=True, exist_ok=True)
    (tmp_path / "root" / "papers" / "pyproject.toml").write_text("[project]\nname = 'structmc-papers'\n")
    assert S.checkout_data_dir() == S.default_data_dir() == (tmp_path / "shared" / "data").resolve()


def test_an_installed_package_never_looks_beside_site_packages(monkeypatch, tmp_path):
    """``parents[3]`` of an installed module is e.g. ``lib/``: its ``../shared/data`` is an
    unrelated folder. An installed package uses the cache."""
    monkeypatch.delenv("STRUCTMC_DATA", raising=False)
    monkeypatch.delenv(S.ENV_NO_SHARED, raising=False)
    monkeypatch.setenv("STRUCTMC_CACHE", str(tmp_path / "cache"))
    # tmp/root/site-packages/structmc_papers/_shared.py: parents[3] = tmp/root, beside it tmp/shared/data
    _layout(monkeypatch, tmp_path, tmp_path / "root" / "site-packages", pyproject=False)
    assert S.checkout_data_dir() is None and S.default_data_dir() == tmp_path / "cache"
    # a src/ folder without the project's pyproject.toml is not a checkout either
    _layout(monkeypatch, tmp_path, tmp_path / "root" / "src", pyproject=False)
    assert S.default_data_dir() == tmp_path / "cache"


# -- presets ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", E.REGISTRY.names())
def test_every_experiment_resolves_presets_one_way(name, tmp_path):
    """Every ``run`` resolves its first argument through :func:`structmc_papers.resolve_preset`:
    an unknown name is the same ValueError listing the presets, before anything is computed."""
    module = E.get(name)
    with pytest.raises(ValueError, match=r"unknown preset 'nope'; choose from \[.*'tiny'"):
        module.run("nope", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_a_resolved_preset_is_a_copy_with_the_seed_applied():
    presets = {"tiny": replace(demo.PRESETS["tiny"])}
    cfg, name = E.resolve_preset("tiny", presets, seed=7)
    assert name == "tiny" and cfg.seed == 7 and presets["tiny"].seed != 7
    same, name = E.resolve_preset("tiny", presets)
    assert same == presets["tiny"] and same is not presets["tiny"]  # a run cannot change its module's presets
    custom, name = E.resolve_preset(cfg, presets)
    assert custom is cfg and name == "custom"


# -- globals ---------------------------------------------------------------------------------------
def test_every_experiment_restores_globals():
    for name in E.REGISTRY.names():
        assert getattr(E.REGISTRY.get(name).load().run, "restores_globals", False), name


def _snapshot():
    return {
        "rng": torch.get_rng_state(),
        "threads": torch.get_num_threads(),
        "dtype": torch.get_default_dtype(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "sigint": signal.getsignal(signal.SIGINT),
        "sigterm": signal.getsignal(signal.SIGTERM),
        "filters": list(warnings.filters),
        "showwarning": warnings.showwarning,
    }


def _assert_same(before, after):
    assert torch.equal(after.pop("rng"), before.pop("rng")), "the global RNG was left changed"
    assert after == before


def _leave_everything_changed(*args, **kwargs):
    """What a step deep inside an experiment might leave behind when it fails: its Ctrl-C
    handler, a thread count, a default dtype, deterministic mode, a warnings filter."""
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    signal.signal(signal.SIGTERM, lambda signum, frame: None)
    torch.set_num_threads(torch.get_num_threads() + 1)
    torch.set_default_dtype(torch.float64)
    torch.use_deterministic_algorithms(True, warn_only=True)
    warnings.simplefilter("ignore")
    warnings.showwarning = lambda *a, **k: None
    torch.randn(3)


@pytest.mark.parametrize("error", [RuntimeError("sampler failed"), KeyboardInterrupt()], ids=["error", "ctrl-c"])
def test_an_experiment_failing_midway_restores_every_global(tmp_path, monkeypatch, error):
    """demo seeds torch's global RNG (to build its network), fits a MAP, then samples: the
    sampler fails (or Ctrl-C) after changing what ``sample`` and friends may change."""

    def failing_sample(*args, **kwargs):
        _leave_everything_changed()
        raise error

    monkeypatch.setattr(demo, "sample", failing_sample)
    torch.manual_seed(1234)
    before = _snapshot()
    with pytest.raises(type(error)):
        demo.run(replace(demo.PRESETS["tiny"], samplers=("SGLD",)), tmp_path, progress=False)
    _assert_same(before, _snapshot())
    assert not (tmp_path / "report.json").exists()


def test_a_finished_run_leaves_the_callers_globals(tmp_path, monkeypatch):
    """The same on success: the caller's RNG stream goes on where it was (demo reseeds it
    inside), and the draws of the run are those of the bare code (same seed, same numbers)."""
    torch.manual_seed(99)
    before = _snapshot()
    first = demo.run(
        replace(demo.PRESETS["tiny"], samplers=("SGLD",), num_steps=200, burn_in=50), tmp_path / "a", progress=False
    )
    _assert_same(before, _snapshot())
    bare = demo.run.__wrapped__(
        replace(demo.PRESETS["tiny"], samplers=("SGLD",), num_steps=200, burn_in=50), tmp_path / "b", progress=False
    )
    # the same draws; the exact posterior they are scored against comes from LAPACK (lstsq,
    # inv), whose last bits may vary with memory alignment: equal to 1e-9, where another
    # random stream would differ in the first digit
    ours = {k: v for k, v in first["samplers"]["SGLD"].items() if k not in ("seconds", "ms_per_step")}
    assert ours == pytest.approx({k: v for k, v in bare["samplers"]["SGLD"].items() if k in ours}, rel=1e-9, abs=0)
