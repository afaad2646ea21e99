"""Multilayer perceptrons with configurable widths and activations.

``MLP((784, 50, 50, 10), "relu")`` is the structured-SGMCMC MNIST network (42,200 weights),
``MLP((784, 400, 400, 10))`` the pSGLD one, ``MLP((784, 100, 10), "softmax")`` the MAMBA one
(softmax hidden activation, as in the authors' code), ``MLP((784, 10, 10, 10, 10),
"sigmoid")`` the blocked-Gibbs one (8,180 parameters) and ``MLP((2, 2, 1), "sigmoid")`` /
``MLP((2, 2, 2, 2, 2, 2, 2, 1), "sigmoid")`` its noisy-XOR ones. The last layer is linear
(logits or a regression mean; the likelihood applies softmax/sigmoid). Layers are
``layers.0``, ``layers.1``, ...; each stores its weight (out × in, row-major) then its
bias, which is the per-layer ``W, b`` order of the blocked-Gibbs reference code.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from torch import Tensor, nn

ActivationSpec = str | nn.Module | Callable[[], nn.Module]  # what make_activation takes

ACTIVATIONS: dict[str, Callable[[], nn.Module]] = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
    "softmax": lambda: nn.Softmax(dim=-1),
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "softplus": nn.Softplus,
    "leaky_relu": nn.LeakyReLU,
    "identity": nn.Identity,
}


def make_activation(act: ActivationSpec) -> nn.Module:
    if isinstance(act, nn.Module):
        return act
    if isinstance(act, str):
        try:
            return ACTIVATIONS[act.lower()]()
        except KeyError:
            raise ValueError(f"unknown activation {act!r}; choose from {sorted(ACTIVATIONS)}") from None
    if callable(act):
        return act()
    raise TypeError(f"activation must be a name, a module or a module factory, got {type(act).__name__}")


class MLP(nn.Module):
    """Fully connected network ``widths[0] -> ... -> widths[-1]``.

    ``activation`` is one activation for every hidden layer or a sequence with one per hidden
    layer; ``output_activation`` (default none) follows the last layer. Inputs with more than
    two dimensions are flattened, so image tensors ``[n, 1, 28, 28]`` go in as they are.
    """

    def __init__(
        self,
        widths: Sequence[int],
        activation: ActivationSpec | list[ActivationSpec] | tuple[ActivationSpec, ...] = "relu",
        *,
        output_activation: str | nn.Module | None = None,
        bias: bool = True,
    ):
        super().__init__()
        widths = tuple(int(w) for w in widths)
        if len(widths) < 2 or any(w < 1 for w in widths):
            raise ValueError(f"widths needs at least an input and an output size, all positive; got {widths}")
        self.widths = widths
        n_hidden = len(widths) - 2
        acts = list(activation) if isinstance(activation, (list, tuple)) else [activation] * n_hidden
        if len(acts) != n_hidden:
            raise ValueError(f"{len(acts)} activations given for {n_hidden} hidden layers")
        self.layers = nn.ModuleList(nn.Linear(a, b, bias=bias) for a, b in zip(widths[:-1], widths[1:]))
        self.activations = nn.ModuleList(make_activation(a) for a in acts)
        self.output_activation = None if output_activation is None else make_activation(output_activation)

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() > 2:
            x = x.flatten(1)
        for layer, act in zip(self.layers[:-1], self.activations):
            x = act(layer(x))
        x = self.layers[-1](x)
        return x if self.output_activation is None else self.output_activation(x)

    def extra_repr(self) -> str:
        return f"widths={self.widths}"
