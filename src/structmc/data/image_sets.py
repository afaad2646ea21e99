"""Image subsets for experiments: :func:`load_image_subset` (a registered image set scaled to
[0, 1], never downloaded, or a seeded synthetic stand-in) and :class:`ImageData`."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import torch

from .files import DataError
from .named_sets import load

IMAGE_SOURCES = ("files", "auto", "synthetic")
_IDX_FILES = (
    "train-images-idx3-ubyte.gz",
    "train-labels-idx1-ubyte.gz",
    "t10k-images-idx3-ubyte.gz",
    "t10k-labels-idx1-ubyte.gz",
)


def synthetic_images(num_train: int, num_test: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """A small MNIST-shaped stand-in ``(x_train, y_train, x_test, y_test)``: images
    ``[N, 1, 28, 28]`` in [0, 1], 10 classes; one random blocky prototype per class, shifted
    by up to 2 pixels, scaled and noised per image (its own generator, seeded ``seed + 4242``).
    Not a benchmark: it lets an experiment run end to end where the files are missing."""
    g = torch.Generator().manual_seed(int(seed) + 4242)
    protos = (torch.rand(10, 1, 7, 7, generator=g) > 0.6).float()
    protos = torch.nn.functional.interpolate(protos, size=(28, 28), mode="bilinear", align_corners=False)

    def draw(n: int):
        y = torch.arange(n) % 10
        y = y[torch.randperm(n, generator=g)]
        x = protos[y] * (0.6 + 0.4 * torch.rand(n, 1, 1, 1, generator=g))
        shifts = torch.randint(-2, 3, (n, 2), generator=g)
        x = torch.stack([torch.roll(x[i], tuple(shifts[i].tolist()), dims=(1, 2)) for i in range(n)])
        x = (x + 0.15 * torch.randn(x.shape, generator=g)).clamp_(0, 1)
        return x, y

    x_tr, y_tr = draw(num_train)
    x_te, y_te = draw(num_test)
    return x_tr, y_tr, x_te, y_te


@dataclass
class ImageData:
    """Unit-scaled images and labels (:func:`load_image_subset`) and where they came from:
    ``source`` is ``"files"`` or ``"synthetic"``, ``data_dir`` the folder read (``None``:
    the synthetic stand-in, or the loaders' default search)."""

    name: str
    x_train: torch.Tensor
    y_train: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor
    source: str
    data_dir: str | None

    def to(self, device) -> ImageData:
        """The same images and labels on ``device`` (a copy only where the device changes)."""
        return replace(
            self,
            x_train=self.x_train.to(device),
            y_train=self.y_train.to(device),
            x_test=self.x_test.to(device),
            y_test=self.y_test.to(device),
        )


def load_image_subset(
    name: str,
    *,
    data: str = "files",
    data_dir=None,
    num_train: int | None = None,
    num_test: int | None = None,
    seed: int = 0,
) -> ImageData:
    """``name`` (a registered image set, e.g. ``"mnist"`` or ``"fashion-mnist"``) scaled to
    [0, 1] (``normalize="unit"``), never downloaded, as :class:`ImageData`; a random subset
    of ``num_train`` training images (drawn with ``seed``, kept in file order) and the first
    ``num_test`` test images (``None``: all).

    ``data``: ``"files"`` reads the files from ``data_dir`` (``None``: ``$STRUCTMC_DATA``,
    then the cache) and raises ``FileNotFoundError`` naming the folder when they are missing
    or unreadable; ``"auto"`` falls back to :func:`synthetic_images` (``num_train`` or 1,000
    and ``num_test`` or 500 images) instead; ``"synthetic"`` uses the stand-in directly."""

    if data not in IMAGE_SOURCES:
        raise ValueError(f"data must be 'files', 'auto' or 'synthetic', got {data!r}")
    data_dir = Path(data_dir).expanduser() if data_dir else None
    if data != "synthetic":
        try:
            ds = load(name, data_dir=None if data_dir is None else str(data_dir), download=False, normalize="unit")
        except (DataError, FileNotFoundError, OSError) as err:
            if data == "files":
                where = data_dir / name if data_dir is not None else "the default folders ($STRUCTMC_DATA, the cache)"
                files = f"IDX files ({', '.join(_IDX_FILES)})" if name in ("mnist", "fashion-mnist") else "files"
                raise FileNotFoundError(
                    f"{name}: the {files} were not found or not readable in {where} "
                    f"(data_dir={data_dir}; pass data_dir= (an experiment's Config.data_dir) or set $STRUCTMC_DATA to "
                    f"the folder holding '{name}/'); use data='auto' or 'synthetic' for the synthetic stand-in. "
                    f"Cause: {err}"
                ) from err
        else:
            x_tr, y_tr, x_te, y_te = ds.x_train, ds.y_train, ds.x_test, ds.y_test
            if num_train is not None and num_train < len(y_tr):
                idx = torch.randperm(len(y_tr), generator=torch.Generator().manual_seed(seed))[:num_train].sort().values
                x_tr, y_tr = x_tr[idx], y_tr[idx]
            if num_test is not None and num_test < len(y_te):
                x_te, y_te = x_te[:num_test], y_te[:num_test]
            return ImageData(name, x_tr, y_tr, x_te, y_te, "files", None if data_dir is None else str(data_dir))
    x_tr, y_tr, x_te, y_te = synthetic_images(num_train or 1000, num_test or 500, seed)
    return ImageData(name, x_tr, y_tr, x_te, y_te, "synthetic", None)
