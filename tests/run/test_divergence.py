"""The run loop: a non-finite energy stops the run with a DivergenceError that keeps the draws."""

from __future__ import annotations

import math

import pytest
import torch
from support.runs import ALL_SAMPLERS, gaussian_log_prob

import structmc as sm


@pytest.mark.parametrize("chunk_draws, check_every", [(100, 32), (1, 32), (2, 5), (100, 1)])
@pytest.mark.parametrize("make", ALL_SAMPLERS)
def test_divergence_names_step_and_sampler_and_keeps_draws(tmp_path, make, chunk_draws, check_every):
    def log_prob(theta, batch):  # finite for 7 iterations, then NaN
        log_prob.calls += 1
        bad = log_prob.calls > 7 * sampler.num_leapfrog
        return -0.5 * (theta * theta).sum() + (math.nan if bad else 0.0)

    log_prob.calls = 0
    sampler = make()
    with pytest.raises(sm.DivergenceError, match=rf"{sampler.name}: non-finite energy at iteration 8") as info:
        sm.sample(
            log_prob,
            torch.ones(2),
            sampler,
            20,
            thin=2,
            out_dir=tmp_path,
            chunk_draws=chunk_draws,
            check_every=check_every,
            progress=False,
        )
    err = info.value
    assert err.step == 8
    assert err.chain.samples.shape == (1, 3, 2)  # draws after iterations 2, 4, 6
    assert err.chain.draw_steps.tolist() == [2, 4, 6]
    assert err.chain.info["energy"].shape[-1] == 7  # records of iterations 1..7, all finite
    assert bool(torch.isfinite(err.chain.info["energy"]).all())
    on_disk = sm.load_chain(tmp_path)  # nothing non-finite was written, though found late
    assert torch.equal(on_disk.samples, err.chain.samples) and on_disk.draw_steps.tolist() == [2, 4, 6]
    assert (tmp_path / "diverged.json").exists()


def test_divergence_of_a_too_large_step():
    # the blow-up watch warns at iteration 64, long before the energy overflows
    with (
        pytest.raises(sm.DivergenceError, match="sgld: non-finite") as info,
        pytest.warns(UserWarning, match="blowing up.*iteration 64"),
    ):
        sm.sample(gaussian_log_prob, torch.ones(2), sm.SGLD(5.0), 5000, progress=False)
    assert 1 < info.value.step < 5000
    assert bool(torch.isfinite(info.value.chain.samples).all())
