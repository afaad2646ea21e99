"""Scale-adapted SGHMC (Springenberg et al. 2016, eqs. 8-10): the fast flat update against a
readable per-coordinate reference, and the stationary law after adaptation against the
exact discretised law of SGHMC with the adapted per-coordinate step."""

from __future__ import annotations

import math

import pytest
import torch
from support.exact import gaussian_sghmc_recursion

import structmc

F64 = torch.float64
H = torch.tensor([1.0, 16.0], dtype=F64)  # U(θ) = Σ h_i θ_i² / 2


def log_prob(theta, batch=None):
    return -0.5 * (H * theta * theta).sum(-1)


def reference_chain(theta0, grads_of, lr, friction, adapt_steps, steps, seed, correction=True, eps=1e-6):
    """The equations written out per coordinate with Python floats (the readable path)."""
    g = torch.Generator().manual_seed(seed)
    C, P = theta0.shape
    theta = theta0.tolist()
    v = [[0.0] * P for _ in range(C)]
    tau = [[1.0] * P for _ in range(C)]
    gbar = [[1.0] * P for _ in range(C)]
    vhat = [[1.0] * P for _ in range(C)]
    out = []
    for t in range(steps):
        grad = grads_of(torch.tensor(theta, dtype=F64)).tolist()
        noise = torch.randn((C, P), generator=g, dtype=F64).tolist()
        for c in range(C):
            for i in range(P):
                d = grad[c][i]
                if t < adapt_steps:
                    tau[c][i] = tau[c][i] - tau[c][i] * gbar[c][i] ** 2 / (vhat[c][i] + eps) + 1
                    inv = 1 / (tau[c][i] + eps)
                    gbar[c][i] += (d - gbar[c][i]) * inv
                    vhat[c][i] += (d * d - vhat[c][i]) * inv
                step = lr / (math.sqrt(vhat[c][i]) + eps)
                var = 2 * friction * step - (lr * lr if correction else 0.0)
                v[c][i] = v[c][i] * (1 - friction) - step * d + math.sqrt(max(var, 0.0)) * noise[c][i]
                theta[c][i] += v[c][i]
        out.append([row[:] for row in theta])
    return torch.tensor(out, dtype=F64), torch.tensor(vhat, dtype=F64)


@pytest.mark.parametrize("correction", [True, False])
def test_flat_update_matches_the_per_coordinate_reference(correction):
    theta0 = torch.tensor([[1.0, -0.3], [0.2, 0.5], [-2.0, 0.1]], dtype=F64)
    lr, friction, adapt, steps = 0.01, 0.1, 7, 15
    ref, ref_vhat = reference_chain(
        theta0, lambda th: H * th, lr, friction, adapt, steps, seed=3, correction=correction
    )
    sampler = structmc.ScaleAdaptedSGHMC(lr, friction, adapt_steps=adapt, noise_correction=correction)
    g = torch.Generator().manual_seed(3)
    state = sampler.prepare(None).init(theta0, g)
    got = []
    for _ in range(steps):
        state = sampler.update(state, H * state.theta, lr, g)
        got.append(state.theta.clone())
    torch.testing.assert_close(torch.stack(got), ref, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(state.v_hat, ref_vhat, rtol=1e-12, atol=0)
    assert state.step == steps


def _exact_var(h, step, friction, noise_var):
    return gaussian_sghmc_recursion(h, step, friction, noise_var).moments()[1][0, 0]


@pytest.mark.parametrize("correction", [True, False])
def test_stationary_law_is_sghmc_with_the_adapted_step(correction):
    """Once V̂ is fixed, each coordinate of each chain is SGHMC with step η/(√V̂+ε) and the
    noise rule, so E[θ²] is known exactly per chain. Chains get different fixed V̂ (set after
    ``init`` with ``adapt_steps=0``: the adaptation itself is checked against the reference
    above); the pooled ratio E[θ²]/exact is 1 within 4.5 standard errors, and the laws of
    wrong updates (no preconditioner, the other noise rule) lie more than 15 away."""
    C, burn, keep = 128, 500, 4000
    lr, friction = 0.05, 0.5
    g = torch.Generator().manual_seed(0)
    v_hat = (H.sqrt() * (0.5 + 1.5 * torch.rand(C, 2, generator=g, dtype=F64))).square()
    init = torch.randn(C, 2, generator=g, dtype=F64) / H.sqrt()
    run = structmc.Run(
        log_prob,
        init,
        structmc.ScaleAdaptedSGHMC(lr, friction, adapt_steps=0, noise_correction=correction),
        num_chains=C,
        seed=1,
    )
    run.state.v_hat.copy_(v_hat)
    second = run.sample(burn + keep, burn_in=burn).samples.square().mean(1)  # [C, 2]

    step = lr / (v_hat.sqrt() + 1e-6)
    right = (lambda s: max(2 * friction * s - lr * lr, 0.0)) if correction else (lambda s: 2 * friction * s)
    wrong = (lambda s: 2 * friction * s) if correction else (lambda s: max(2 * friction * s - lr * lr, 0.0))

    def exact(steps, noise):
        return torch.tensor(
            [
                [_exact_var(float(H[i]), float(steps[c, i]), friction, noise(float(steps[c, i]))) for i in range(2)]
                for c in range(C)
            ],
            dtype=F64,
        )

    truth = exact(step, right)
    r = second / truth
    mean, se = r.mean(0), r.std(0) / math.sqrt(C)
    assert torch.all((mean - 1).abs() < 4.5 * se), (mean, se)
    for name, law in [
        ("no preconditioner", exact(torch.full_like(step, lr), right)),
        ("the other noise rule", exact(step, wrong)),
    ]:
        gap = ((law - truth) / truth).mean(0).abs()
        assert gap.max() > 15 * se.max(), (name, gap, se)


def test_validation_and_config_round_trip():
    with pytest.raises(ValueError, match="friction"):
        structmc.ScaleAdaptedSGHMC(1e-3, friction=0.0)
    with pytest.raises(ValueError, match="adapt_steps"):
        structmc.ScaleAdaptedSGHMC(1e-3, adapt_steps=-1)
    with pytest.raises(ValueError, match="eps"):
        structmc.ScaleAdaptedSGHMC(1e-3, eps=0.0)
    from structmc.samplers import sampler_from_config

    s = structmc.ScaleAdaptedSGHMC(1e-4, 0.05, adapt_steps=10, noise_correction=False)
    assert sampler_from_config(s.config()).config() == s.config()


def test_resume_gives_the_uninterrupted_chain(tmp_path):
    kw = dict(num_chains=2, seed=4, progress=False)
    init = torch.tensor([0.3, -0.2], dtype=F64)
    make = lambda: structmc.ScaleAdaptedSGHMC(0.01, 0.1, adapt_steps=5)  # noqa: E731
    whole = structmc.sample(log_prob, init, make(), 20, **kw)
    structmc.sample(log_prob, init, make(), 8, out_dir=tmp_path, checkpoint_every=4, **kw)
    resumed = structmc.sample(log_prob, init, make(), 20, out_dir=tmp_path, checkpoint_every=4, resume=True, **kw)
    torch.testing.assert_close(resumed.samples, whole.samples, rtol=0, atol=0)
