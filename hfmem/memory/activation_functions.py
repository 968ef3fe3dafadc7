"""What each MLP activation function saves for backward, by the name its code calls it: one table, read by the
`activation_fn` setting's choices and by the MLP formulas.

"in" = its input, "out" = its output (shared with what the next op saves), "t" = an internal temporary. The
transformers names (ACT2FN keys) were measured with saved_tensors_hooks on torch 2.13 (tests/test_activations.py);
`gelu_tanh_fused` is torch.nn.functional.gelu(x, approximate="tanh") called as one op by the training code itself
(LitGPT, nanoGPT), where the model's own code may spell the tanh GELU out elementwise (transformers' gelu_new).
"""

from __future__ import annotations

ACTIVATION_SAVES: dict[str, tuple[str, ...]] = {
    "silu": ("in",), "swish": ("in",), "gelu": ("in",), "gelu_pytorch_tanh": ("in",), "gelu_tanh_fused": ("in",),
    "gelu_10": ("in", "t"), "gelu_new": ("in", "t", "t", "t"), "gelu_python": ("in", "t", "t"),
    "gelu_python_tanh": ("in", "t", "t", "t"), "gelu_accurate": ("in", "t", "t", "t"),
    "gelu_fast": ("in",) + ("t",) * 6, "quick_gelu": ("in", "t"), "relu": ("out",), "tanh": ("out",),
    "sigmoid": ("out",), "relu2": ("t",), "relu6": ("in",), "leaky_relu": ("in",), "mish": ("in",),
    "hardswish": ("in",), "laplace": ("in",), "linear": (), "xielu": ("in", "t"),
}
UNKNOWN_SAVES = ("in",)
"""An activation this table does not know is assumed to keep its input, as most elementwise functions do."""


def activation_saves(name: str) -> tuple[str, ...]:
    """What the activation function `name` saves ("in", "out", "t" per tensor)."""
    return ACTIVATION_SAVES.get(name, UNKNOWN_SAVES)
