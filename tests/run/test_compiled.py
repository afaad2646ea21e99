"""The compiled step (issue 37 §1): ``execution="compiled"`` makes the eager run's random draws in
the eager order, so the same seed gives the same chain. With ``backend="aot_eager"`` (the traced
graph run op by op on the eager kernels) it is the eager chain bit for bit for SGLD, SGHMC and
SGNHT; pSGLD's traced update is decomposed (addcmul into mul + add), so it agrees to float
rounding. With Inductor (fused kernels) every sampler agrees to float rounding. What cannot be
compiled runs eagerly with a warning naming why, and gives the eager chain."""

from __future__ import annotations

import copy
import pickle
import warnings

import pytest
import torch
from support.runs import ALL_SAMPLERS, Interrupt, interrupt_at, linreg_problem, mlp_energy
from torch import nn

import structmc as sm
from structmc.compiled import Compiled, CompileFallbackWarning
from structmc.energy import LogDensityEnergy

TRACED = Compiled(backend="aot_eager")  # the tracing checked against the eager kernels, fast to compile


def _linreg_energy():
    def log_lik(theta, batch):
        x, y = batch
        return -0.5 * ((x @ theta - y) ** 2).sum() / 0.09

    return LogDensityEnergy(dim=3, log_likelihood=log_lik, log_prior=lambda t: -0.5 * (t * t).sum())


def _run(energy, data, sampler, execution, steps=25, **kw):
    options = dict(batch_size=16, seed=7, progress=False)
    options.update(kw)
    init = None if isinstance(energy, (sm.ModuleEnergy, sm.structured.StructuredEnergy)) else torch.zeros(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", CompileFallbackWarning)  # a fallback here would test nothing
        warnings.simplefilter("ignore", sm.diagnostics.health.ConvergenceWarning)
        return sm.sample(energy, init, sampler, steps, data=data, execution=execution, **options)


@pytest.mark.parametrize("chains", [1, 3])
@pytest.mark.parametrize("make", ALL_SAMPLERS, ids=["sgld", "psgld", "sghmc", "sgnht"])
def test_the_traced_step_is_the_eager_chain(make, chains):
    energy, data = mlp_energy()
    eager = _run(energy, data, make(), "eager", num_chains=chains)
    traced = _run(energy, data, make(), TRACED, num_chains=chains)
    assert traced.samples.shape == eager.samples.shape
    for key in eager.info:
        assert torch.is_tensor(traced.info[key]) or traced.info[key] == eager.info[key]
    if make().name == "psgld" or chains == 1:
        # pSGLD: the traced update rounds addcmul as mul + add; one chain: the eager ModuleEnergy
        # runs the module itself (backward into its bound gradient), the traced step the vmapped
        # functional path (the path of several chains), whose kernels round differently
        torch.testing.assert_close(traced.samples, eager.samples, rtol=1e-5, atol=1e-6)
    else:
        assert torch.equal(traced.samples, eager.samples)
        assert torch.equal(traced.info["energy"], eager.info["energy"])
        if "thermostat" in eager.info:
            assert torch.equal(traced.info["thermostat"], eager.info["thermostat"])
    assert torch.equal(traced.info["grad_evals"], eager.info["grad_evals"])


def test_one_chain_on_a_log_density_is_the_eager_chain():
    energy = _linreg_energy()
    X, y = linreg_problem(n=80)
    for make in ALL_SAMPLERS[:1] + ALL_SAMPLERS[2:]:
        eager = _run(energy, (X, y), make(), "eager")
        traced = _run(energy, (X, y), make(), TRACED)
        assert torch.equal(traced.samples, eager.samples)


def test_control_variates_schedules_full_batch_and_no_data():
    energy, data = mlp_energy(num_data=90)
    centre = torch.cat([p.detach().reshape(-1) for p in energy.module.parameters()])
    for kw in (
        dict(gradient=sm.ControlVariate(centre), num_chains=2),
        dict(batch_size=None),
        dict(batching="with_replacement", num_chains=2),
    ):
        eager = _run(energy, data, sm.SGLD(sm.schedules.StepDecay(1e-3, every=6)), "eager", **kw)
        traced = _run(energy, data, sm.SGLD(sm.schedules.StepDecay(1e-3, every=6)), TRACED, **kw)
        assert torch.equal(traced.samples, eager.samples), kw
    gauss = LogDensityEnergy(lambda t, b: -0.5 * (t * t).sum(), 3)
    eager = _run(gauss, None, sm.SGHMC(1e-2), "eager", batch_size=None)
    traced = _run(gauss, None, sm.SGHMC(1e-2), TRACED, batch_size=None)
    assert torch.equal(traced.samples, eager.samples)


def test_inductor_agrees_to_float_rounding():
    """Fused kernels round differently: the chain agrees to float rounding over 25 steps."""
    energy = _linreg_energy()
    X, y = linreg_problem(n=200)
    for make in (lambda: sm.SGLD(1e-3), lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2)):
        eager = _run(energy, (X, y), make(), "eager", num_chains=2)
        fused = _run(energy, (X, y), make(), "compiled", num_chains=2)
        torch.testing.assert_close(fused.samples, eager.samples, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(fused.info["energy"], eager.info["energy"], rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("first, then", [("eager", TRACED), (TRACED, "eager")])
def test_resume_in_the_other_mode_continues_the_same_chain(tmp_path, first, then):
    energy, data = mlp_energy()
    kw = dict(batch_size=16, num_chains=2, seed=3, progress=False)
    whole = sm.sample(energy, None, sm.SGHMC(1e-4, num_leapfrog=2), 30, data=data, **kw)
    with pytest.raises(Interrupt):
        sm.sample(energy, None, sm.SGHMC(1e-4, num_leapfrog=2), 30, data=data, out_dir=tmp_path, checkpoint_every=10,
                  callback=interrupt_at(17), execution=first, **kw)  # fmt: skip
    resumed = sm.sample(energy, None, sm.SGHMC(1e-4, num_leapfrog=2), 30, data=data, out_dir=tmp_path,
                        checkpoint_every=10, resume=True, execution=then, **kw)  # fmt: skip
    assert torch.equal(resumed.samples, whole.samples)


def _warned(fn) -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    found = [str(w.message) for w in caught if issubclass(w.category, CompileFallbackWarning)]
    assert len(found) == 1, found
    return found[0]


def test_what_cannot_be_compiled_runs_eagerly_and_says_why():
    energy, (X, y) = mlp_energy()
    kw = dict(data=(X, y), batch_size=16, seed=1, progress=False)
    cases = [
        (lambda e: sm.sample(e, None, sm.PSGLD(1e-4, include_gamma=True), 5, **kw, execution="compiled"),
         "include_gamma=True"),
        (lambda e: sm.sample(e, None, sm.ScaleAdaptedSGHMC(1e-4), 5, **kw, execution="compiled"),
         "adaptation"),
        (lambda e: sm.sample(e, None, sm.SGLD(sm.schedules.Polynomial(1e-3)), 5, **kw, execution="compiled"),
         "changes every iteration"),
        (lambda e: sm.sample(e, None, sm.SGLD(1e-3), 5, data=sm.DataSource((X, y), transform=lambda b, g: b),
                             batch_size=16, progress=False, execution="compiled"), "per-batch transform"),
    ]  # fmt: skip
    for run, words in cases:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", sm.diagnostics.health.ConvergenceWarning)
            message = _warned(lambda run=run: run(energy))
        assert words in message and "steps eagerly" in message, message
    torch.manual_seed(0)
    bn = sm.ModuleEnergy(nn.Sequential(nn.Linear(4, 6), nn.BatchNorm1d(6), nn.Linear(6, 3)), "categorical")
    message = _warned(lambda: sm.sample(bn, None, sm.SGLD(1e-3), 3, **kw, num_chains=2, execution="compiled"))
    assert "BatchNorm" in message and "one chain compiles" in message


def test_one_chain_with_batchnorm_compiles_and_carries_its_statistics():
    """BatchNorm's running statistics are updated inside the graph, as the eager step updates them."""
    X, y = linreg_problem(n=96, d=3)
    labels = (y > 0).long()

    def bn_energy():
        torch.manual_seed(0)
        net = nn.Sequential(nn.Linear(3, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 2))
        return sm.ModuleEnergy(net, "categorical")

    eager = _run(bn_energy(), (X, labels), sm.SGHMC(1e-4, num_leapfrog=2), "eager")
    traced = _run(bn_energy(), (X, labels), sm.SGHMC(1e-4, num_leapfrog=2), TRACED)
    torch.testing.assert_close(traced.samples, eager.samples, rtol=1e-5, atol=1e-6)
    for name, value in eager.buffers[0].items():
        torch.testing.assert_close(traced.buffers[0][name], value, rtol=1e-5, atol=1e-6)
    assert not torch.equal(eager.buffers[0]["1.running_mean"], torch.zeros(8))  # the statistics did move


def test_a_step_that_cannot_be_traced_falls_back_with_the_eager_chain():
    """An energy that says it compiles but syncs with the host (``.item()``): the trace fails at
    the first step, the warning names it, and the run restarts that step eagerly from the same
    generator state."""

    def log_prob(theta, batch):
        x, y = batch
        scale = float((x @ theta - y).abs().max().item()) + 1.0  # a host read: not traceable in one graph
        return -0.5 * ((x @ theta - y) ** 2).sum() / scale

    energy = LogDensityEnergy(log_prob, 3)
    X, y = linreg_problem(n=80)
    kw = dict(data=(X, y), batch_size=8, seed=2, num_chains=2, progress=False)
    eager = sm.sample(energy, torch.zeros(3), sm.SGLD(1e-3), 12, **kw)
    out: list = []
    message = _warned(lambda: out.append(sm.sample(energy, torch.zeros(3), sm.SGLD(1e-3), 12, **kw, execution=TRACED)))
    assert "could not trace the step" in message
    assert torch.equal(out[0].samples, eager.samples)


def test_bad_execution_is_refused_before_any_compute():
    energy, data = mlp_energy()
    with pytest.raises(ValueError, match="execution must be one of"):
        sm.sample(energy, None, sm.SGLD(1e-3), 5, data=data, execution="jit")
    with pytest.raises(ValueError, match="not combined with the data-parallel"):
        sm.sample(energy, None, sm.SGLD(1e-3), 5, data=data, execution="compiled", distributed=True)


def test_the_strategy_pickles_and_each_run_gets_its_own():
    spec = Compiled(backend="aot_eager", mode=None)
    again = pickle.loads(pickle.dumps(spec))
    assert (again.backend, again.mode) == ("aot_eager", None)
    energy, data = mlp_energy()
    run = sm.Run(energy, None, sm.SGLD(1e-3), data=data, batch_size=16, execution=spec)
    assert run.execution is not spec and spec._fn is None  # the caller's object is never bound
    pickle.dumps(spec)


@pytest.mark.parametrize(
    "structured",
    [
        dict(),  # S-SGMCMC: M copies, identity masks
        dict(mask=sm.structured.BernoulliMask(0.5), num_copies=3, max_copies_per_call=2, warmup_steps=4),
        dict(mask=sm.structured.BernoulliMask(0.5), num_copies=2, split_batch=True,
             history=sm.structured.ChainHistory(8, mode="reservoir")),
    ],
    ids=["S", "Sd-chunks-warmup", "Sd-split-reservoir"],
)  # fmt: skip
def test_structured_energies_draw_their_copies_before_the_graph(structured):
    """θ̃ and the masks come from the energy's own generator, drawn before the graph in the
    order the eager evaluation draws them: the traced chain is the eager one."""
    base, data = mlp_energy()
    energy = sm.structured.StructuredEnergy(base, sm.partitions.by_layer(base.space), **{"history": 20, **structured})
    for make in (lambda: sm.SGLD(1e-3), lambda: sm.SGHMC(1e-4, num_leapfrog=2)):
        eager = _run(energy, data, make(), "eager", num_chains=2)
        traced = _run(energy, data, make(), TRACED, num_chains=2)
        assert torch.equal(traced.samples, eager.samples)
        assert torch.equal(traced.info["grad_evals"], eager.info["grad_evals"])


def test_the_gpu_pair_script_runs_the_pair_compiled_at_the_authors_temperature():
    """bench/gpu_resnet_pair.py (issue 37's GPU payoff): the converged FMNIST pair at T = 1/2,
    compiled, from the paper's files, resumable (its CPU run of the tiny preset took 404 s here,
    so CI checks the configuration only)."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "gpu_resnet_pair.py"
    spec = importlib.util.spec_from_file_location("gpu_resnet_pair", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    args = module.argparse.Namespace(preset="converged", execution="compiled", data="/data", checkpoint_seconds=120.0)
    cfg = module.config(args)
    assert args.preset == "converged"
    assert cfg.temperatures == (0.5,) and cfg.execution == "compiled" and cfg.data == "files"
    assert [r[0] for r in cfg.runs] == ["pSGLD", "Sd-pSGLD"] and cfg.epochs == 300


def test_a_later_trace_that_fails_falls_back_where_it_happens(monkeypatch):
    """A step size that changes compiles again; past the run's recompile limit the trace fails at
    that step: the run steps eagerly from there, saying so, and the chain is still the eager one."""
    import structmc.compiled as compiled

    monkeypatch.setattr(compiled, "RECOMPILE_LIMIT", 2)
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=16, seed=4, num_chains=2, progress=False)
    eager = sm.sample(energy, None, sm.SGLD(sm.schedules.StepDecay(1e-3, every=3)), 12, **kw)
    out: list = []
    message = _warned(
        lambda: out.append(
            sm.sample(energy, None, sm.SGLD(sm.schedules.StepDecay(1e-3, every=3)), 12, **kw, execution=TRACED)
        )
    )
    assert "could not trace the step" in message
    assert torch.equal(out[0].samples, eager.samples)


def test_a_cuda_graphed_state_keeps_its_addresses():
    """Under CUDA graphs the replayed graph updates the state where it was captured: a tensor an
    eager hook replaced (SGHMC's momentum resampling, a restored state) is copied into the kept
    one, a new shape is kept as the new address."""
    from structmc.compiled import _keep_addresses
    from structmc.samplers.sghmc import SGHMCState

    static: dict = {}
    state = SGHMCState(torch.zeros(2, 3), torch.zeros(2, 3))
    theta, momentum = state.theta, state.momentum
    _keep_addresses(state, static)
    assert static == {"theta": theta, "momentum": momentum} and hasattr(theta, "_dynamo_static_input_type")
    state.momentum = torch.ones(2, 3)  # resampled eagerly: a new tensor
    _keep_addresses(state, static)
    assert state.momentum is momentum and torch.equal(momentum, torch.ones(2, 3))
    state.theta = torch.ones(4, 3)  # another shape: the new tensor is kept instead
    _keep_addresses(state, static)
    assert static["theta"] is state.theta and state.theta.shape == (4, 3)


def test_chains_evaluated_in_a_loop_compile_chain_by_chain():
    """chain_evaluation="loop" (convolutions on CUDA, where vmapped per-copy weights are slow):
    the compiled step evaluates the chains one after another too, and gives the eager chain."""
    energy, data = mlp_energy()
    looped = sm.ModuleEnergy(energy.module, "categorical", prior_std={"*.bias": 3.0, "*": 1.0}, chain_evaluation="loop")
    for make in (lambda: sm.SGLD(1e-3), lambda: sm.PSGLD(1e-4)):
        eager = _run(looped, data, make(), "eager", num_chains=3)
        traced = _run(looped, data, make(), TRACED, num_chains=3)
        torch.testing.assert_close(traced.samples, eager.samples, rtol=1e-5, atol=1e-6)


def _gibbs_problem(dtype=torch.float64):
    from structmc.models import MLP

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    X = torch.randn(60, 4, generator=g, dtype=dtype)
    y = torch.randint(0, 3, (60,), generator=g)
    energy = sm.ModuleEnergy(MLP((4, 3, 3), "tanh").to(dtype), "categorical", prior_std={"*.bias": 2.0, "*": 3.0})
    return energy, (X, y)


@pytest.mark.parametrize(
    "options",
    [
        dict(evaluator="generic", chains=2),
        dict(evaluator="incremental", chains=2),
        dict(evaluator="incremental", chains=1),
        dict(evaluator="generic", chains=1, mala=True, sd=0.5),
        dict(evaluator="incremental", chains=2, adapt=True),
        dict(evaluator="incremental", chains=2, reference_defect=True),
    ],
    ids=["generic", "incremental", "one-chain", "mala", "adapt", "reference-defect"],
)
def test_a_gibbs_sweep_compiles_into_one_graph_with_the_eager_chain(options):
    """Issue 37 §4: a blocked Metropolis-within-Gibbs sweep (one proposal and accept/reject per
    block) is traced whole: its minibatch, normals and uniforms drawn before the graph in the
    eager order, the decisions as selects. Traced with the eager kernels (aot_eager) it is the
    eager chain: the same states, acceptances, energies and evaluation counts, float64 (one
    chain: the eager sweep decides on Python floats, the traced one on tensors, equal in float64)."""
    from structmc.gibbs import Adapt, MetropolisWithinGibbs
    from structmc.partitions import by_neuron

    energy, data = _gibbs_problem()
    options = dict(options)
    chains, adapt, sd = options.pop("chains"), options.pop("adapt", False), options.pop("sd", 0.05)

    def sampler():
        return MetropolisWithinGibbs(by_neuron(energy.space), sd, adapt=Adapt(steps=4) if adapt else None, **options)

    eager = _run(energy, data, sampler(), "eager", steps=6, batch_size=20, num_chains=chains)
    traced = _run(energy, data, sampler(), TRACED, steps=6, batch_size=20, num_chains=chains)
    assert torch.equal(traced.samples, eager.samples)
    assert torch.equal(traced.info["accept"], eager.info["accept"])
    torch.testing.assert_close(traced.info["energy"], eager.info["energy"], rtol=1e-12, atol=1e-10)
    assert torch.equal(traced.info["evaluations"], eager.info["evaluations"])
    assert 0 < float(eager.info["accept"].double().mean()) < 1  # both outcomes exercised


def test_a_gibbs_sweep_compiled_with_inductor_agrees_and_resumes(tmp_path):
    from structmc.gibbs import MetropolisWithinGibbs
    from structmc.partitions import by_neuron

    energy, data = _gibbs_problem()
    make = lambda: MetropolisWithinGibbs(by_neuron(energy.space), 0.05, evaluator="incremental")  # noqa: E731
    kw = dict(steps=8, batch_size=20, num_chains=2)
    eager = _run(energy, data, make(), "eager", **kw)
    fused = _run(energy, data, make(), "compiled", **kw)
    torch.testing.assert_close(fused.samples, eager.samples, rtol=1e-9, atol=1e-10)
    folder = dict(out_dir=tmp_path / "run", checkpoint_every=2)
    with pytest.raises(Interrupt):
        _run(energy, data, make(), "compiled", callback=interrupt_at(5), **kw, **folder)
    resumed = _run(energy, data, make(), "compiled", resume=True, **kw, **folder)
    torch.testing.assert_close(resumed.samples, fused.samples, rtol=0, atol=0)


def test_a_gibbs_sweep_that_cannot_be_traced_falls_back_with_the_eager_chain():
    """A sweep whose trace fails (a host read in it): the warning names it, the run's generator,
    stream and state are given back, and the run sweeps eagerly from there: the eager chain."""
    from structmc.gibbs import MetropolisWithinGibbs
    from structmc.partitions import by_neuron

    class HostRead(MetropolisWithinGibbs):
        def sweep(self, state, draws, oracle, host_decisions=True):
            if state.theta.abs().max().item() > 1e6:  # a branch on a host read: not in one graph
                raise FloatingPointError("diverged")
            return super().sweep(state, draws, oracle, host_decisions)

    energy, data = _gibbs_problem()
    make = lambda: HostRead(by_neuron(energy.space), 0.05, evaluator="incremental")  # noqa: E731
    eager = _run(energy, data, make(), "eager", steps=5, batch_size=20, num_chains=2)
    kw = dict(data=data, batch_size=20, num_chains=2, seed=7, progress=False)
    out: list = []
    message = _warned(lambda: out.append(sm.sample(energy, None, make(), 5, **kw, execution=TRACED)))
    assert "could not trace the step" in message
    assert torch.equal(out[0].samples, eager.samples)
    assert torch.equal(out[0].info["accept"], eager.info["accept"])
    assert torch.equal(out[0].info["evaluations"], eager.info["evaluations"])


BLOCK = Compiled(backend="aot_eager", block=4)  # four iterations a graph, traced on the eager kernels


@pytest.mark.parametrize(
    "make",
    [lambda: sm.SGLD(1e-3), lambda: sm.SGHMC(1e-4, friction=0.1, num_leapfrog=2), lambda: sm.SGNHT(1e-3, a=0.1)],
    ids=["sgld", "sghmc-2-leapfrog", "sgnht"],
)
def test_a_block_of_iterations_in_one_graph_is_the_eager_chain(make):
    """``Compiled(block=k)``: k iterations in one graph (their draws made before it, in the eager
    order), each iteration returned with its own state, energy and records. 11 steps: blocks of
    4, 4 and 4 with one iteration left over, given back at the end."""
    energy, data = mlp_energy()
    eager = _run(energy, data, make(), "eager", steps=11, num_chains=3)
    block = _run(energy, data, make(), BLOCK, steps=11, num_chains=3)
    assert torch.equal(block.samples, eager.samples)
    for key in eager.info:
        if key != "time":
            assert torch.equal(block.info[key], eager.info[key]), key


def test_a_block_keeps_the_chain_through_schedules_estimators_and_thinning():
    """A step decay every 6 iterations: blocks where four iterations share the step size, single
    iterations where they do not; control variates; a thinned run; momentum resampling (SGHMC's
    begin draws each iteration: no block)."""
    energy, data = mlp_energy(num_data=90)
    centre = torch.cat([p.detach().reshape(-1) for p in energy.module.parameters()])
    cases = [
        (lambda: sm.SGLD(sm.schedules.StepDecay(1e-3, every=6)), dict(num_chains=2)),
        (lambda: sm.SGLD(1e-3), dict(gradient=sm.ControlVariate(centre), num_chains=2, thin=3)),
        (lambda: sm.SGHMC(1e-4, friction=0.1, resample_momentum=True), dict(num_chains=2)),
    ]
    for make, kw in cases:
        eager = _run(energy, data, make(), "eager", steps=17, **kw)
        block = _run(energy, data, make(), BLOCK, steps=17, **kw)
        assert torch.equal(block.samples, eager.samples), kw
        assert torch.equal(block.info["grad_evals"], eager.info["grad_evals"])


def test_a_run_that_stops_inside_a_block_continues_where_it_stopped(tmp_path):
    """The run's generator and stream are ahead while a block's iterations are being returned:
    a checkpoint, the end of ``iterate`` and a restore give back what was computed ahead, so that
    stopping anywhere and going on (in either mode) is the unbroken chain."""
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=16, num_chains=2, seed=3, progress=False)
    whole = sm.sample(energy, None, sm.SGLD(1e-3), 23, **kw)
    with pytest.raises(Interrupt):
        sm.sample(energy, None, sm.SGLD(1e-3), 23, out_dir=tmp_path, checkpoint_every=5, callback=interrupt_at(13),
                  execution=BLOCK, **kw)  # fmt: skip
    resumed = sm.sample(energy, None, sm.SGLD(1e-3), 23, out_dir=tmp_path, checkpoint_every=5, resume=True,
                        execution=BLOCK, **kw)  # fmt: skip
    assert torch.equal(resumed.samples, whole.samples)
    run = sm.Run(energy, None, sm.SGLD(1e-3), data=data, batch_size=16, num_chains=2, seed=3, execution=BLOCK)
    steps = [state.theta.clone() for n in (3, 2, 7) for _, state, _ in run.iterate(n)]
    eager = sm.Run(energy, None, sm.SGLD(1e-3), data=data, batch_size=16, num_chains=2, seed=3)
    assert torch.equal(torch.stack(steps), torch.stack([s.theta.clone() for _, s, _ in eager.iterate(12)]))
    saved = copy.deepcopy(run.state_dict())  # (the state dict holds the live tensors)
    more = [s.theta.clone() for _, s, _ in run.iterate(6)]
    run.load_state_dict(copy.deepcopy(saved))
    run.step(), run.step()  # a block computed and two of its iterations returned: two ahead
    run.load_state_dict(copy.deepcopy(saved))  # back to iteration 12 while a block is half returned
    assert torch.equal(torch.stack([s.theta.clone() for _, s, _ in run.iterate(6)]), torch.stack(more))


def test_block_is_checked_and_a_strategy_serves_one_run_at_a_time():
    for bad in (0, True, 2.0):
        with pytest.raises(ValueError, match="block must be an int"):
            Compiled(block=bad)
    assert "block=4" in BLOCK.describe()
    energy, data = mlp_energy()
    kw = dict(data=data, batch_size=16, seed=5, progress=False)
    first = _run(energy, data, sm.SGLD(1e-3), BLOCK, steps=6, batch_size=16, seed=5)
    again = sm.sample(energy, None, sm.SGLD(1e-3), 6, **kw, execution=BLOCK)
    assert torch.equal(first.samples, again.samples) and BLOCK._ahead == []  # the caller's object is never bound
