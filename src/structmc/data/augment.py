"""Image transforms of the blocked-Gibbs augmentation experiment (Papamarkou 2023, Sect. 5.8),
written in torch alone and driven by an explicit ``torch.Generator``.

Images are float tensors ``[N, C, H, W]`` (or ``[N, H, W]``, returned in the same shape),
usually in [0, 1] (``structmc.data.load(..., normalize="unit")``). Every random draw comes
from the ``generator`` passed in (drawn on the CPU, one batch of numbers per call), so the
same seed gives the same transformed set on any device.

================  ===========================================================================
:func:`rotate`    a uniform angle in ``[-degrees, degrees]`` per image (the paper: ±30°),
                  counter-clockwise as displayed for a positive angle, about the image centre,
                  outside filled with ``fill``; ``affine_grid`` / ``grid_sample``,
                  nearest-neighbour by default (torchvision's ``RandomRotation`` default)
:func:`gaussian_blur`  with probability ``p`` (0.9) a ``kernel_size`` (9) Gaussian kernel of
                  σ ~ U[``sigma``] (``(1, 1.5)``), separable, reflect padding (torchvision's
                  ``RandomApply([GaussianBlur(9, (1, 1.5))], 0.9)``)
:func:`invert`    with probability ``p`` (0.5) ``max_value − x`` (torchvision ``RandomInvert``)
================  ===========================================================================

The deterministic cores :func:`rotate_by` (given angles) and :func:`blur_with` (given σ) are
public for tests and figures. :data:`TRANSFORMS` maps the paper's names (``"rotation"``,
``"blur"``, ``"inversion"``) to the transforms with the paper's settings;
:func:`apply_transform` applies one by name with a seed.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = [
    "rotate",
    "rotate_by",
    "gaussian_blur",
    "blur_with",
    "gaussian_kernel1d",
    "invert",
    "TRANSFORMS",
    "apply_transform",
]


def _as_nchw(images: Tensor) -> tuple[Tensor, bool]:
    if not isinstance(images, Tensor) or not images.is_floating_point():
        raise TypeError("images must be a floating-point tensor [N, C, H, W] or [N, H, W]")
    if images.dim() == 3:
        return images.unsqueeze(1), True
    if images.dim() != 4:
        raise ValueError(f"images must have shape [N, C, H, W] or [N, H, W], got {tuple(images.shape)}")
    return images, False


def _check_generator(generator) -> torch.Generator:
    if not isinstance(generator, torch.Generator):
        raise TypeError("pass an explicit torch.Generator (e.g. torch.Generator().manual_seed(0))")
    return generator


def _uniform(n: int, lo: float, hi: float, generator: torch.Generator) -> Tensor:
    return lo + (hi - lo) * torch.rand(n, generator=generator, dtype=torch.float64, device=generator.device)


# ---------------------------------------------------------------------------------------
# rotation
# ---------------------------------------------------------------------------------------
_CHUNK = 4096  # images per grid_sample / conv2d call (bounds the temporary memory)


def _per_image(values, n: int, what: str) -> Tensor:
    """One float64 parameter per image: a number is shared, a sequence must have ``n``."""
    v = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if v.numel() == 1:
        v = v.expand(n)
    if v.numel() != n:
        raise ValueError(f"one {what} per image needed ({n}), got {v.numel()}")
    return v


def _chunked(fn, x: Tensor, params: Tensor) -> Tensor:
    """``fn`` over chunks of ``_CHUNK`` images (bounded memory for whole training sets)."""
    return torch.cat([fn(x[i : i + _CHUNK], params[i : i + _CHUNK]) for i in range(0, x.shape[0], _CHUNK)])


def rotate_by(images: Tensor, angles, *, mode: str = "nearest", fill: float = 0.0) -> Tensor:
    """Rotate image i by ``angles[i]`` degrees (a number: all images), counter-clockwise as
    displayed (row 0 at the top), about the centre; pixels from outside the image get
    ``fill``. ``angles = 0`` gives the images back (exactly with ``mode="nearest"``)."""
    x, squeezed = _as_nchw(images)
    N = x.shape[0]
    a = _per_image(angles, N, "angle")
    if N > _CHUNK:
        return _restore(_chunked(lambda xs, ps: rotate_by(xs, ps, mode=mode, fill=fill), x, a), squeezed)
    C, H, W = x.shape[1:]
    rad = a * (math.pi / 180.0)
    c, s = rad.cos(), rad.sin()
    # output pixel p (centred, pixel units, y down) samples input R p, R = [[c, -s], [s, c]],
    # in affine_grid's normalised coordinates (x / (W/2), y / (H/2))
    theta = torch.zeros(N, 2, 3, dtype=torch.float64)
    theta[:, 0, 0], theta[:, 0, 1] = c, -s * H / W
    theta[:, 1, 0], theta[:, 1, 1] = s * W / H, c
    grid = F.affine_grid(theta.to(device=x.device, dtype=x.dtype), [N, C, H, W], align_corners=False)
    if fill == 0.0:
        return _restore(F.grid_sample(x, grid, mode=mode, padding_mode="zeros", align_corners=False), squeezed)
    # a non-zero fill: sample x − fill (zeros outside) and add fill back
    out = F.grid_sample(x - fill, grid, mode=mode, padding_mode="zeros", align_corners=False) + fill
    return _restore(out, squeezed)


def rotate(
    images: Tensor,
    degrees: float | tuple[float, float] = 30.0,
    *,
    generator: torch.Generator,
    mode: str = "nearest",
    fill: float = 0.0,
) -> Tensor:
    """Rotate every image by its own angle ~ U[−degrees, degrees] (or U[lo, hi] for a pair)."""
    _check_generator(generator)
    lo, hi = (-float(degrees), float(degrees)) if not isinstance(degrees, (tuple, list)) else map(float, degrees)
    if lo > hi:
        raise ValueError(f"degrees range must have lo <= hi, got {(lo, hi)}")
    n = images.shape[0]
    return rotate_by(images, _uniform(n, lo, hi, generator), mode=mode, fill=fill)


# ---------------------------------------------------------------------------------------
# Gaussian blur
# ---------------------------------------------------------------------------------------
def gaussian_kernel1d(kernel_size: int, sigma: Tensor) -> Tensor:
    """``[len(sigma), kernel_size]`` normalised Gaussian kernels (torchvision's formula:
    taps at −(k−1)/2 … (k−1)/2, weights exp(−½(t/σ)²) / Σ)."""
    k = int(kernel_size)
    if k < 1 or k % 2 == 0:
        raise ValueError(f"kernel_size must be a positive odd integer, got {kernel_size}")
    sigma = torch.as_tensor(sigma, dtype=torch.float64).reshape(-1, 1)
    if not bool((sigma > 0).all()):
        raise ValueError("sigma must be positive")
    t = torch.linspace(-(k - 1) / 2, (k - 1) / 2, k, dtype=torch.float64)
    w = torch.exp(-0.5 * (t / sigma) ** 2)
    return w / w.sum(1, keepdim=True)


def blur_with(images: Tensor, sigmas, *, kernel_size: int = 9) -> Tensor:
    """Blur image i with a ``kernel_size`` Gaussian of standard deviation ``sigmas[i]``
    (a number: all images); separable, reflect padding, so a constant image stays constant."""
    x, squeezed = _as_nchw(images)
    N, C, H, W = x.shape
    k = int(kernel_size)
    pad = k // 2
    if pad >= H or pad >= W:
        raise ValueError(f"kernel_size {k} too large for {H}x{W} images (reflect padding)")
    s = _per_image(sigmas, N, "sigma")
    if N > _CHUNK:
        return _restore(_chunked(lambda xs, ps: blur_with(xs, ps, kernel_size=k), x, s), squeezed)
    kern = gaussian_kernel1d(k, s).to(device=x.device, dtype=x.dtype)  # [N, k]
    kern = kern.repeat_interleave(C, 0)  # [N*C, k]: one depthwise filter per (image, channel)
    y = F.pad(x.reshape(1, N * C, H, W), (pad, pad, pad, pad), mode="reflect")
    y = F.conv2d(y, kern.view(N * C, 1, 1, k), groups=N * C)  # along W
    y = F.conv2d(y, kern.view(N * C, 1, k, 1), groups=N * C)  # along H
    return _restore(y.reshape(N, C, H, W), squeezed)


def gaussian_blur(
    images: Tensor,
    kernel_size: int = 9,
    sigma: tuple[float, float] = (1.0, 1.5),
    p: float = 0.9,
    *,
    generator: torch.Generator,
) -> Tensor:
    """With probability ``p`` per image, blur it with σ ~ U[sigma]; the others are unchanged."""
    _check_generator(generator)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    lo, hi = map(float, sigma)
    n = images.shape[0]
    apply = torch.rand(n, generator=generator, dtype=torch.float64, device=generator.device) < p
    sig = _uniform(n, lo, hi, generator)
    out = images.clone()
    idx = torch.nonzero(apply).flatten()
    if idx.numel():
        out[idx.to(images.device)] = blur_with(images[idx.to(images.device)], sig[idx], kernel_size=kernel_size)
    return out


# ---------------------------------------------------------------------------------------
# colour inversion
# ---------------------------------------------------------------------------------------
def invert(images: Tensor, p: float = 0.5, *, generator: torch.Generator, max_value: float = 1.0) -> Tensor:
    """With probability ``p`` per image, ``max_value − x`` (1 for [0, 1] images, 255 for raw)."""
    _check_generator(generator)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p must lie in [0, 1], got {p}")
    x, squeezed = _as_nchw(images)
    apply = torch.rand(x.shape[0], generator=generator, dtype=torch.float64, device=generator.device) < p
    apply = apply.to(x.device).view(-1, 1, 1, 1)
    return _restore(torch.where(apply, max_value - x, x), squeezed)


def _restore(x: Tensor, squeezed: bool) -> Tensor:
    return x.squeeze(1) if squeezed else x


TRANSFORMS: dict[str, Callable[..., Tensor]] = {
    "rotation": lambda images, generator: rotate(images, 30.0, generator=generator),
    "blur": lambda images, generator: gaussian_blur(images, 9, (1.0, 1.5), 0.9, generator=generator),
    "inversion": lambda images, generator: invert(images, 0.5, generator=generator),
}


def apply_transform(name: str, images: Tensor, seed: int | torch.Generator) -> Tensor:
    """The paper's transform ``name`` (a key of :data:`TRANSFORMS`) with its settings, driven by
    ``seed`` (an int, or a generator used as is)."""
    if name not in TRANSFORMS:
        raise ValueError(f"unknown transform {name!r}; choose from {sorted(TRANSFORMS)}")
    gen = seed if isinstance(seed, torch.Generator) else torch.Generator().manual_seed(int(seed))
    return TRANSFORMS[name](images, gen)
