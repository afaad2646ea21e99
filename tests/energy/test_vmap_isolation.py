"""The vmapped energy paths do not go through other libraries' patches of ``torch.func.vmap``.

Issue 22 §3: tensordict (imported by ``posteriors``) replaces ``_process_batched_inputs``,
``_create_batched_inputs`` and ``_unwrap_batched`` of ``torch._functorch.vmap`` process-wide
with TensorDict-aware versions: the same results for tensors, +163 Python calls per step of a
2-chain MLP run (9,291 -> 10,921 per 10 steps), ~6 µs more per vmap call. structmc's ``vmap``
(``structmc._vmap``) runs a private copy of torch's own module, so the patched helpers are never
called. Counted, not timed.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import textwrap

import pytest
import torch
import torch._functorch.vmap as functorch_vmap
from torch import nn

import structmc as sm
from structmc.energy import LogDensityEnergy
from structmc.energy import log_density as log_density_module
from structmc.energy import paths as module_paths  # ModuleEnergy's vmapped evaluation

HELPERS = ("_process_batched_inputs", "_create_batched_inputs", "_unwrap_batched")


def _patch_helpers(monkeypatch) -> list[str]:
    """Wrap the three helpers as tensordict does (same results), recording each call."""
    calls: list[str] = []
    for name in HELPERS:
        original = getattr(functorch_vmap, name)

        def patched(*args, _original=original, _name=name, **kwargs):
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(functorch_vmap, name, patched)
    return calls


def _energies():
    g = torch.Generator().manual_seed(0)
    C, n = 3, 16
    X = torch.randn(C, n, 5, generator=g)
    y = torch.randint(0, 3, (C, n), generator=g)
    torch.manual_seed(0)
    module = sm.ModuleEnergy(nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)), "categorical", num_data=100)
    soft = torch.softmax(torch.randn(C, n, 3, generator=g), -1)  # soft labels: vmap(log_lik) too
    density = LogDensityEnergy(lambda th, b: -0.5 * (th * th).sum() + (th[0] * b[0]).sum(), dim=4)
    return [
        (module, torch.randn(C, module.space.dim, generator=g), (X, y)),
        (module, torch.randn(C, module.space.dim, generator=g), (X, soft)),
        (density, torch.randn(C, 4, generator=g), (torch.randn(C, n, generator=g),)),
    ]


def test_vmapped_energies_skip_patched_functorch_helpers(monkeypatch):
    cases = _energies()
    calls = _patch_helpers(monkeypatch)
    ours = [energy.value_and_grad(theta, batch) for energy, theta, batch in cases]
    assert calls == []  # before the fix: every evaluation went through all three
    # bit for bit what torch.func.vmap (through the patched helpers) gives
    for module in (log_density_module, module_paths):
        monkeypatch.setattr(module, "vmap", torch.func.vmap)
    for (energy, theta, batch), (value, grad) in zip(cases, ours):
        ref_value, ref_grad = energy.value_and_grad(theta, batch)
        assert torch.equal(value, ref_value) and torch.equal(grad, ref_grad)
    assert set(calls) == set(HELPERS)  # the reference path did go through them


@pytest.mark.skipif(importlib.util.find_spec("tensordict") is None, reason="tensordict is not installed")
def test_sampling_after_importing_tensordict_calls_none_of_its_code():
    """The real thing: tensordict imported first, then 2-chain SGLD steps of a module energy
    and of a log density call no function defined in tensordict."""
    code = textwrap.dedent("""
        import sys, warnings
        warnings.simplefilter("ignore")
        import tensordict  # patches torch._functorch.vmap
        import torch._functorch.vmap as v
        assert v._process_batched_inputs.__module__.startswith("tensordict"), v._process_batched_inputs.__module__
        import torch
        from torch import nn
        import structmc as sm

        X, y = torch.randn(64, 5), torch.randint(0, 3, (64,))
        module = sm.ModuleEnergy(nn.Sequential(nn.Linear(5, 4), nn.Tanh(), nn.Linear(4, 3)), "categorical")
        density = sm.LogDensityEnergy(lambda th, b: -0.5 * (th * th).sum(), dim=3)
        runs = [sm.Run(module, None, sm.SGLD(1e-3), data=(X, y), batch_size=16, num_chains=2),
                sm.Run(density, torch.zeros(2, 3), sm.SGLD(1e-2), num_chains=2)]
        for run in runs:
            run.step()
        seen = set()
        def profile(frame, event, arg):
            if event == "call" and "tensordict" in frame.f_code.co_filename:
                seen.add(frame.f_code.co_name)
        sys.setprofile(profile)
        for run in runs:
            for _ in range(3):
                run.step()
        sys.setprofile(None)
        print(sorted(seen))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]", out.stdout
