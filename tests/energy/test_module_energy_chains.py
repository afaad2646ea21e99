"""ModuleEnergy inside the run loop: paths agree in float64, the user's module is untouched,
BatchNorm buffers are per chain and not sampled."""

from __future__ import annotations

import torch
from support.runs import mlp_energy
from torch import nn

import structmc as sm


def test_module_paths_agree_float64():
    energy, (X, y) = mlp_energy()
    energy.to(dtype=torch.float64)
    energy = energy.with_num_data(90)
    g = torch.Generator().manual_seed(0)
    theta = energy.initial_position().expand(3, -1) + 0.1 * torch.randn(
        3, energy.space.dim, generator=g, dtype=torch.float64
    )
    batch = (X.double()[:30].expand(3, 30, 4), y[:30].expand(3, 30))
    v_ref, g_ref = energy.reference_value_and_grad(theta, batch)
    v_vm, g_vm = energy.value_and_grad(theta, batch)
    assert torch.allclose(v_vm, v_ref, atol=1e-10) and torch.allclose(g_vm, g_ref, atol=1e-10)
    for c in range(3):
        v1, g1 = energy.value_and_grad(theta[c : c + 1], tuple(t[c : c + 1] for t in batch))
        assert torch.allclose(v1, v_ref[c : c + 1], atol=1e-10) and torch.allclose(g1, g_ref[c : c + 1], atol=1e-10)
    assert torch.allclose(energy.value(theta, batch), v_ref, atol=1e-10)


def test_loop_chain_evaluation_equals_vmap_and_samples_the_same_structured_chain():
    """``chain_evaluation="loop"`` (the GPU-friendly path for convolutions) gives the vmapped
    values and gradients for several chains, and the same Sd-SGLD chain (K copies)."""
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.Flatten(), nn.Linear(3 * 4 * 4, 3))
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(40, 1, 6, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (40,), generator=g)
    energies = {mode: sm.ModuleEnergy(net.double(), num_data=40, chain_evaluation=mode) for mode in ("vmap", "loop")}
    theta = energies["vmap"].initial_position() + 0.1 * torch.randn(
        3, energies["vmap"].space.dim, generator=g, dtype=torch.float64
    )
    batch = (X[:10].expand(3, 10, 1, 6, 6), y[:10].expand(3, 10))
    (v_vm, g_vm), (v_lp, g_lp) = (energies[m].value_and_grad(theta, batch) for m in ("vmap", "loop"))
    torch.testing.assert_close(v_lp, v_vm, rtol=0, atol=1e-10)
    torch.testing.assert_close(g_lp, g_vm, rtol=0, atol=1e-10)
    from structmc.structured import BernoulliMask, StructuredEnergy, round_robin

    chains = {}
    for mode, e in energies.items():
        sd = StructuredEnergy(
            e, round_robin(e.space.dim, e.space.dim), 20, mask=BernoulliMask(0.5), num_copies=2, seed=1
        )
        chains[mode] = sm.sample(sd, None, sm.SGLD(1e-4), 30, data=(X, y), batch_size=10, seed=3, progress=False)
    torch.testing.assert_close(chains["loop"].samples, chains["vmap"].samples, rtol=0, atol=1e-9)


def test_chain_evaluation_is_checked_and_survives_pickling():
    import pickle

    import pytest

    with pytest.raises(ValueError, match="chain_evaluation must be 'vmap' or 'loop'"):
        sm.ModuleEnergy(nn.Linear(2, 2), chain_evaluation="serial")
    e = pickle.loads(pickle.dumps(sm.ModuleEnergy(nn.Linear(2, 2), chain_evaluation="loop")))
    assert e.chain_evaluation == "loop"


def test_module_energy_does_not_touch_the_users_module():
    net = nn.Linear(3, 2)
    before = [p.detach().clone() for p in net.parameters()]
    energy = sm.ModuleEnergy(net)
    sm.sample(energy, None, sm.SGLD(0.1), 5, data=(torch.randn(10, 3), torch.randint(0, 2, (10,))), progress=False)
    assert all(torch.equal(a, p) for a, p in zip(before, net.parameters()))


def test_batchnorm_buffers_are_per_chain_and_not_sampled():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4), nn.ReLU(), nn.Linear(4, 2))
    energy = sm.ModuleEnergy(net)
    assert "1.running_mean" not in energy.space.names
    X, y = torch.randn(40, 3) + 2.0, torch.randint(0, 2, (40,))
    run = sm.Run(energy, None, sm.SGLD(1e-3), data=(X, y), batch_size=10, num_chains=2)
    chain = run.sample(10)
    assert chain.samples.shape == (2, 10, energy.space.dim)
    means = [run.energy.chain_buffers(c)["1.running_mean"] for c in range(2)]  # the run's own copy
    assert not torch.equal(means[0], means[1])  # each chain updated its own statistics
    assert bool((means[0] > 0.1).any())


def test_batched_likelihoods_equal_vmapped_ones_bit_for_bit():
    """log_lik_chains (no vmap) gives exactly vmap(log_lik), values and gradients: the
    vmapped module path may use either without changing a chain."""
    import pytest
    from torch.func import vmap

    from structmc.energy import make_likelihood

    g = torch.Generator().manual_seed(0)
    cases = [
        ("categorical", (8, 500, 10), lambda s: torch.randint(0, 10, s[:2], generator=g)),
        ("categorical", (3, 5000, 10), lambda s: torch.randint(0, 10, s[:2], generator=g)),
        ("gaussian", (3, 5000, 1), lambda s: torch.randn(s[:2], generator=g)),
        ("categorical", (3, 7, 4, 5), lambda s: torch.randint(0, 4, (3, 7, 5), generator=g)),  # [n, K, L]
        ("categorical", (2, 9, 6), lambda s: torch.softmax(torch.randn(s, generator=g), -1)),  # soft labels
        ("gaussian", (5, 21, 1), lambda s: torch.randn(s[:2], generator=g)),
        ("gaussian", (2, 10, 3), lambda s: torch.randn(s, generator=g)),
    ]
    for name, shape, target in cases:
        lik = make_likelihood(name, noise_std=0.7 if name == "gaussian" else None)
        assert lik.log_lik_chains is not None
        for dtype in (torch.float32, torch.float64):
            out = torch.randn(shape, generator=g, dtype=dtype).requires_grad_()
            y = target(shape)
            y = y.to(dtype) if y.is_floating_point() else y
            a = vmap(lik.log_lik)(out, y)
            b = lik.log_lik_chains(out, y)
            (ga,), (gb,) = torch.autograd.grad(a.sum(), out), torch.autograd.grad(b.sum(), out)
            assert a.shape == b.shape == (shape[0],)
            assert torch.equal(a, b) and torch.equal(ga, gb), (name, shape, dtype)
    with pytest.raises(ValueError):
        make_likelihood("gaussian")
