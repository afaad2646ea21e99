"""The pSGLD paper's convolutional network (Li et al. 2016, following Jarrett et al. 2009).

Two 5×5 convolutions with 32 and 64 channels, each followed by ReLU and 2×2 max pooling,
then fully connected layers of 200 and 200 ReLU units and a linear class layer. The paper
does not state the convolution padding; the default ``padding=0`` ("valid", as in
Jarrett et al.) gives 28 → 24 → 12 → 8 → 4 and 1,024 features into the first fully
connected layer (299,306 parameters for MNIST); ``padding=2`` keeps the size ("same").
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn


class ConvNet(nn.Module):
    def __init__(
        self,
        in_channels: int = 1,
        num_classes: int = 10,
        *,
        input_size: int = 28,
        channels: Sequence[int] = (32, 64),
        kernel_size: int = 5,
        hidden: Sequence[int] = (200, 200),
        padding: int = 0,
    ):
        super().__init__()
        convs, c_in, size = [], in_channels, int(input_size)
        for c_out in channels:
            convs.append(nn.Conv2d(c_in, c_out, kernel_size, padding=padding))
            size = (size + 2 * padding - kernel_size + 1) // 2
            c_in = c_out
        if size < 1:
            raise ValueError(f"input_size {input_size} too small for {len(channels)} conv+pool stages")
        self.convs = nn.ModuleList(convs)
        self.pool = nn.MaxPool2d(2)
        widths = [c_in * size * size, *hidden]
        self.fcs = nn.ModuleList(nn.Linear(a, b) for a, b in zip(widths[:-1], widths[1:]))
        self.out = nn.Linear(widths[-1], num_classes)
        self.act = nn.ReLU()

    def forward(self, x: Tensor) -> Tensor:
        for conv in self.convs:
            x = self.pool(self.act(conv(x)))
        x = x.flatten(1)
        for fc in self.fcs:
            x = self.act(fc(x))
        return self.out(x)
