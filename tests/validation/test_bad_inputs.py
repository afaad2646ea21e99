"""Bad inputs get clear errors, not silent truncation, dropping or tracebacks.

One table, :data:`CASES`: each row is a callable doing one bad thing (given a scratch folder),
the exception it must raise and a phrase its message must contain (naming the argument). The
``CLI`` rows run :func:`structmc.cli.main` in-process and turn its outcome into
:class:`CLIError`: exit status 2, the message on one ``structmc: error: ...`` line (argparse's
own usage errors end in ``structmc <command>: error: ...``), no traceback.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import subprocess
import sys
import urllib.error
from pathlib import Path
from unittest import mock

import pytest
import torch
from torch import nn

import structmc as sm
from structmc.cli import main
from structmc.gibbs import MetropolisWithinGibbs
from structmc.gradients import ControlVariate
from structmc.likelihoods import Likelihood
from structmc.partitions import Partition, by_finer_nodes, custom, make_partition, node_blocks, round_robin
from structmc.samplers import sampler_from_config
from structmc.schedules import schedule_from_config
from structmc.structured.energies import BernoulliMask, BetaMask, StructuredEnergy, make_mask
from structmc.structured.history import ChainHistory


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------
class CLIError(Exception):
    """The CLI refused its input the agreed way (exit 2, one error line, no traceback)."""


_ERROR_LINE = re.compile(r"^structmc( [a-z]+)?: error: ")


def cli(*argv, env: dict | None = None) -> None:
    """Run ``structmc *argv`` in-process; raise :class:`CLIError` with its error line if it
    exits with status 2 the agreed way, fail otherwise."""
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), mock.patch.dict(os.environ, env or {}):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit as exc:
            rc = exc.code
    text = err.getvalue()
    assert "Traceback" not in text, text
    if rc != 2:
        raise AssertionError(f"structmc {' '.join(map(str, argv))}: exit {rc!r}, stderr {text!r}")
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and _ERROR_LINE.match(lines[-1]), f"no 'structmc: error:' line in {text!r}"
    if not lines[-1].startswith("structmc: error: "):  # argparse: usage lines, then its error line
        assert lines[0].startswith("usage: structmc"), text
    else:
        assert len(lines) == 1, f"expected one error line, got {text!r}"
    raise CLIError(lines[-1])


def config(tmp: Path, name: str, body: str) -> Path:
    path = tmp / name
    path.write_text(body)
    return path


def sample_cli(tmp: Path, *extra, env=None):
    return cli("sample", "--quiet", "--steps", 20, "--burn-in", 5, "--chains", 1, "--out", tmp / "out", *extra, env=env)


def _offline_download(tmp: Path):
    """A paper data set with no local copy on a machine without network."""

    def no_network(*args, **kwargs):
        raise urllib.error.URLError("no network")

    env = {"STRUCTMC_CACHE": str(tmp / "cache")}
    with mock.patch("structmc.data.files._stream", no_network), mock.patch.dict(os.environ, {}, clear=False):
        os.environ.pop("STRUCTMC_DATA", None)
        sample_cli(tmp, "--dataset", "yacht", env=env)


def _space():
    return sm.ParamSpace.from_module(nn.Sequential(nn.Linear(3, 2), nn.Tanh(), nn.Linear(2, 1)))  # P = 11


def _energy(dim: int = 2):
    return sm.LogDensityEnergy(lambda theta, batch: -0.5 * (theta * theta).sum(-1), dim)


def _run(**kwargs):
    args = dict(energy=_energy(), init=torch.zeros(2), sampler=sm.SGLD(0.1), num_steps=10)
    args.update(kwargs)
    return sm.sample(args.pop("energy"), args.pop("init"), args.pop("sampler"), args.pop("num_steps"), **args)


def _prepare(centre: torch.Tensor, dim: int = 3, chains: int = 1):
    return ControlVariate(centre).prepare(_energy(dim), None, torch.zeros(chains, dim))


def _without(module: str, fn, *args):
    """``fn(*args)`` as if ``module`` were not installed."""
    with mock.patch.dict(sys.modules, {module: None}):
        return fn(*args)


def _diagnose_not_a_run(tmp: Path):
    (tmp / "notes").mkdir()
    (tmp / "notes" / "a.txt").write_text("hello")
    cli("diagnose", tmp / "notes")


# -- issue 21 A6/C: inputs once accepted silently or refused with a raw torch error ------------
def _module_energy(module: nn.Module | None = None, likelihood: str = "categorical", **kw):
    module = module if module is not None else nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))  # P = 26
    return sm.ModuleEnergy(module, likelihood, **kw)


def _xy(n: int = 12, classes: int = 2):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 3, generator=g)
    return x, torch.arange(n) % classes


def _chain(energy=None, steps: int = 6):
    energy = energy if energy is not None else _module_energy()
    return sm.sample(energy, None, sm.SGLD(1e-3), steps, data=_xy(), progress=False)


def _other_model():
    """The same parameter count (P = 26) and names as :func:`_module_energy`, other shapes."""
    return _module_energy(nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 6)))


def _resume_in_float64(tmp: Path):
    log_density = lambda theta, batch: -0.5 * (theta * theta).sum()
    sm.sample(log_density, torch.zeros(2), sm.SGLD(0.1), 10, out_dir=tmp / "run", checkpoint_every=5, progress=False)
    sm.sample(
        log_density,
        torch.zeros(2, dtype=torch.float64),
        sm.SGLD(0.1),
        20,
        out_dir=tmp / "run",
        resume=True,
        progress=False,
    )


def _soft_labels(y: torch.Tensor):
    x, _ = _xy(len(y))
    _run(energy=_module_energy(), init=None, data=(x, y))


class _Returns(nn.Module):
    def __init__(self, kind: str):
        super().__init__()
        self.kind, self.fc = kind, nn.Linear(3, 2)

    def forward(self, x):
        out = self.fc(x)
        return {"tuple": lambda: (out, x), "dict": lambda: {"logits": out}, "transposed": lambda: out.T}[self.kind]()


class _EmptyDataset(torch.utils.data.Dataset):
    def __len__(self):
        return 0

    def __getitem__(self, i):
        raise IndexError(i)


def _unbatched_value():
    energy = _module_energy().with_num_data(12)
    energy.value(energy.initial_position().unsqueeze(0), _xy())  # no chain dimension: [n, 3], [n]


def _structured_memory(tmp: Path):
    """S-SGMCMC with one group per parameter (K = M = P = 1000 copies): about 8·K·P·4 bytes =
    32 MB per batched evaluation, refused when 20 MB are free (0.8 · 20 MB fit 500 copies)."""
    from structmc.structured import energies

    energy = StructuredEnergy(_energy(1000), round_robin(1000, 1000), 10)
    with mock.patch.object(energies, "available_memory", return_value=20_000_000):
        _run(energy=energy, init=torch.zeros(1000))


def _rerun_over_a_finished_run(tmp: Path):
    try:
        sample_cli(tmp, "--checkpoint-every", 10)
    except AssertionError as err:  # the first run succeeds (exit 0): the helper reports that as an AssertionError
        assert "exit 0" in str(err), err
    sample_cli(tmp)


def _killed_before_first_checkpoint(tmp: Path):
    """A run folder as a kill before the first checkpoint leaves it: run.json, chunks, no checkpoint."""

    def killed(iteration, state):
        if iteration == 3:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        sm.sample(
            _energy(), torch.zeros(2), sm.SGLD(0.1), 50, out_dir=tmp / "out" / "run", callback=killed, progress=False
        )


def _resume_after_kill(tmp: Path):
    _killed_before_first_checkpoint(tmp)
    sample_cli(tmp, "--resume")


def _rerun_after_kill(tmp: Path):
    _killed_before_first_checkpoint(tmp)
    sample_cli(tmp)


def _resume_another_runs_draws(tmp: Path):
    """resume=True with no checkpoint, in a folder whose draws another run (seed) wrote."""

    def killed(iteration, state):
        if iteration == 5:
            raise RuntimeError("killed")

    with pytest.raises(RuntimeError, match="killed"):
        _run(out_dir=tmp / "run", chunk_draws=2, callback=killed, progress=False)
    _run(out_dir=tmp / "run", chunk_draws=2, seed=7, resume=True, progress=False)


def _second_writer(tmp: Path):
    from structmc.storage import RunFolder

    held = RunFolder(tmp / "busy")
    held.lock()  # a run in progress
    try:
        _run(out_dir=tmp / "busy", overwrite=True, progress=False)
    finally:
        held.unlock()


def _manifest_deleted(tmp: Path):
    _run(out_dir=tmp / "run", progress=False)
    (tmp / "run" / "manifest.json").unlink()
    sm.load_chain(tmp / "run")


def _out_is_a_file(tmp: Path, *under: str):
    (tmp / "out").write_text("not a folder")
    cli("sample", "--quiet", "--steps", 20, "--burn-in", 5, "--out", Path(tmp / "out", *under))


# ---------------------------------------------------------------------------------------
# the table: (id, callable(tmp), exception, phrase)
# ---------------------------------------------------------------------------------------
API = [
    # torch.distributed (issue 25): refused before any compute
    (
        "distributed-without-a-process-group",
        lambda t: sm.sample(_module_energy(), None, sm.SGLD(1e-3), 5, data=_xy(24, classes=2), distributed=True),
        ValueError,
        "needs an initialised torch.distributed process group",
    ),
    (
        "distributed-not-a-switch",
        lambda t: sm.sample(_module_energy(), None, sm.SGLD(1e-3), 5, data=_xy(24, classes=2), distributed="nccl"),
        TypeError,
        "distributed must be True, False, None",
    ),
    ("distributed-bucket-size", lambda t: sm.distributed.Distributed(bucket_mb=-1), ValueError, "bucket_mb"),
    (
        "distributed-sync-check",
        lambda t: sm.distributed.Distributed(sync_check_every=0),
        ValueError,
        "sync_check_every must be a positive integer",
    ),
    # partitions: patterns and keywords are never dropped
    (
        "custom-pattern-matches-nothing",
        lambda t: custom(_space(), {"*": 0, "fc9.*": 1}),
        ValueError,
        "'fc9.*' matches no parameter",
    ),
    ("custom-pattern-shadowed", lambda t: custom(_space(), {"*": 0, "0.*": 1}), ValueError, "already took"),
    ("custom-groups-as-flat-strings", lambda t: custom(_space(), ["0.*", "2.*"]), TypeError, "list of patterns"),
    ("custom-parameter-uncovered", lambda t: custom(_space(), {"0.*": 0}), ValueError, "matches no pattern"),
    ("custom-id-vector-wrong-length", lambda t: custom(_space(), [0, 1, 0]), ValueError, "shape [11]"),
    (
        "make_partition-unknown-keyword",
        lambda t: make_partition("layer", _space(), num_groups=3),
        TypeError,
        "unknown keyword(s) ['num_groups']",
    ),
    (
        "make_partition-missing-keyword",
        lambda t: make_partition("round_robin", _space()),
        TypeError,
        "needs num_groups",
    ),
    (
        "make_partition-fractional-groups",
        lambda t: make_partition("round_robin", _space(), num_groups=2.5),
        ValueError,
        "num_groups must be an integer",
    ),
    ("make_partition-unknown-kind", lambda t: make_partition("blocks", _space()), ValueError, "unknown partition"),
    (
        "finer_nodes-fractional-chunk",
        lambda t: by_finer_nodes(_space(), chunk_size=1.5),
        ValueError,
        "chunk_size must be an integer",
    ),
    (
        "node_blocks-fractional-chunk",
        lambda t: node_blocks(_space(), chunk_size=2.5),
        ValueError,
        "chunk_size must be an integer",
    ),
    ("round_robin-zero-groups", lambda t: round_robin(5, 0), ValueError, "num_groups must lie in [1, 5]"),
    ("partition-empty-group", lambda t: Partition(torch.tensor([0, 2]), 3), ValueError, "empty groups"),
    # Sd-SGMCMC masks
    ("make_mask-unknown-keyword", lambda t: make_mask("bernoulli", p=0.3), TypeError, "it accepts rho, at_least_one"),
    ("make_mask-uniform-takes-none", lambda t: make_mask("uniform", rho=0.3), TypeError, "accepts none"),
    ("make_mask-beta-missing", lambda t: make_mask("beta", a=1.0), TypeError, "needs b"),
    ("make_mask-unknown-kind", lambda t: make_mask("gaussian"), ValueError, "unknown mask"),
    ("bernoulli-rho-string", lambda t: BernoulliMask("0.5"), TypeError, "rho must be a number"),
    ("bernoulli-rho-zero", lambda t: BernoulliMask(0.0), ValueError, "rho must lie in (0, 1]"),
    ("beta-mask-nonpositive", lambda t: BetaMask(0.0, 1.0), ValueError, "a, b > 0"),
    # chain history and structured energies
    ("history-fractional-capacity", lambda t: ChainHistory(2.5), ValueError, "capacity must be an integer"),
    ("history-zero-capacity", lambda t: ChainHistory(0), ValueError, "capacity must be >= 1"),
    ("history-fractional-thin", lambda t: ChainHistory(10, thin=1.5), ValueError, "thin must be an integer"),
    ("history-unknown-mode", lambda t: ChainHistory(10, mode="fifo"), ValueError, "mode must be"),
    (
        "structured-partition-wrong-size",
        lambda t: StructuredEnergy(_energy(3), round_robin(4, 2)),
        ValueError,
        "covers 4 parameters but the model has 3",
    ),
    (
        "structured-history-wrong-type",
        lambda t: StructuredEnergy(_energy(4), round_robin(4, 2), "big"),
        TypeError,
        "history must be",
    ),
    (
        "structured-mask-without-copies",
        lambda t: StructuredEnergy(_energy(4), round_robin(4, 2), mask=BernoulliMask(0.5)),
        ValueError,
        "num_copies",
    ),
    (
        "structured-fractional-copies",
        lambda t: StructuredEnergy(_energy(4), round_robin(4, 2), mask=BernoulliMask(0.5), num_copies=1.5),
        ValueError,
        "num_copies must be an integer",
    ),
    # schedules
    ("stepdecay-fractional-every", lambda t: sm.StepDecay(1e-3, every=2.5), ValueError, "every must be an integer"),
    ("stepdecay-string-every", lambda t: sm.StepDecay(1e-3, every="3"), TypeError, "every must be an integer"),
    (
        "stepdecay-config-fractional-every",
        lambda t: schedule_from_config({"kind": "step_decay", "lr": 1e-3, "every": 2.5}),
        ValueError,
        "every must be an integer",
    ),
    (
        "schedule-config-unknown-key",
        lambda t: schedule_from_config({"kind": "step_decay", "lr": 1e-3, "evry": 3}),
        ValueError,
        "unknown key(s) ['evry']",
    ),
    (
        "schedule-config-unknown-kind",
        lambda t: schedule_from_config({"kind": "warmup", "lr": 1e-3}),
        ValueError,
        "unknown schedule 'warmup'",
    ),
    (
        "cyclical-fractional-steps",
        lambda t: sm.Cyclical(1e-3, num_steps=10.5),
        ValueError,
        "num_steps must be an integer",
    ),
    ("polynomial-string", lambda t: sm.Polynomial("a"), TypeError, "a must be a number"),
    ("constant-bool", lambda t: sm.Constant(True), TypeError, "lr must be a number"),
    # samplers
    *[
        (f"{cls.__name__}-lr-none", (lambda c: lambda t: c(None))(cls), TypeError, "lr must be a positive number")
        for cls in (sm.SGLD, sm.SGHMC, sm.SGNHT, sm.PSGLD)
    ],
    ("sgld-lr-string", lambda t: sm.SGLD("0.1"), TypeError, "lr must be a positive number"),
    ("sgld-lr-negative", lambda t: sm.SGLD(-0.1), ValueError, "lr must be positive"),
    ("psgld-eps-zero", lambda t: sm.PSGLD(1e-3, eps=0), ValueError, "eps must be > 0"),
    ("psgld-eps-negative", lambda t: sm.PSGLD(1e-3, eps=-1e-5), ValueError, "eps must be > 0"),
    (
        "psgld-fractional-probes",
        lambda t: sm.PSGLD(1e-3, gamma_probes=1.5),
        ValueError,
        "gamma_probes must be an integer",
    ),
    ("psgld-fractional-num-data", lambda t: sm.PSGLD(1e-3, num_data=2.5), ValueError, "num_data must be an integer"),
    ("psgld-alpha-string", lambda t: sm.PSGLD(1e-3, alpha="high"), TypeError, "alpha must be a number"),
    ("sghmc-friction-string", lambda t: sm.SGHMC(1e-3, friction="x"), TypeError, "friction must be a number"),
    (
        "sghmc-fractional-leapfrog",
        lambda t: sm.SGHMC(1e-3, num_leapfrog=2.5),
        ValueError,
        "num_leapfrog must be a positive integer",
    ),
    ("sgld-temperature-string", lambda t: sm.SGLD(1e-3, temperature="hot"), TypeError, "temperature must be a number"),
    ("sgnht-negative-a", lambda t: sm.SGNHT(1e-3, a=-1), ValueError, "a must be >= 0"),
    (
        "sampler-config-unknown-key",
        lambda t: sampler_from_config({"name": "sgld", "lr": 1e-3, "friction": 0.1}),
        ValueError,
        "unknown key(s) ['friction']",
    ),
    ("sampler-config-missing-lr", lambda t: sampler_from_config({"name": "sgld"}), ValueError, "needs lr"),
    (
        "sampler-config-lr-none",
        lambda t: sampler_from_config({"name": "sgld", "lr": None}),
        ValueError,
        "a schedule is a number",
    ),
    # control variates
    ("cv-centre-wrong-last-dim", lambda t: _prepare(torch.zeros(4)), ValueError, "centre must have shape [3]"),
    ("cv-centre-multiple-of-dim", lambda t: _prepare(torch.zeros(6)), ValueError, "centre must have shape [3]"),
    ("cv-centre-wrong-chains", lambda t: _prepare(torch.zeros(2, 3), chains=3), ValueError, "[3, 3]"),
    ("cv-centre-3d", lambda t: ControlVariate(torch.zeros(2, 2, 3)), ValueError, "centre must have shape"),
    ("cv-centre-list", lambda t: ControlVariate([0.0, 0.0]), TypeError, "centre must be a tensor"),
    ("cv-centre-nan", lambda t: ControlVariate(torch.tensor([math.nan])), ValueError, "NaN"),
    (
        "cv-fractional-chunk",
        lambda t: ControlVariate(torch.zeros(3), chunk_size=2.5),
        ValueError,
        "chunk_size must be an integer",
    ),
    # sample() arguments (validated in run.py)
    (
        "sample-cv-centre-wrong-shape",
        lambda t: _run(gradient=ControlVariate(torch.zeros(3))),
        ValueError,
        "centre must have shape [2]",
    ),
    ("sample-gradient-string", lambda t: _run(gradient="cv"), TypeError, "gradient must be"),
    ("sample-zero-steps", lambda t: _run(num_steps=0), ValueError, "num_steps"),
    ("sample-fractional-seed", lambda t: _run(seed=1.5), ValueError, "seed must be an integer"),
    ("sample-negative-seed", lambda t: _run(seed=-1), ValueError, "seed must be an integer >= 0"),
    ("sample-fractional-thin", lambda t: _run(thin=2.5), ValueError, "thin must be an integer"),
    ("sample-burn-in-too-long", lambda t: _run(burn_in=10), ValueError, "burn_in (10) must be smaller"),
    ("sample-resume-without-folder", lambda t: _run(resume=True), ValueError, "out_dir"),
    # issue 21: run folders
    (
        "sample-resume-deletes-another-runs-draws",
        _resume_another_runs_draws,
        ValueError,
        "holds the draws of another run and no checkpoint: cannot resume: seed differs",
    ),
    ("sample-second-writer-on-a-folder", _second_writer, ValueError, "is in use by another run"),
    (
        "load-chain-manifest-deleted",
        _manifest_deleted,
        ValueError,
        "the manifest is missing, so the run folder's files cannot be verified",
    ),
    # issue 21 A6: accepted silently
    (
        "evaluate-chain-of-another-model",
        lambda t: sm.evaluate(_other_model(), _chain(), _xy(classes=6)),
        ValueError,
        "the chain was drawn for another model",
    ),
    (
        "predictive-chain-of-another-model",
        lambda t: sm.predictive(_other_model(), _chain(), _xy()[0]),
        ValueError,
        "first difference: the chain's '0.weight' [4, 3] vs the energy's '0.weight' [2, 3]",
    ),
    (
        "predictive-draws-of-another-size",
        lambda t: sm.predictive(_module_energy(), torch.zeros(2, 13), _xy()[0]),
        ValueError,
        "draws must be [S, 26] or [C, D, 26]",
    ),
    (
        "resume-float32-run-with-float64-init",
        _resume_in_float64,
        ValueError,
        "the chain in the checkpoint is float32 but this run's is float64",
    ),
    (
        "soft-labels-negative",
        lambda t: _soft_labels(torch.tensor([[1.5, -0.5]]).repeat(12, 1)),
        ValueError,
        "class probabilities and must be >= 0",
    ),
    (
        "soft-labels-unnormalised",
        lambda t: _soft_labels(torch.full((12, 2), 0.7)),
        ValueError,
        "each row must sum to 1 over the 2 classes",
    ),
    (
        "gaussian-noise-std-inf",
        lambda t: _module_energy(likelihood="gaussian", noise_std=math.inf),
        ValueError,
        "needs a finite noise_std > 0, got inf",
    ),
    (
        "gaussian-noise-std-nan",
        lambda t: _module_energy(likelihood="gaussian", noise_std=math.nan),
        ValueError,
        "needs a finite noise_std > 0, got nan",
    ),
    (
        "gaussian-noise-std-zero",
        lambda t: _module_energy(likelihood="gaussian", noise_std=0.0),
        ValueError,
        "needs a finite noise_std > 0, got 0.0",
    ),
    (
        "gaussian-noise-std-string",
        lambda t: _module_energy(likelihood="gaussian", noise_std="0.1"),
        TypeError,
        "noise_std must be a number",
    ),
    (
        "gaussian-likelihood-without-noise-std",
        lambda t: Likelihood("gaussian", lambda o, y: o.sum()).predict(torch.zeros(2, 3, 1)),
        ValueError,
        "predictive needs its noise_std",
    ),
    # issue 21 C: errors that did not say what to do
    (
        "sample-float-chains",
        lambda t: _run(num_chains=2.0),
        ValueError,
        "num_chains must be an integer >= 1, got 2.0 (a float): pass 2",
    ),
    ("sample-bool-chains", lambda t: _run(num_chains=True), ValueError, "num_chains must be an integer >= 1, got True"),
    ("sample-float-steps", lambda t: _run(num_steps=10.0), ValueError, "num_steps must be an integer >= 1, got 10.0"),
    (
        "energy-value-batch-without-chain-dim",
        lambda t: _unbatched_value(),
        ValueError,
        "batch tensors must be [C, n, ...]: C = 1 chains (theta is [1, P]), n rows, got shapes [12, 3], [12]",
    ),
    (
        "evaluate-zero-rows",
        lambda t: sm.evaluate(_module_energy(), _chain(), tuple(v[:0] for v in _xy())),
        ValueError,
        "data has no rows",
    ),
    (
        "predictive-zero-batch-size",
        lambda t: sm.predictive(_module_energy(), _chain(), _xy()[0], batch_size=0),
        ValueError,
        "batch_size must be an integer >= 1, got 0",
    ),
    (
        "predictive-zero-rows",
        lambda t: sm.predictive(_module_energy(), _chain(), _xy()[0][:0]),
        ValueError,
        "inputs must hold at least one row",
    ),
    (
        "evaluate-float-batch-size",
        lambda t: sm.evaluate(_module_energy(), _chain(), _xy(), batch_size=2.5),
        ValueError,
        "batch_size must be an integer >= 1, got 2.5",
    ),
    (
        "dataset-empty",
        lambda t: _run(energy=_module_energy(), init=None, data=_EmptyDataset()),
        ValueError,
        "the Dataset (_EmptyDataset) is empty",
    ),
    (
        "module-on-meta-device",
        lambda t: _module_energy(nn.Linear(3, 2, device="meta")),
        ValueError,
        "are on the meta device (shapes without values): materialise the module first",
    ),
    (
        "data-on-meta-device",
        lambda t: _run(
            energy=_module_energy(),
            init=None,
            data=(torch.zeros(4, 3, device="meta"), torch.zeros(4, dtype=torch.long)),
        ),
        ValueError,
        "data tensor 0 is on the meta device",
    ),
    (
        "init-on-meta-device",
        lambda t: _run(init=torch.zeros(2, device="meta")),
        ValueError,
        "init is on the meta device",
    ),
    (
        "module-returns-a-tuple",
        lambda t: _run(energy=_module_energy(_Returns("tuple")), init=None, data=_xy()),
        ValueError,
        "the module returns a tuple, but the categorical likelihood needs one tensor: logits [n, K]",
    ),
    (
        "module-returns-a-dict",
        lambda t: _run(energy=_module_energy(_Returns("dict")), init=None, data=_xy()),
        ValueError,
        "the module returns a dict",
    ),
    (
        "module-output-transposed",
        lambda t: _run(energy=_module_energy(_Returns("transposed")), init=None, data=_xy()),
        ValueError,
        "the module's output on 4 row(s) has shape [2, 4]: its first dimension must be the 4 data rows",
    ),
    ("structured-copies-exceed-memory", _structured_memory, ValueError, "pass max_copies_per_call=500 (or less)"),
    # issue 22 §6: prediction and summary inputs
    (
        "summary-undeclared-2d-tensor",
        lambda t: sm.diagnostics.summary(torch.rand(5, 10)),
        ValueError,
        "would be 5 chains x 10 draws of one scalar. If it is, pass scalar=True",
    ),
    (
        "summary-max-rows-zero",
        lambda t: sm.diagnostics.summary(torch.rand(2, 10, 3), max_rows=0),
        ValueError,
        "max_rows must be an integer >= 1, got 0",
    ),
    (
        "predictive-per-draw-not-a-bool",
        lambda t: sm.predictive(_module_energy(), _chain(), _xy()[0], per_draw="yes"),
        TypeError,
        "per_draw must be True or False",
    ),
    (
        "predictive-log-density",
        lambda t: sm.predictive(sm.LogDensityEnergy(lambda th, b: -th.sum(), 26), _chain(), _xy()[0]),
        TypeError,
        "LogDensityEnergy has no model that predicts",
    ),
    (
        "evaluate-dataset-of-inputs-only",
        lambda t: sm.evaluate(_module_energy(), _chain(), sm.DataSource(torch.utils.data.TensorDataset(_xy()[0]))),
        ValueError,
        "data must be (inputs..., targets)",
    ),
    (
        "evaluate-not-data",
        lambda t: sm.evaluate(_module_energy(), _chain(), 3),
        ValueError,
        "data must be (inputs..., targets): a tuple of tensors, a TensorDataset, a map-style Dataset or a DataSource",
    ),
    # issue 23 item 8: with_prior(None) failed inside _set_prior with an AttributeError on None
    (
        "with-prior-none",
        lambda t: _module_energy().with_prior(None),
        TypeError,
        "with_prior takes a prior (any of structmc.priors",
    ),
    # issue 26 §3: the reference code's Gibbs defect is an explicit bool, random-walk sweeps only
    (
        "mwg-reference-defect-not-bool",
        lambda t: MetropolisWithinGibbs(round_robin(4, 2), 0.1, reference_defect="yes"),
        TypeError,
        "reference_defect must be True or False, got 'yes'",
    ),
    (
        "mwg-reference-defect-with-mala",
        lambda t: MetropolisWithinGibbs(round_robin(4, 2), 0.1, mala=True, reference_defect=True),
        ValueError,
        "use mala=False with it",
    ),
    # MAMBA's stochastic scores: per draw (App. B.2, the default) or the fixed subset, named explicitly
    (
        "tuning-score-batches-unknown",
        lambda t: sm.tuning.Problem(_energy(), torch.zeros(2), data=_xy(), score_data=4, score_batches="fresh"),
        ValueError,
        "score_batches must be 'per_draw'",
    ),
    (
        "tuning-score-batches-without-score-data",
        lambda t: sm.tuning.Problem(_energy(), torch.zeros(2), data=_xy(), score_batches="fixed"),
        ValueError,
        "score_batches='fixed' needs score_data=m",
    ),
    (
        "tuning-score-data-fractional",
        lambda t: sm.tuning.Problem(_energy(), torch.zeros(2), data=_xy(), score_data=2.5),
        ValueError,
        "score_data must be an integer >= 1, got 2.5",
    ),
]

CLI = [
    (
        "config-malformed-toml",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "num_steps = [1,\n")),
        CLIError,
        "cannot parse config",
    ),
    (
        "config-malformed-yaml",
        lambda t: sample_cli(t, "--config", config(t, "c.yaml", "lr: [1\n")),
        CLIError,
        "cannot parse config",
    ),
    (
        "config-malformed-json",
        lambda t: sample_cli(t, "--config", config(t, "c.json", '{"lr": 1e-4,}')),
        CLIError,
        "c.json: Expecting property name",
    ),
    (
        "config-not-a-table",
        lambda t: sample_cli(t, "--config", config(t, "c.json", "[1, 2]")),
        CLIError,
        "must hold a table of settings",
    ),
    (
        "config-string-steps",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", 'num_steps = "many"\n')),
        CLIError,
        "c.toml) must be an integer, got 'many' (a string)",
    ),
    (
        "config-infinite-steps",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "num_steps = inf\n")),
        CLIError,
        "num_steps (in",
    ),
    (
        "config-fractional-steps",
        lambda t: sample_cli(t, "--config", config(t, "c.yml", "num_steps: 2.5\n")),
        CLIError,
        "must be an integer, got 2.5",
    ),
    ("config-string-lr", lambda t: sample_cli(t, "--config", config(t, "c.yaml", "lr: fast\n")), CLIError, "lr (in"),
    (
        "config-bool-seed",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "seed = true\n")),
        CLIError,
        "seed (in",
    ),
    (
        "config-hidden-string",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", 'hidden = "wide"\n')),
        CLIError,
        "list of layer widths",
    ),
    (
        "config-hidden-zero",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "hidden = [0]\n")),
        CLIError,
        "layer widths must be >= 1",
    ),
    (
        "config-schedule-number",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "schedule = 3\n")),
        CLIError,
        "schedule (in",
    ),
    (
        "config-unknown-gradient",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", 'gradient = "sgd"\n')),
        CLIError,
        "unknown gradient 'sgd'",
    ),
    (
        "config-unknown-key",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "learning_rate = 0.1\n")),
        CLIError,
        "unknown keys",
    ),
    ("config-missing", lambda t: sample_cli(t, "--config", t / "nope.toml"), CLIError, "config file not found"),
    (
        "config-wrong-suffix",
        lambda t: sample_cli(t, "--config", config(t, "c.ini", "lr=1\n")),
        CLIError,
        "config must be .toml",
    ),
    ("flag-hidden-zero", lambda t: sample_cli(t, "--hidden", "0"), CLIError, "layer widths must be >= 1"),
    ("flag-hidden-words", lambda t: sample_cli(t, "--hidden", "a,b"), CLIError, "comma-separated layer widths"),
    ("flag-negative-seed", lambda t: sample_cli(t, "--seed", "-1"), CLIError, "--seed must be an integer >= 0"),
    ("flag-huge-seed", lambda t: sample_cli(t, "--seed", str(2**70)), CLIError, "--seed must be at most"),
    ("flag-zero-steps", lambda t: sample_cli(t, "--steps", "0"), CLIError, "--steps must be an integer >= 1"),
    ("flag-zero-chains", lambda t: sample_cli(t, "--chains", "0"), CLIError, "--chains must be"),
    ("flag-negative-lr", lambda t: sample_cli(t, "--lr", "-1"), CLIError, "lr must be positive"),
    (
        "flag-burn-in-too-long",
        lambda t: sample_cli(t, "--burn-in", "50"),
        CLIError,
        "--burn-in = 50 must be smaller than --steps = 20",
    ),
    ("flag-unknown-dataset", lambda t: sample_cli(t, "--dataset", "imagenet"), CLIError, "unknown data set 'imagenet'"),
    ("offline-download", _offline_download, CLIError, "pass --data-dir DIR, or set $STRUCTMC_DATA=DIR"),
    ("resume-nothing", lambda t: sample_cli(t, "--resume"), CLIError, "nothing to resume"),
    ("diagnose-not-a-run-folder", _diagnose_not_a_run, CLIError, "is not a structmc run folder"),
    ("diagnose-missing-folder", lambda t: cli("diagnose", t / "missing"), CLIError, "no such run folder"),
    (
        "experiment-unknown-preset",
        lambda t: cli("experiment", "demo", "--preset", "huge"),
        CLIError,
        "unknown preset 'huge'",
    ),
    ("experiment-unknown-name", lambda t: cli("experiment", "fig9"), CLIError, "unknown experiment 'fig9'"),
    ("tune-bad-budget", lambda t: cli("tune", "--budget", "30 minutes"), CLIError, "--budget takes"),
    ("tune-negative-seed", lambda t: cli("tune", "--seed", "-1"), CLIError, "--seed must be an integer >= 0"),
    # issue 21 A6/C: flags the sampler / model / likelihood does not use; run folders
    (
        "friction-with-sgld",
        lambda t: sample_cli(t, "--sampler", "sgld", "--friction", "0.1"),
        CLIError,
        "--friction is not used by --sampler sgld",
    ),
    (
        "alpha-with-sgld",
        lambda t: sample_cli(t, "--sampler", "sgld", "--alpha", "0.9"),
        CLIError,
        "--alpha is not used by --sampler sgld",
    ),
    (
        "a-with-sghmc",
        lambda t: sample_cli(t, "--sampler", "sghmc", "--a", "0.1"),
        CLIError,
        "--a is not used by --sampler sghmc",
    ),
    (
        "config-friction-with-sgld",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "friction = 0.1\n")),
        CLIError,
        "friction (in",
    ),
    (
        "hidden-with-linear",
        lambda t: sample_cli(t, "--model", "linear", "--hidden", "8"),
        CLIError,
        "--hidden is not used by --model linear",
    ),
    (
        "noise-std-for-classification",
        lambda t: sample_cli(t, "--noise-std", "0.5"),
        CLIError,
        "--noise-std (noise_std) is the observation noise of a regression model, but 'breast_cancer' is a binary",
    ),
    ("out-is-a-file", lambda t: _out_is_a_file(t), CLIError, "out is a file: pass a folder"),
    ("out-under-a-file", lambda t: _out_is_a_file(t, "sub"), CLIError, "which is a file: pass a folder"),
    (
        "resume-and-overwrite",
        lambda t: sample_cli(t, "--resume", "--overwrite"),
        CLIError,
        "--resume and --overwrite contradict each other",
    ),
    (
        "resume-after-kill-before-checkpoint",
        _resume_after_kill,
        CLIError,
        "stopped before its first checkpoint (no checkpoint); pass --overwrite instead of --resume",
    ),
    ("rerun-after-kill-before-checkpoint", _rerun_after_kill, CLIError, "stopped before its first checkpoint (in"),
    (
        "rerun-over-a-finished-run",
        _rerun_over_a_finished_run,
        CLIError,
        "is not empty (it holds a previous run): pass --resume to continue that run, or --overwrite to replace it",
    ),
    # issue 22 §6.6 / §6.8: batch fractions, config keys as flags, lengths named as flags, tune's budget
    (
        "flag-batch-size-fraction-above-1",
        lambda t: sample_cli(t, "--batch-size", "1.5"),
        CLIError,
        "--batch-size must be a number of rows (e.g. 32) or a fraction of the training set in (0, 1]",
    ),
    (
        "config-batch-size-zero",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "batch-size = 0\n")),
        CLIError,
        "batch-size (in",
    ),
    (
        "config-setting-twice",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "chains = 1\nnum_chains = 2\n")),
        CLIError,
        "sets num_chains twice, as 'chains' and 'num_chains'",
    ),
    (
        "flag-thin-keeps-no-draw",
        lambda t: sample_cli(t, "--thin", "20"),
        CLIError,
        "no draw would be kept with --steps = 20, --burn-in = 5 and --thin = 20",
    ),
    ("tune-budget-too-small", lambda t: cli("tune", "--budget", "600it"), CLIError, "or lower --thin / --min-samples"),
    ("tune-zero-thin", lambda t: cli("tune", "--thin", "0"), CLIError, "--thin must be an integer >= 1"),
    ("tune-map-share-one", lambda t: cli("tune", "--map-share", "1"), CLIError, "--map-share must lie in (0, 1)"),
    # issue 25: many chains on an executor (structmc sample --executor), refused before any compute
    (
        "sample-executor-unknown",
        lambda t: sample_cli(t, "--executor", "bogus"),
        CLIError,
        "--executor: unknown executor 'bogus'; choose serial (the default), process, dask, ray",
    ),
    (
        "sample-executor-ray-not-installed",
        lambda t: _without("ray", sample_cli, t, "--executor", "ray"),
        CLIError,
        'needs ray, which is not installed: pip install "structmc[ray]"',
    ),
    (
        "sample-executor-dask-not-installed",
        lambda t: _without("distributed", sample_cli, t, "--executor", "tcp://10.0.0.1:8786"),
        CLIError,
        'needs dask[distributed], which is not installed: pip install "structmc[dask]"',
    ),
    (
        "sample-executor-address-without-port",
        lambda t: sample_cli(t, "--executor", "tcp://10.0.0.1"),
        CLIError,
        "is not a cluster address: expected tcp://host:port",
    ),
    (
        "sample-workers-without-executor",
        lambda t: sample_cli(t, "--workers", "4"),
        CLIError,
        "--workers sets the workers of --executor process, dask or ray",
    ),
    (
        "sample-workers-zero",
        lambda t: sample_cli(t, "--executor", "process", "--workers", "0"),
        CLIError,
        "--workers must be an integer >= 1, got 0",
    ),
    (
        "config-executor-not-a-string",
        lambda t: sample_cli(t, "--config", config(t, "c.toml", "executor = 4\n")),
        CLIError,
        "must be a string, got 4 (int)",
    ),
]

CASES = [pytest.param(fn, exc, phrase, id=f"api:{name}") for name, fn, exc, phrase in API] + [
    pytest.param(fn, exc, phrase, id=f"cli:{name}") for name, fn, exc, phrase in CLI
]


@pytest.mark.parametrize("do, exc, phrase", CASES)
def test_bad_input_is_a_clear_error(tmp_path, do, exc, phrase):
    with pytest.raises(exc, match=re.escape(phrase)):
        do(tmp_path)


def test_table_size():
    assert len(API) >= 40 and len(CLI) >= 20


# ---------------------------------------------------------------------------------------
# issue 21 A6/C: what the new checks must still accept
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.int32, torch.int16, torch.uint8])
def test_integer_labels_of_any_width_give_the_int64_chain(dtype):
    """int32 labels passed check_data and then failed mid-run inside cross_entropy; now they are
    read as int64 class indices: the chain (one chain: the hot path; two: the vmapped one) and
    evaluate() are exactly those of int64 labels."""
    x, y = _xy(24, classes=2)
    energy = _module_energy()  # one set of initial weights for every run
    for chains in (1, 2):
        runs = [
            sm.sample(
                energy,
                None,
                sm.SGLD(1e-3),
                8,
                data=(x, labels),
                batch_size=6,
                seed=3,
                num_chains=chains,
                progress=False,
            )
            for labels in (y, y.to(dtype))
        ]
        assert torch.equal(runs[0].samples, runs[1].samples)
    energy = energy.with_num_data(24)
    assert sm.evaluate(energy, runs[0], (x, y.to(dtype)))["pooled"] == sm.evaluate(energy, runs[0], (x, y))["pooled"]


def test_soft_labels_that_are_probabilities_are_accepted():
    x, y = _xy(12, classes=2)
    smooth = torch.nn.functional.one_hot(y, 2).float() * 0.8 + 0.1  # label smoothing: rows sum to 1
    chain = sm.sample(_module_energy(), None, sm.SGLD(1e-3), 5, data=(x, smooth), progress=False)
    assert torch.isfinite(chain.samples).all()


def test_integers_of_other_types_are_taken_as_counts():
    import numpy as np

    chain = _run(num_chains=np.int64(2), num_steps=torch.tensor(4))
    assert chain.samples.shape == (2, 4, 2)


def test_old_checkpoints_without_a_dtype_still_resume():
    """The chain's dtype is compared only when the checkpoint records it (structmc before issue 21)."""
    from structmc.run import Run, _check_resume_compatible

    new = Run(_energy(), torch.zeros(2), sm.SGLD(0.1)).settings()
    assert new["dtype"] == "float32"
    old = {k: v for k, v in new.items() if k != "dtype"}
    _check_resume_compatible(old, new)  # no error
    with pytest.raises(ValueError, match="the chain in the checkpoint is float64 but this run's is float32"):
        _check_resume_compatible({**old, "dtype": "float64"}, new)


def test_a_chain_of_the_same_model_is_still_evaluated():
    energy, chain = _module_energy(), _chain()
    out = sm.evaluate(energy.with_num_data(12), chain, _xy())
    assert out["num_draws"] == chain.num_draws and 0 <= out["pooled"]["accuracy"] <= 1
    assert sm.predictive(energy, chain.samples[0, 0], _xy()[0])["probs"].shape == (12, 2)  # one draw [P]


def test_structured_copies_that_fit_run_and_unknown_memory_warns():
    """The value named by the memory check runs (same energy and gradient as all copies at
    once); where the free memory is unknown a large evaluation warns instead."""
    from structmc.structured import energies

    theta = torch.randn(1, 1000, generator=torch.Generator().manual_seed(0))
    batch = None
    out = []
    with mock.patch.object(energies, "available_memory", return_value=20_000_000):
        for per_call in (500, 1000):
            s = StructuredEnergy(_energy(1000), round_robin(1000, 1000), 10, max_copies_per_call=per_call, seed=1)
            if per_call == 1000:
                with pytest.raises(ValueError, match="max_copies_per_call=500"):
                    s.start(theta)
                with (
                    mock.patch.object(energies, "available_memory", return_value=None),
                    mock.patch.object(energies, "UNKNOWN_MEMORY_WARN", 1_000_000),
                    pytest.warns(UserWarning, match=r"pass max_copies_per_call=31 \(about"),
                ):
                    s.start(theta)
            else:
                s.start(theta)
            s.observe(theta + 0.1)
            out.append(s.value_and_grad(theta, batch))
    assert torch.allclose(out[0][0], out[1][0]) and torch.allclose(out[0][1], out[1][1])


def test_cli_refuses_only_flags_the_sampler_or_model_does_not_take():
    from structmc.cli import _refuse_unused

    s = {"sampler": "sghmc", "model": "mlp"}
    _refuse_unused(
        s,
        {
            "friction": "--friction",
            "num_leapfrog": "--num-leapfrog",
            "hidden": "--hidden",
            "activation": "--activation",
            "temperature": "--temperature",
        },
    )  # all taken: no error
    _refuse_unused({"sampler": "sgld", "model": "linear"}, {})  # defaults for other samplers are not "given"
    with pytest.raises(SystemExit, match="--activation is not used by --model linear"):
        _refuse_unused({"sampler": "sgld", "model": "linear"}, {"activation": "--activation"})


# ---------------------------------------------------------------------------------------
# the CLI's error convention
# ---------------------------------------------------------------------------------------
def test_debug_flag_and_env_show_the_traceback(tmp_path):
    argv = ["sample", "--quiet", "--lr", "-1", "--out", str(tmp_path / "o")]
    with pytest.raises(ValueError, match="lr must be positive"):
        main(["--debug", *argv])
    with mock.patch.dict(os.environ, {"STRUCTMC_DEBUG": "1"}), pytest.raises(ValueError, match="lr must be positive"):
        main(argv)


def test_real_bugs_are_not_swallowed(tmp_path):
    with (
        mock.patch("structmc.cli.cmd_sample", side_effect=RuntimeError("a bug")),
        pytest.raises(RuntimeError, match="a bug"),
    ):
        main(["sample", "--quiet"])


STRUCTMC = Path(sys.executable).with_name("structmc")


@pytest.mark.skipif(not STRUCTMC.exists(), reason="the structmc console script is not installed")
def test_console_script_exits_2_with_one_line(tmp_path):
    proc = subprocess.run(
        [str(STRUCTMC), "sample", "--steps", "0", "--quiet", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert proc.stderr.strip() == "structmc: error: --steps must be an integer >= 1, got 0"


@pytest.mark.skipif(not STRUCTMC.exists(), reason="the structmc console script is not installed")
def test_same_seed_same_draws_across_processes(tmp_path):
    """``--seed`` fixes the model's initial weights and the chain: two processes agree."""
    draws = []
    for k in range(2):
        out = tmp_path / f"r{k}"
        proc = subprocess.run(
            [
                str(STRUCTMC),
                "sample",
                "--dataset",
                "breast_cancer",
                "--model",
                "linear",
                "--steps",
                "50",
                "--burn-in",
                "10",
                "--chains",
                "1",
                "--quiet",
                "--out",
                str(out),
                "--seed",
                "3",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        chunks = sorted((out / "run" / "samples").glob("chunk_*.pt"))
        assert chunks
        draws.append([torch.load(c, weights_only=True) for c in chunks])
    assert len(draws[0]) == len(draws[1])
    for a, b in zip(*draws):
        assert torch.equal(a["samples"], b["samples"]) and torch.equal(a["draw_steps"], b["draw_steps"])
