"""The 4-bit matmul's kept inputs, by bitsandbytes version, and what a training loop's references keep alive.

bitsandbytes < 0.43.2 kept each 4-bit layer's input on the autograd ctx (`ctx.tensors = (A, B)` in
MatMul4Bit; PR #1270 dropped A). Tensors saved with save_for_backward are freed by backward; ctx
attributes live as long as the graph node. A loop that still references the previous step's outputs
while the next forward runs (LitGPT keeps `logits`) therefore keeps every such input alive. Checked
with real autograd on CPU: a tiny Llama whose frozen linears (lm_head excepted) run through a Function
that stores its input either way, live bytes tracked storage by storage.
"""

from __future__ import annotations

import pytest

from test_loss_and_offload import _LiveBytes
from tiny_models import tiny_config

from hfmem.model.architecture import read_architecture
from hfmem.memory.estimate import estimate
from hfmem.model.meta import build_inventory
from hfmem.memory.settings import TrainingSettings

torch = pytest.importorskip("torch")
MODEL = "meta-llama/Meta-Llama-3-8B"
B, S = 2, 64


class _CtxHeld(torch.autograd.Function):
    """A frozen matmul that keeps its input as a ctx attribute, as bitsandbytes 0.42's MatMul4Bit did."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.tensors = (a, w)
        return a @ w.t()

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.tensors[1], None


class _Saved(torch.autograd.Function):
    """The same matmul keeping its input through save_for_backward."""

    @staticmethod
    def forward(ctx, a, w):
        ctx.save_for_backward(a, w)
        return a @ w.t()

    @staticmethod
    def backward(ctx, grad):
        return grad @ ctx.saved_tensors[1], None


def _alive_after_backward(function: type[torch.autograd.Function]) -> int:
    """Bytes still alive after one step's backward only because the step's logits are still referenced."""
    from saved_activations import build_model

    model = build_model(tiny_config(MODEL, 2), "sdpa")
    for p in model.parameters():
        p.requires_grad_(False)
    model.enable_input_require_grads()
    for name, module in model.model.layers.named_modules():
        if isinstance(module, torch.nn.Linear):
            module.forward = lambda x, m=module: function.apply(x, m.weight)
    ids = torch.randint(0, 1000, (B, S))
    with _LiveBytes(*model.parameters(), *model.buffers()) as live:
        logits = model(input_ids=ids).logits
        loss = logits.float().logsumexp(-1).mean()
        loss.backward()
        del loss
        before = live.live
        logits_bytes = logits.untyped_storage().nbytes()
        del logits
        after = live.live
    return before - after - logits_bytes


def _retained(kernel: str, previous_step_alive: bool) -> int:
    config = tiny_config(MODEL, 2)
    settings = TrainingSettings(method="qlora", dtype="bf16-pure", adapter_dtype="compute", micro_batch_size=B, seq_len=S,
                                attention="sdpa", qlora_kernel=kernel, previous_step_alive=previous_step_alive)
    return estimate(read_architecture(config), build_inventory(config), settings).activations.retained


def test_ctx_held_inputs_outlive_backward_while_the_graph_is_referenced() -> None:
    # Both variants keep the embedding output and its .grad alive (enable_input_require_grads makes it a leaf
    # the graph holds): 2 x b·s·h bf16. What the ctx attributes add on top is the retained term.
    baseline = _alive_after_backward(_Saved)
    assert baseline == 2 * B * S * 256 * 2
    measured = _alive_after_backward(_CtxHeld) - baseline
    predicted = _retained("bitsandbytes-legacy", previous_step_alive=True)
    # per layer: the normed input (q/k/v share it), the attention output before o_proj, the MLP's normed input
    # (gate/up share it) and the down projection's input
    assert predicted == 2 * B * S * 2 * (256 + 256 + 256 + 896)
    assert measured == pytest.approx(predicted, rel=0.01)


@pytest.mark.parametrize("kernel, alive", [("bitsandbytes", True), ("torchao", True), ("bitsandbytes-legacy", False)])
def test_nothing_is_retained_without_both_conditions(kernel: str, alive: bool) -> None:
    assert _retained(kernel, alive) == 0


def test_current_bitsandbytes_keeps_no_input_and_legacy_does() -> None:
    config = tiny_config(MODEL, 2)
    arch, inventory = read_architecture(config), build_inventory(config)
    base = TrainingSettings(method="qlora", dtype="bf16-pure", adapter_dtype="compute", micro_batch_size=B, seq_len=S,
                            attention="sdpa", lora_targets=("q_proj", "v_proj"))
    saved = {k: estimate(arch, inventory, TrainingSettings(**{**base.__dict__, "qlora_kernel": k})).activations.saved
             for k in ("bitsandbytes", "torchao", "bitsandbytes-legacy")}
    assert saved["bitsandbytes"] == saved["torchao"]
    assert saved["bitsandbytes-legacy"] > saved["bitsandbytes"]
