"""The same code paths on a CUDA device (skipped where there is none, e.g. in CI)."""

from __future__ import annotations

import pytest
import torch
from support.runs import Interrupt, interrupt_at
from torch import nn

import structmc as sm
from structmc.structured import BernoulliMask, ChainHistory, StructuredEnergy, by_neuron

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device on this machine")


def problem(device, dtype=torch.float32):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)).to(device=device, dtype=dtype)
    g = torch.Generator().manual_seed(0)
    X = torch.randn(300, 6, generator=g, dtype=dtype)
    y = torch.randint(0, 3, (300,), generator=g)
    return sm.ModuleEnergy(net, "categorical", prior_std=1.0), (X, y)


def test_module_energy_on_cuda_matches_cpu():
    cpu, (X, y) = problem("cpu", torch.float64)
    gpu, _ = problem("cuda", torch.float64)
    cpu, gpu = cpu.with_num_data(300), gpu.with_num_data(300)
    theta = cpu.initial_position().expand(3, -1) + 0.01 * torch.randn(3, cpu.space.dim, dtype=torch.float64)
    batch = (X[:50].expand(3, 50, 6), y[:50].expand(3, 50))
    v, g = cpu.value_and_grad(theta, batch)
    vg, gg = gpu.value_and_grad(theta.cuda(), tuple(t.cuda() for t in batch))
    assert torch.allclose(vg.cpu(), v, atol=1e-9) and torch.allclose(gg.cpu(), g, atol=1e-9)
    v1, g1 = gpu.value_and_grad(theta[:1].cuda(), tuple(t[:1].cuda() for t in batch))
    assert torch.allclose(g1.cpu(), g[:1], atol=1e-9)


@pytest.mark.parametrize(
    "make",
    [
        lambda: sm.SGLD(1e-3),
        lambda: sm.PSGLD(1e-4),
        lambda: sm.SGHMC(1e-4, friction=0.1),
        lambda: sm.SGNHT(1e-4, a=0.1),
    ],
)
@pytest.mark.parametrize("num_chains", [1, 4])
def test_samplers_run_and_reproduce_on_cuda(make, num_chains):
    energy, data = problem("cuda")
    run = lambda: sm.sample(
        energy, None, make(), 50, data=data, batch_size=32, num_chains=num_chains, seed=3, progress=False
    )
    a, b = run(), run()
    assert a.samples.is_cuda and torch.equal(a.samples, b.samples)
    assert bool(torch.isfinite(a.samples).all())


def test_cv_structured_checkpoint_and_predictive_on_cuda(tmp_path):
    energy, data = problem("cuda")
    centre = sm.find_map(energy, energy.initial_position(), data=data, batch_size=50, num_steps=100)
    make = lambda: StructuredEnergy(
        energy, by_neuron(energy.space), ChainHistory(30), mask=BernoulliMask(0.5), num_copies=4, seed=1
    )
    kw = dict(data=data, batch_size=32, num_chains=2, seed=0, progress=False, gradient=sm.ControlVariate(centre))
    full = sm.sample(make(), centre, sm.SGHMC(1e-4, friction=0.1), 40, **kw)

    with pytest.raises(Interrupt):
        sm.sample(
            make(),
            centre,
            sm.SGHMC(1e-4, friction=0.1),
            40,
            out_dir=tmp_path,
            checkpoint_every=10,
            callback=interrupt_at(23),
            **kw,
        )
    resumed = sm.sample(
        make(), centre, sm.SGHMC(1e-4, friction=0.1), 40, out_dir=tmp_path, checkpoint_every=10, resume=True, **kw
    )
    assert torch.equal(resumed.samples, full.samples)
    probs = sm.predictive(energy, full, data[0][:20])["probs"]
    assert probs.is_cuda and torch.allclose(probs.sum(-1), torch.ones(20, device="cuda"), atol=1e-5)


def test_cpu_init_moves_to_a_cuda_base_under_a_structured_energy():
    """Bug 3 (0.1.0): the run loop moved init to the energy's device only for a ModuleEnergy
    (isinstance), so a CPU init under a StructuredEnergy with a CUDA base stayed on the CPU."""
    energy, data = problem("cuda")
    s = StructuredEnergy(energy, by_neuron(energy.space), ChainHistory(10))
    init = energy.initial_position().cpu()
    chain = sm.sample(s, init, sm.SGLD(1e-4), 5, data=data, batch_size=32, num_chains=2, progress=False)
    assert chain.samples.is_cuda and bool(torch.isfinite(chain.samples).all())


@pytest.mark.parametrize("num_chains", [1, 3])
def test_blocked_gibbs_on_cuda_incremental_equals_generic(num_chains):
    from structmc.gibbs import MetropolisWithinGibbs
    from structmc.models import MLP
    from structmc.partitions import by_finer_nodes

    torch.manual_seed(0)
    energy = sm.ModuleEnergy(MLP((6, 4, 3), "sigmoid").to("cuda", torch.float64), "categorical", prior_std=3.0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(200, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (200,), generator=g)
    chains = [
        sm.sample(
            energy,
            None,
            MetropolisWithinGibbs(by_finer_nodes(energy.space, 3), 0.05, evaluator=ev),
            6,
            data=(X, y),
            batch_size=50,
            batching="stratified",
            num_chains=num_chains,
            seed=1,
            progress=False,
        )
        for ev in ("generic", "incremental")
    ]
    assert chains[0].samples.is_cuda and torch.equal(chains[0].samples, chains[1].samples)
    assert torch.equal(chains[0].info["accept"], chains[1].info["accept"])


def test_distributed_run_on_one_gpu_over_nccl_is_the_plain_chain(tmp_path):
    """A one-rank NCCL process group on the GPU: the distributed path (share stream, weighted
    all-reduce, checksums, rank 0's folder and the broadcasts NCCL carries on the device) gives
    the plain CUDA chain; the CPU chain agrees to float rounding."""
    import torch.distributed as dist

    if not dist.is_nccl_available():
        pytest.skip("this PyTorch build has no NCCL")
    energy, (X, y) = problem("cuda", torch.float64)
    options = dict(data=(X.cuda(), y.cuda()), batch_size=40, num_chains=2, seed=5, check_every=4)
    init = energy.initial_position().cuda()
    plain = sm.sample(energy, init, sm.SGHMC(1e-3, friction=0.2), 30, **options).samples
    dist.init_process_group("nccl", init_method=f"file://{tmp_path / 'init'}", rank=0, world_size=1)
    try:
        one_rank = sm.sample(
            energy, init, sm.SGHMC(1e-3, friction=0.2), 30, distributed=True, out_dir=tmp_path / "run", **options
        ).samples
        cpu_energy, _ = problem("cpu", torch.float64)  # NCCL reduces GPU tensors only: refused, named
        with pytest.raises(ValueError, match="NCCL"):
            sm.sample(cpu_energy, None, sm.SGLD(1e-3), 5, data=(X, y), batch_size=40, distributed=True)
    finally:
        dist.destroy_process_group()
    assert one_rank.is_cuda
    torch.testing.assert_close(one_rank, plain, rtol=1e-12, atol=1e-14)
    cpu_energy, _ = problem("cpu", torch.float64)
    cpu = sm.sample(cpu_energy, init.cpu(), sm.SGHMC(1e-3, friction=0.2), 30, **{**options, "data": (X, y)}).samples
    assert cpu.shape == plain.shape
    assert sm.load_chain(tmp_path / "run").samples.shape == plain.shape


def _compiled_run(energy, data, sampler, execution, steps=30, **kw):
    import warnings

    from structmc.compiled import CompileFallbackWarning

    options = dict(data=data, batch_size=32, seed=3, progress=False, execution=execution)
    options.update(kw)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)  # a fallback would test nothing
        return sm.sample(energy, None, sampler, steps, **options)


@pytest.mark.parametrize(
    "make",
    [lambda: sm.SGLD(1e-3), lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2), lambda: sm.SGNHT(1e-4, a=0.1)],
    ids=["sgld", "sghmc", "sgnht"],
)
def test_the_traced_step_on_cuda_is_the_eager_chain(make):
    """backend="aot_eager": the traced graph op by op, random numbers from the run's CUDA generator
    in the eager order: the eager chain to float rounding (3 chains). Bit for bit on the CPU
    (tests/run/test_compiled.py); on the H200 (torch 2.11) the traced graph's decomposed kernels
    round differently from the eager ones, so the CUDA check is a tolerance."""
    from structmc.compiled import Compiled

    energy, data = problem("cuda")
    eager = _compiled_run(energy, data, make(), "eager", num_chains=3)
    traced = _compiled_run(energy, data, make(), Compiled(backend="aot_eager"), num_chains=3)
    assert traced.samples.is_cuda
    torch.testing.assert_close(traced.samples, eager.samples, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(traced.info["energy"], eager.info["energy"], rtol=1e-5, atol=1e-4)


def test_cuda_graph_replay_agrees_with_the_eager_chain_and_captures():
    """The default on CUDA: Inductor with CUDA graphs (reduce-overhead). The state is updated in
    place at fixed addresses and the data read where it is, so the graph is captured (no
    cudagraph skip) and replayed; the chain agrees with the eager one to float rounding, the
    records (copies of the graph's outputs) survive later replays, and a CV run and a resumed
    folder work the same way."""
    from torch._dynamo.utils import counters

    energy, data = problem("cuda")
    counters.clear()
    for make, kw in (
        (lambda: sm.SGLD(1e-3), dict(num_chains=3)),
        (lambda: sm.SGHMC(1e-4, friction=0.1), dict(num_chains=1)),
    ):
        eager = _compiled_run(energy, data, make(), "eager", **kw)
        graphed = _compiled_run(energy, data, make(), "compiled", **kw)
        assert graphed.samples.is_cuda
        torch.testing.assert_close(graphed.samples, eager.samples, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(graphed.info["energy"], eager.info["energy"], rtol=1e-4, atol=1e-3)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_cuda_graph_replay_with_control_variates_and_structured_copies(tmp_path):
    from torch._dynamo.utils import counters

    energy, data = problem("cuda")
    counters.clear()
    centre = sm.find_map(energy, energy.initial_position(), data=data, batch_size=50, num_steps=50)
    kw = dict(num_chains=2, gradient=sm.ControlVariate(centre))
    eager = _compiled_run(energy, data, sm.SGLD(1e-4), "eager", **kw)
    graphed = _compiled_run(energy, data, sm.SGLD(1e-4), "compiled", **kw)
    torch.testing.assert_close(graphed.samples, eager.samples, rtol=1e-4, atol=1e-5)
    make = lambda: StructuredEnergy(
        energy, by_neuron(energy.space), ChainHistory(20), mask=BernoulliMask(0.5), num_copies=4, seed=1
    )
    eager = _compiled_run(make(), data, sm.SGLD(1e-4), "eager", num_chains=2)
    graphed = _compiled_run(make(), data, sm.SGLD(1e-4), "compiled", num_chains=2)
    torch.testing.assert_close(graphed.samples, eager.samples, rtol=1e-4, atol=1e-5)
    # killed at 17 of 30 in the compiled mode, resumed compiled: the uninterrupted compiled chain
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=5)
    with pytest.raises(Interrupt):
        _compiled_run(energy, data, sm.SGLD(1e-3), "compiled", num_chains=2, callback=interrupt_at(17), **folder)
    resumed = _compiled_run(energy, data, sm.SGLD(1e-3), "compiled", num_chains=2, resume=True, **folder)
    whole = _compiled_run(energy, data, sm.SGLD(1e-3), "compiled", num_chains=2)
    torch.testing.assert_close(resumed.samples, whole.samples, rtol=1e-5, atol=1e-6)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_a_block_of_iterations_replays_as_one_cuda_graph(tmp_path):
    """``Compiled(block=4)`` on CUDA: four iterations a replay, each iteration's state a copy of
    the graph's output; the eager chain to float rounding, no cudagraph skip, and a run killed
    inside a block resumes to the unbroken block run."""
    from torch._dynamo.utils import counters

    from structmc.compiled import Compiled

    energy, data = problem("cuda")
    counters.clear()
    for make in (lambda: sm.SGLD(1e-3), lambda: sm.SGNHT(1e-4, a=0.1)):
        eager = _compiled_run(energy, data, make(), "eager", steps=18, num_chains=2)
        graphed = _compiled_run(energy, data, make(), Compiled(block=4), steps=18, num_chains=2)
        torch.testing.assert_close(graphed.samples, eager.samples, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(graphed.info["energy"], eager.info["energy"], rtol=1e-4, atol=1e-3)
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=5)
    with pytest.raises(Interrupt):
        _compiled_run(energy, data, sm.SGLD(1e-3), Compiled(block=4), steps=18, callback=interrupt_at(13), **folder)
    resumed = _compiled_run(energy, data, sm.SGLD(1e-3), Compiled(block=4), steps=18, resume=True, **folder)
    whole = _compiled_run(energy, data, sm.SGLD(1e-3), Compiled(block=4), steps=18)
    torch.testing.assert_close(resumed.samples, whole.samples, rtol=1e-5, atol=1e-6)
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])


def test_a_gibbs_sweep_replays_as_one_cuda_graph():
    """Issue 37 §4: the compiled sweep (every block's proposal and accept/reject, the incremental
    evaluator's caches) captured as a CUDA graph, and the eager chain to float rounding."""
    from torch._dynamo.utils import counters

    from structmc.gibbs import MetropolisWithinGibbs
    from structmc.models import MLP

    torch.manual_seed(0)
    energy = sm.ModuleEnergy(MLP((6, 4, 3), "tanh").to("cuda", torch.float64), "categorical", prior_std=3.0)
    g = torch.Generator().manual_seed(0)
    X, y = torch.randn(200, 6, generator=g, dtype=torch.float64), torch.randint(0, 3, (200,), generator=g)
    counters.clear()
    chains = [
        _compiled_run(
            energy,
            (X, y),
            MetropolisWithinGibbs(by_neuron(energy.space), 0.05, evaluator="incremental"),
            execution,
            steps=10,
            batch_size=50,
            num_chains=3,
        )
        for execution in ("eager", "compiled")
    ]
    torch.testing.assert_close(chains[1].samples, chains[0].samples, rtol=1e-9, atol=1e-10)
    assert torch.equal(chains[1].info["accept"], chains[0].info["accept"])
    assert counters["inductor"]["cudagraph_skips"] == 0, dict(counters["inductor"])
