"""ResNet-20 for 32×32 images (He et al. 2016, §4.2: 3 stages × 3 basic blocks, 16/32/64
channels, global average pooling, a linear class layer).

Defaults are the paper's CIFAR network: BatchNorm, no convolution biases, parameter-free
"option A" shortcuts (stride-2 subsampling and zero-padded channels), about 0.27 M
parameters (269,722 for 10 classes). Options:

* ``norm=None | "batch" | "group"`` — BatchNorm keeps running statistics as buffers (one
  set per chain in :class:`~structmc.energy.ModuleEnergy`, not sampled); GroupNorm and no
  normalisation have none, so several chains run vectorised;
* ``conv_bias`` — default: biases only when there is no normalisation; ``False`` with
  ``norm=None`` is a bias-free network;
* ``shortcut="B"`` — 1×1 convolution (+ norm) projections where the shape changes;
* ``in_channels=1`` — the Fashion-MNIST variant: 28×28 grey inputs pass through the same
  stages (28 → 14 → 7) before the global pooling.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def _norm(kind: str | None, channels: int, groups: int) -> nn.Module:
    if kind is None:
        return nn.Identity()
    if kind == "batch":
        return nn.BatchNorm2d(channels)
    if kind == "group":
        return nn.GroupNorm(min(groups, channels), channels)
    raise ValueError(f"norm must be None, 'batch' or 'group', got {kind!r}")


class _PadShortcut(nn.Module):
    """Option A: subsample by ``stride`` and zero-pad the new channels (no parameters)."""

    def __init__(self, stride: int, extra_channels: int):
        super().__init__()
        self.stride, self.extra = stride, extra_channels

    def forward(self, x: Tensor) -> Tensor:
        x = x[:, :, :: self.stride, :: self.stride]
        half = self.extra // 2
        return F.pad(x, (0, 0, 0, 0, half, self.extra - half))


class BasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int, *, norm, conv_bias: bool, shortcut: str, groups: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=conv_bias)
        self.bn1 = _norm(norm, planes, groups)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=conv_bias)
        self.bn2 = _norm(norm, planes, groups)
        if stride == 1 and in_planes == planes:
            self.shortcut: nn.Module = nn.Identity()
        elif shortcut == "A":
            self.shortcut = _PadShortcut(stride, planes - in_planes)
        elif shortcut == "B":
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride, bias=conv_bias), _norm(norm, planes, groups)
            )
        else:
            raise ValueError(f"shortcut must be 'A' or 'B', got {shortcut!r}")

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class ResNet(nn.Module):
    """CIFAR-style ResNet with ``depth = 6n + 2`` (n blocks per stage)."""

    def __init__(
        self,
        depth: int = 20,
        num_classes: int = 10,
        *,
        in_channels: int = 3,
        norm: str | None = "batch",
        conv_bias: bool | None = None,
        shortcut: str = "A",
        width: int = 16,
        groups: int = 8,
    ):
        super().__init__()
        if (depth - 2) % 6 != 0:
            raise ValueError(f"depth must be 6n + 2, got {depth}")
        n = (depth - 2) // 6
        bias = (norm is None) if conv_bias is None else bool(conv_bias)
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=bias)
        self.bn1 = _norm(norm, width, groups)
        stages, planes_in = [], width
        for i, planes in enumerate((width, 2 * width, 4 * width)):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(
                    BasicBlock(planes_in, planes, stride, norm=norm, conv_bias=bias, shortcut=shortcut, groups=groups)
                )
                planes_in = planes
            stages.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3 = stages
        self.fc = nn.Linear(planes_in, num_classes)
        for m in self.modules():  # He initialisation, as in the paper
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def forward(self, x: Tensor) -> Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = torch.flatten(F.adaptive_avg_pool2d(out, 1), 1)
        return self.fc(out)


def resnet20(num_classes: int = 10, **kwargs) -> ResNet:
    """ResNet-20 (see module docstring); ``in_channels=1`` for Fashion-MNIST."""
    return ResNet(20, num_classes, **kwargs)
