"""Repeatable check of ``to_arviz`` against ArviZ 1.x, which needs Python >= 3.12.

The test environment is Python 3.11, where pip resolves ``arviz`` to 0.x; the tests cover the
1.x branch of ``to_arviz`` only with a stand-in module. This script does it for real:

1. finds a Python >= 3.12 (``--python``, else ``python3.12``/``python3.13`` on PATH, else a
   pyenv install under ``~/.pyenv/versions``); without one it says so and exits with status 2;
2. creates (once) a virtual environment outside the repository, ``~/.cache/structmc-arviz1``
   by default, and installs torch (the CPU build from download.pytorch.org first; if that
   index cannot be reached, the PyPI build, which on Linux is the CUDA one, ~5 GB with its
   ``nvidia-*`` wheels: refused with a message when less than 15 GB are free), ``arviz>=1``,
   matplotlib, and structmc itself (``pip install -e <repo> --no-deps`` plus numpy and tqdm);
3. runs, inside it, SGLD on a correlated 2-D Gaussian (4 chains), ``chain.to_arviz()``, and
   checks that the result is a ``DataTree`` with the right groups, dims and values; that
   ``az.summary``, ``az.ess`` and ``az.rhat`` work, and that ArviZ's bulk ESS and rank R-hat
   agree with :func:`structmc.diagnostics.ess_bulk` and :func:`structmc.diagnostics.rhat`
   (Vehtari et al. 2021: the same estimators, so up to float rounding); and that two plots
   (``plot_trace_dist``, ``plot_forest``, matplotlib backend) draw and save.

Each stage prints its wall time. Later runs reuse the environment (pip only checks it).

    python bench/check_arviz1.py                      # create/reuse ~/.cache/structmc-arviz1
    python bench/check_arviz1.py --python python3.12 --venv /tmp/az1
    python bench/check_arviz1.py --recreate           # start from an empty environment
"""

from __future__ import annotations

import argparse
import glob
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
MIN_FREE_GB_FOR_CUDA_TORCH = 15

# the check itself, run by the 3.12 interpreter of the environment
CHECK = r"""
import sys, time, tempfile, os
import numpy as np
import torch
import arviz as az
import structmc as sm
from structmc.diagnostics import ess_bulk, rhat

t0 = time.perf_counter()
assert sys.version_info >= (3, 12), sys.version
major = int(az.__version__.split(".")[0])
assert major >= 1, f"arviz {az.__version__} is not 1.x"
print(f"python {sys.version.split()[0]}, torch {torch.__version__}, arviz {az.__version__}, "
      f"structmc from {os.path.dirname(sm.__file__)}")

cov = torch.tensor([[1.0, 0.5], [0.5, 1.0]], dtype=torch.float64)
prec = torch.linalg.inv(cov)
energy = sm.LogDensityEnergy(lambda th, batch: -0.5 * th @ prec @ th, dim=2)
init = torch.randn(4, 2, generator=torch.Generator().manual_seed(1), dtype=torch.float64) * 3
chain = sm.sample(energy, init, sm.SGLD(0.3), 4000, num_chains=4, thin=2, burn_in=400, seed=0)
C, D = chain.num_chains, chain.num_draws

dt = chain.to_arviz()
from xarray import DataTree
assert isinstance(dt, DataTree), type(dt)
post = dt.posterior
name = chain.space.names[0]
assert post[name].dims[:2] == ("chain", "draw"), post[name].dims
np.testing.assert_array_equal(post[name].values, chain[name].numpy())
np.testing.assert_array_equal(post["draw"].values, chain.draw_steps.numpy())
groups = sorted(dt.children)
print(f"to_arviz: {type(dt).__module__}.{type(dt).__name__}, groups {groups}, "
      f"{name} dims {post[name].dims} shape {post[name].shape}")

table = az.summary(dt)
print(table.to_string())
ess_az = np.asarray(az.ess(dt, method="bulk")[name].values, dtype=float)
rhat_az = np.asarray(az.rhat(dt, method="rank")[name].values, dtype=float)
ess_sm = ess_bulk(chain[name]).double().numpy()
rhat_sm = rhat(chain[name]).double().numpy()
print(f"bulk ESS  arviz {ess_az}  structmc {ess_sm}")
print(f"rank R-hat arviz {rhat_az}  structmc {rhat_sm}")
np.testing.assert_allclose(ess_az, ess_sm, rtol=1e-8)
np.testing.assert_allclose(rhat_az, rhat_sm, rtol=1e-10)
assert np.all(rhat_sm < 1.05), rhat_sm

import matplotlib
matplotlib.use("Agg")
out = tempfile.mkdtemp(prefix="structmc-arviz1-")
for plot in ("plot_trace_dist", "plot_forest"):
    pc = getattr(az, plot)(dt, backend="matplotlib")
    path = os.path.join(out, plot + ".png")
    pc.savefig(path)
    size = os.path.getsize(path)
    assert size > 5000, (plot, size)
    print(f"{plot}: {path} ({size} bytes)")
print(f"check: {time.perf_counter() - t0:.1f} s")
print("ARVIZ 1.x CHECK PASSED")
"""


def find_python(given: str | None) -> str | None:
    """A Python >= 3.12 executable, or None."""
    candidates = [given] if given else []
    if not given:
        candidates += [shutil.which(n) for n in ("python3.12", "python3.13")]
        root = Path(os.environ.get("PYENV_ROOT", Path.home() / ".pyenv"))
        candidates += sorted(glob.glob(str(root / "versions" / "3.1[2-9]*" / "bin" / "python3")))
    for exe in filter(None, candidates):
        try:
            out = subprocess.run(
                [exe, "-c", "import sys; print(sys.version_info >= (3, 12))"],
                capture_output=True,
                text=True,
                timeout=60,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if out.returncode == 0 and out.stdout.strip() == "True":
            return exe
    return None


def run(cmd: list[str], what: str, check: bool = True, **kw) -> subprocess.CompletedProcess:
    t0 = time.perf_counter()
    shown = [c if "\n" not in c else "<script>" for c in cmd]
    print(f"[{what}] {' '.join(shown)}", flush=True)
    proc = subprocess.run(cmd, check=False, **kw)
    print(f"[{what}] exit {proc.returncode}, {time.perf_counter() - t0:.1f} s", flush=True)
    if check and proc.returncode != 0:
        raise SystemExit(f"{what} failed (exit {proc.returncode})")
    return proc


def has(py: str, code: str) -> bool:
    return subprocess.run([py, "-c", code], capture_output=True, check=False).returncode == 0


def install_torch(py: str, version: str, venv: Path) -> None:
    spec = f"torch=={version}" if version else "torch"
    if has(py, f"import torch; assert torch.__version__.split('+')[0] == {version!r} or not {version!r}"):
        print(
            f"[torch] already installed: {subprocess.check_output([py, '-c', 'import torch; print(torch.__version__)'], text=True).strip()}"
        )
        return
    pip = [py, "-m", "pip", "install"]
    # the CPU build (~200 MB): only the PyTorch index has it
    if run(pip + [spec, "--index-url", CPU_INDEX], "torch (CPU build)", check=False).returncode == 0:
        return
    free_gb = shutil.disk_usage(venv).free / 2**30
    if free_gb < MIN_FREE_GB_FOR_CUDA_TORCH:
        raise SystemExit(
            f"{CPU_INDEX} cannot be reached and the PyPI build of torch is the CUDA one (~5 GB with "
            f"its nvidia-* wheels); only {free_gb:.1f} GB are free (< {MIN_FREE_GB_FOR_CUDA_TORCH} GB): "
            f"not downloading it. Install torch into {venv} yourself and run this again."
        )
    print(f"[torch] {CPU_INDEX} cannot be reached: the PyPI build (CUDA, ~5 GB; {free_gb:.0f} GB free)")
    run(pip + [spec], "torch (PyPI build)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--python", help="a Python >= 3.12 (default: python3.12/3.13 on PATH, else pyenv's)")
    ap.add_argument(
        "--venv",
        default=str(Path.home() / ".cache" / "structmc-arviz1"),
        help="the environment to create or reuse (default: %(default)s)",
    )
    ap.add_argument("--torch", default="2.13.0", help="torch version to install ('' for the newest)")
    ap.add_argument("--recreate", action="store_true", help="delete the environment first")
    args = ap.parse_args(argv)
    start = time.perf_counter()
    base = find_python(args.python)
    if base is None:
        print(
            "no Python >= 3.12 found (ArviZ 1.x needs it): install one (e.g. `pyenv install 3.12`) or pass "
            "--python; ArviZ 1.x was not checked",
            file=sys.stderr,
        )
        return 2
    venv = Path(args.venv).expanduser()
    if args.recreate and venv.exists():
        shutil.rmtree(venv)
    py = str(venv / "bin" / "python")
    if not Path(py).exists():
        venv.parent.mkdir(parents=True, exist_ok=True)
        run([base, "-m", "venv", str(venv)], "venv")
    install_torch(py, args.torch, venv)
    pip = [py, "-m", "pip", "install"]
    run(pip + ["arviz>=1", "matplotlib", "numpy", "tqdm"], "arviz 1.x and structmc's dependencies")
    run(pip + ["-e", str(REPO), "--no-deps"], "structmc (editable)")
    proc = run([py, "-c", CHECK], "check", check=False, cwd=str(venv))
    print(f"total {time.perf_counter() - start:.1f} s")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
