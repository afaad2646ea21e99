"""Stein discrepancies from samples and their scores ``∇ log π`` (full-batch or stochastic).

* :func:`ksd`, :func:`ksd_curve`: kernel Stein discrepancy with the IMQ base kernel
  ``k(x, y) = (c² + ‖x − y‖²/ℓ²)^β`` (defaults c = 1, ℓ = 1, β = −1/2) and the Langevin Stein
  operator (Liu, Lee & Jordan 2016; Chwialkowski, Strathmann & Gretton 2016; Gorham & Mackey
  2017, who show the IMQ kernel with β ∈ (−1, 0) detects non-convergence).
* :func:`fssd`, :func:`fssd_test_locations`, :func:`fssd_optimize`: finite-set Stein
  discrepancy (Jitkrittum, Xu, Szabó, Fukumizu & Gretton 2017, "A linear-time kernel
  goodness-of-fit test", NeurIPS), O(n·d·J).

Differences from the MAMBA reference code (Coullon, South & Nemeth 2023, repository
``jeremiecoullon/SGMCMC_bandit_tuning``, ``tuning/ksd.py``), and what ``reference_compat=True``
does:

* KSD. The reference ``imq_KSD`` hard-codes c = 1, β = −1/2, evaluates the Stein kernel pair by
  pair (O(n²) vmapped rows) and returns ``√(Σ_i Σ_j k0(x_i, x_j)) / N``, i.e. the square root of
  the V-statistic. Its ``k_0_fun`` squares c (``c**2 + ‖r‖²``), as here. Our default
  (``statistic="v"``) is therefore the same number; here it is computed from three Gram
  matrices in row blocks. ``reference_compat=True`` forces the V-statistic and ℓ = 1.
* FSSD. The reference ``imq_kernel`` is ``(c + ‖x − v‖²)^β`` with c **not** squared (the KSD
  kernel squares it); it uses that IMQ kernel only, returns the U-statistic FSSD²
  ``Σ_j [‖Σ_i ξ_ij‖² − Σ_i ‖ξ_ij‖²] / (d·J·N(N−1))`` (same normalisation as here), and its
  ``get_test_locations`` draws every location with the *same* PRNG key, so all J locations
  are identical (J = 1 in effect). It fits a full-covariance Gaussian by Cholesky of the
  d×d sample covariance (+1e-10·I), which is O(d³) and infeasible for BNNs, and maximises FSSD²
  with Adam(1e-3) on the same samples it evaluates. Here: Gaussian kernel by default
  (Jitkrittum et al.), IMQ with c² on request, independent locations drawn from the same
  Gaussian fit without forming the covariance (``mean + (X − mean)ᵀ z / √(n−1)``), optional
  power criterion and held-out split. ``reference_compat=True`` uses the reference's IMQ kernel
  ``(c + ‖r‖²)^β``, identical locations, FSSD² objective and Adam(1e-3) on all samples; given
  the same locations it reproduces the reference's numbers (the JAX random stream itself
  cannot be reproduced in torch).
"""

from __future__ import annotations

from .finite_set import (
    EXACT_FSSD_ELEMENTS,
    FSSDResult,
    _fssd_terms,
    _fssd_terms_exact,  # noqa: F401
    _kernel_weights,
    fssd,
    fssd_optimize,
    fssd_test_locations,
    median_bandwidth,
)
from .kernelized import _diag, _ksd_blocks, imq_stein_kernel, ksd, ksd_curve  # noqa: F401
from .points import _as_points, _check_pair, _rowdot  # noqa: F401

# one home for the names of this package, whichever file defines them (points: the inputs;
# kernelized: KSD; finite_set: FSSD), as when it was one module: pickles and fingerprints name
# them structmc.diagnostics.stein
for _obj in (imq_stein_kernel, ksd, ksd_curve, median_bandwidth, fssd, fssd_test_locations, FSSDResult, fssd_optimize):
    _obj.__module__ = __name__
del _obj

__all__ = [
    "imq_stein_kernel",
    "ksd",
    "ksd_curve",
    "median_bandwidth",
    "fssd",
    "fssd_test_locations",
    "FSSDResult",
    "fssd_optimize",
    "EXACT_FSSD_ELEMENTS",
]
