"""hfmem's allocated peak against the peak of live tensors over a real whole training step on CPU.

Each case trains a tiny real architecture (tests/tiny_models.py) for two steps, PEFT LoRA (r=8 on q_proj,
v_proj, fp32 adapters) or a full fine-tune, pure bf16, fused AdamW, and takes the peak of the second step
from LiveBytes (tests/live_peak.py), which counts every storage an aten op returns. On CPU there is no CUDA
context and no allocator rounding, so the comparison is with hfmem's allocated_peak, with dropout masks in the
masked tensor's dtype as CPU keeps them. SDPA on CPU runs its flash kernel (`_scaled_dot_product_flash_attention
_for_cpu`), which keeps q, k, v, the output and logsumexp as CUDA's flash / memory-efficient kernels do, and the
attention mask when there is one, as CUDA's memory-efficient kernel does.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("peft")

from live_peak import LiveBytes  # noqa: E402
from step_peak import LORA_TARGETS, Case, cpu_activations, run_case  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.activations.layer import layer  # noqa: E402
from hfmem.memory.activations.spec import activation_spec  # noqa: E402
from hfmem.memory.estimate import Context, activation_settings  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

pytestmark = pytest.mark.slow  # real CPU training steps: `-m "not slow"` skips them locally

TOLERANCE = 0.05
LLAMA = "meta-llama/Meta-Llama-3-8B"


def test_tracker_counts_each_storage_once_until_it_is_freed() -> None:
    """Known allocations: a view and an in-place op add nothing, a freed tensor leaves, resizes are followed."""
    with LiveBytes() as live:
        a = torch.empty(1000)  # 4,000 bytes
        b = a.view(10, 100)
        c = torch.ones(500, dtype=torch.bfloat16)  # 1,000
        d = a + 1  # 4,000
        assert (live.current, live.peak) == (9000, 9000)
        del d
        a.add_(1)
        e = torch.zeros(250)  # 1,000
        assert live.current == 6000
        del a, b
        assert (live.current, live.peak) == (2000, 9000)
        f = torch.empty(0)
        f.resize_(100)
        assert live.current == 2400
        f.untyped_storage().resize_(0)  # FSDP2 frees its unsharded parameters so
        assert live.current == 2000
    assert c.numel() + e.numel() == 750


def test_tracker_sees_backward_and_its_peak() -> None:
    """w (n fp32) -> (3w).sum(): backward's ones_like and 3·grad exist with w and the loss, 8n + 8 bytes."""
    n = 1000
    w = torch.zeros(n, requires_grad=True)
    live = LiveBytes()
    with live:
        live.adopt(w, "weights")
        loss = (w * 3).sum()
        assert live.current == 4 * n + 4  # 3w went with the sum, which saves no tensor
        loss.backward()
        live.mark(w.grad, "gradients")
    assert live.peak == 8 * n + 8
    assert live.breakdown()["gradients"] == 4 * n


def test_bf16_products_return_the_tensor_the_bf16_kernel_returns(monkeypatch: pytest.MonkeyPatch) -> None:
    """LiveBytes computes bf16 matrix products in fp32 (live_peak.py says why): each returns what the bf16 kernel
    returns (shape, strides, dtype, storage size, values to bf16 rounding) and counts the same peak."""
    import live_peak

    a, b, bias = (torch.randn(*shape, dtype=torch.bfloat16) for shape in ((64, 48), (48, 32), (32,)))
    a3, b3, c3 = (torch.randn(*shape, dtype=torch.bfloat16) for shape in ((3, 64, 48), (3, 48, 32), (3, 64, 32)))
    column_major, experts = a.t().contiguous().t(), torch.randn(2, 48, 32, dtype=torch.bfloat16)
    offsets = torch.tensor([24, 64], dtype=torch.int32)
    products = {"mm": lambda: a @ b, "addmm": lambda: torch.addmm(bias, a, b), "bmm": lambda: torch.bmm(a3, b3),
                "baddbmm": lambda: torch.baddbmm(c3, a3, b3), "column-major": lambda: column_major @ b,
                "grouped": lambda: torch._grouped_mm(a, experts, offs=offsets)}

    def run(product):
        with LiveBytes() as live:
            out = product()
        return out, live.peak

    fast = {name: run(product) for name, product in products.items()}
    monkeypatch.setattr(live_peak, "_run", lambda func, args, kwargs: func(*args, **kwargs))
    kernel = {name: run(product) for name, product in products.items()}
    for name, (out, peak) in fast.items():
        real, real_peak = kernel[name]
        assert (out.shape, out.stride(), out.dtype, out.untyped_storage().nbytes(), peak) == (
            real.shape, real.stride(), real.dtype, real.untyped_storage().nbytes(), real_peak), name
        torch.testing.assert_close(out, real, rtol=0.02, atol=0.1, msg=name)


CASES = [
    Case(LLAMA, dropout=0.05, b=1),
    Case(LLAMA, b=4),
    Case(LLAMA, "eager", dropout=0.05),
    Case(LLAMA, dropout=0.05, b=4, layers=1),  # layer 0 alone: its adapters keep no dropout mask
    Case(LLAMA, "eager", b=4, layers=1),  # ... and eager attention keeps no q without a key adapter
    Case("mistralai/Mistral-7B-v0.1", extra=(("sliding_window", 128),)),  # the window reached: SDPA gets a mask
    Case("Qwen/Qwen2.5-0.5B", dropout=0.05, b=4, s=64, padding=16),
    Case("google/gemma-2b", dropout=0.05, s=64),
    Case("mistralai/Mixtral-8x7B-v0.1", s=64),
    # all-linear adapts the fused 3-D expert tensors through PEFT's ParamWrapper: W + B·A per layer, saved
    Case("mistralai/Mixtral-8x7B-v0.1", s=64, targets=("all-linear",)),
    Case("mistralai/Mixtral-8x7B-v0.1", s=64, targets=("all-linear",), checkpointing=True),
    Case(LLAMA, dropout=0.05, b=4, checkpointing=True, padding=16),
    Case(LLAMA, "eager", s=256, checkpointing=True),
    Case("microsoft/phi-2", b=4, s=64, checkpointing=True),
    Case(LLAMA, method="full"),
    Case(LLAMA, method="full", b=4, checkpointing=True),
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_allocated_peak_matches_a_real_training_step(case: Case) -> None:
    measured, predicted = run_case(case)
    assert set(measured.backends) == ({1} if case.attention == "sdpa" else set())  # CPU flash, no math fallback
    assert abs(predicted.allocated_peak / measured.peak - 1) <= TOLERANCE, (
        predicted.allocated_peak, measured.peak, measured.when, list(measured.breakdown.items())[:12])


def test_expert_lora_merged_or_per_expert() -> None:
    """The two Mixtral all-linear cases above measure the merged form: each layer keeps W + B·A of its whole expert
    stack. --expert-lora per-expert (per-expert Linears) keeps none, nor does a quantised base, whose experts hfmem
    counts as per-expert quantised Linears."""
    config = tiny_config("mistralai/Mixtral-8x7B-v0.1", 2)
    stack = 8 * (256 * 1792 + 896 * 256) * 2  # 8 experts' gate_up (256 x 2*896) and down (896 x 256), bf16

    def merged(**extra) -> int:
        act = cpu_activations(config, TrainingSettings(**{"method": "lora", "dtype": "bf16-pure", "micro_batch_size": 2,
                                                          "seq_len": 64, "lora_targets": ("all-linear",)} | extra))
        return act.layers[0].terms.get("lora_merged_experts", 0)

    assert merged() == stack
    assert merged(expert_lora="per-expert") == 0
    assert merged(method="qlora") == 0


def test_sdpa_with_a_padding_mask_keeps_a_mask_per_layer_and_repeated_kv() -> None:
    """Padded batches: each layer's SDPA keeps its own additive (b, 1, s, s) bf16 mask and K/V at the query
    heads' count; hfmem's attn.mask, attn.k and attn.v terms are those tensors."""
    b, s, layers, heads, head_dim = 2, 64, 2, 8, 32
    measured, _ = run_case(Case(LLAMA, b=b, s=s, padding=8))
    masks = sum(n for name, n in measured.breakdown.items() if name.endswith("self_attn:where"))
    assert masks == layers * b * s * s * 2
    repeated = sum(n for name, n in measured.breakdown.items() if name.endswith("self_attn:clone"))
    assert repeated == layers * 2 * b * heads * s * head_dim * 2
    plain, _ = run_case(Case(LLAMA, b=b, s=s))
    assert not any(name.endswith(("self_attn:where", "self_attn:clone")) for name in plain.breakdown)
    act = cpu_activations(tiny_config(LLAMA, layers), TrainingSettings(
        method="lora", dtype="bf16-pure", micro_batch_size=b, seq_len=s, attention="sdpa", lora_rank=8,
        lora_targets=LORA_TARGETS, padding_mask=True))
    terms = act.layers[0].terms
    assert terms["attn.mask"] * layers == masks
    assert (terms["attn.k"] + terms["attn.v"]) * layers == repeated


def test_layer_backward_working_set_is_the_mlps_gradients() -> None:
    """With checkpointing the peak is a layer's backward: what autograd allocates outside any module then (the
    gradients of the MLP's intermediates and of the residual stream, the loss's 4-byte seed gradient aside) is
    hfmem's backward_working."""
    measured, _ = run_case(Case(LLAMA, checkpointing=True))
    assert measured.when.startswith("backward:")
    working = sum(n for name, n in measured.breakdown.items()
                  if name.startswith("backward:") and name.count(":") == 1 and name != "backward:ones_like")
    b, s, h, width = 2, 128, 256, 896
    assert working == b * s * (2 * 2 * h + 3 * 2 * width)
    act = cpu_activations(tiny_config(LLAMA, 2), TrainingSettings(
        method="lora", dtype="bf16-pure", micro_batch_size=b, seq_len=s, attention="sdpa", lora_rank=8,
        lora_targets=LORA_TARGETS, gradient_checkpointing="full"))
    assert act.backward_working == working


def test_first_lora_layer_keeps_no_query_and_no_dropout_mask() -> None:
    """Layer 0 of a LoRA on q_proj, v_proj (frozen embeddings, no checkpointing): its input needs no gradient,
    so the adapters' dropout keeps no mask (only the dropped inputs lora_A reads) and eager QK^T keeps no q (the
    keys need no gradient): the step keeps K and V (repeated to 8 heads) and nothing else of the attention's
    inputs. hfmem's form of that layer has the same terms."""
    b, s, h, heads, head_dim = 4, 128, 256, 8, 32
    measured, _ = run_case(Case(LLAMA, "eager", dropout=0.05, b=b, s=s, layers=1))
    attention_inputs = sum(n for name, n in measured.breakdown.items()
                           if name.endswith(("self_attn:clone", "self_attn:add")))
    assert attention_inputs == 2 * b * heads * s * head_dim * 2
    dropout = {name: n for name, n in measured.breakdown.items() if ".lora_dropout." in name}
    assert sorted(name.rsplit(":", 1)[1] for name in dropout) == ["mul", "mul"]  # no mask (empty_like) kept
    config = tiny_config(LLAMA, 1)
    ctx = Context(read_architecture(config), build_inventory(config))
    settings = TrainingSettings(method="lora", dtype="bf16-pure", micro_batch_size=b, seq_len=s, attention="eager",
                                lora_rank=8, lora_targets=LORA_TARGETS, lora_dropout=0.05).validated()
    step = replace(activation_settings(ctx, settings, s), dropout_mask_bytes=None)
    first = layer(activation_spec(ctx.arch, ctx.inventory, step), "full_attention", "dense", s, input_grad=False)
    tokens = b * s
    assert "attn.q" not in first.terms
    assert (first.terms["attn.k"] + first.terms["attn.v"]) * tokens == attention_inputs
    assert first.terms["attn_in.lora_dropout"] * tokens == sum(dropout.values()) == 2 * 4 * h * tokens
