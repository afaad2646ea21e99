"""Every script in examples/ runs in its small setting and writes its PNG (numpyro's
test_examples.py pattern)."""

from __future__ import annotations

import importlib.util
import math
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
SMALL = {
    "regression_1d": ["--steps", "300"],
    "mnist_calibration": ["--num-train", "1000", "--epochs", "1"],
    "last_layer": ["--num-train", "1000", "--epochs", "1"],
    "custom_prior": ["--steps", "400"],
    "distributed_sgld": ["--steps", "200"],  # one process here; under torchrun below
}


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(EXAMPLES))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(EXAMPLES))
    return module


def test_every_example_is_listed():
    scripts = {p.stem for p in EXAMPLES.glob("*.py") if not p.stem.startswith("_")}
    assert scripts == set(SMALL)


MNIST_EXAMPLES = ("mnist_calibration", "last_layer")


@pytest.mark.parametrize("name", list(SMALL))
def test_example_runs(name, tmp_path, capsys, request):
    pytest.importorskip("matplotlib")
    if name in MNIST_EXAMPLES:  # the MNIST files, or a stand-in in their IDX format (never a download)
        request.getfixturevalue("mnist_data")
    result = _load(name).main(SMALL[name] + ["--out", str(tmp_path)])
    png = Path(result["png"])
    assert png.exists() and png.stat().st_size > 10_000 and png.parent == tmp_path
    assert "wrote" in capsys.readouterr().out

    def finite(v):
        if isinstance(v, dict):
            return all(finite(x) for x in v.values())
        if isinstance(v, (list, tuple)):
            return all(finite(x) for x in v)
        return not isinstance(v, float) or math.isfinite(v)

    assert finite(result)
    if name == "regression_1d":
        assert result["rmse"] < 0.25 and 0.75 <= result["coverage"]["0.9"] <= 1.0  # the mean predictor: RMSE ~0.45
    if name in MNIST_EXAMPLES:
        key = "psgld" if name == "mnist_calibration" else "last_layer"
        # read from the files (or their stand-in), not the examples' own offline fallback
        assert result["data"] == "MNIST"
        assert result[key]["accuracy"] > 0.5  # far above chance (10%) even in the small setting
    if name == "custom_prior":
        assert 0 < result["sigma_quantiles"][0] < result["sigma_quantiles"][2]


@pytest.mark.parametrize("dataset", [False, True], ids=["tensors", "dataset"])
def test_distributed_example_under_torchrun_gives_the_one_process_chain(tmp_path, dataset):
    """`torchrun --nproc-per-node 2 examples/distributed_sgld.py`: two gloo ranks on this CPU
    compute one chain, which rank 0 compares with the same chain on one process; with
    `--dataset` the data is a map-style Dataset of which each rank reads only its share."""
    import re
    import subprocess

    pytest.importorskip("matplotlib")
    steps = 60 if dataset else 300
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    cmd += [str(EXAMPLES / "distributed_sgld.py"), "--steps", str(steps), "--out", str(tmp_path)]
    cmd += ["--dataset"] if dataset else []
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=300, env={**__import__("os").environ, "OMP_NUM_THREADS": "1"}
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = re.search(r"2 process\(es\).*max \|θ\(ranks\) − θ\(one process\)\| = ([0-9.e+-]+)", done.stdout)
    assert found, done.stdout
    assert float(found.group(1)) < 1e-10  # float rounding (float64), not another chain
    assert (tmp_path / "distributed_sgld.png").stat().st_size > 10_000
    assert (tmp_path / "distributed_sgld-2-ranks" / "manifest.json").exists()  # rank 0's run folder
    if dataset:  # 2 chains × 100 rows (its half of the 200) a step, one batch read ahead, the
        # first 8 items twice (the checks) and the 4,000 items hashed once for the run folder
        read = int(re.search(r"rank 0 read (\d+) items", done.stdout).group(1))
        assert steps * 200 <= read - 16 - 4_000 <= (steps + 1) * 200, read
