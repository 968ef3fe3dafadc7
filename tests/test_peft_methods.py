"""PEFT's methods beyond LoRA: trainable parameters against PEFT's own model, and what they save for backward
against autograd's saved tensors on CPU."""

from __future__ import annotations

import pytest

from hfmem.memory.settings import TrainingSettings

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.model_state import parameter_split  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

FEEDFORWARD = {"openai-community/gpt2": "mlp.c_proj", "meta-llama/Meta-Llama-3-8B": "down_proj",
               "mistralai/Mistral-7B-v0.1": "down_proj", "microsoft/phi-2": "fc2", "tiiuae/falcon-7b": "dense_4h_to_h",
               "Qwen/Qwen2.5-0.5B": "down_proj", "google/gemma-2b": "down_proj",
               "stabilityai/stablelm-base-alpha-3b": "dense_4h_to_h"}
"""The dense fixture families, each with its MLP output projection as PEFT's IA3 mapping names it."""
METHODS = ("dora", "lora-fa", "vera", "ia3", "oft", "boft", "prompt-tuning", "prefix-tuning")
BOFT_SAVED = {"tiiuae/falcon-7b"}
"""The family whose BOFT saved tensors the suite checks (BOFT's forward is the suite's slowest on CPU; every family
runs in `python bench/peft_methods.py boft`)."""


def peft_config(method: str, leaves: list[str], feedforward: str, rank: int = 8, virtual_tokens: int = 20):
    """The PEFT config of `method` on every linear layer but the head (IA3: the MLP output scaled on its input)."""
    if method in {"dora", "lora-fa"}:
        return peft.LoraConfig(r=rank, target_modules=leaves, use_dora=method == "dora")
    if method == "vera":
        return peft.VeraConfig(r=rank, target_modules=leaves)
    if method == "oft":
        return peft.OFTConfig(oft_block_size=32, target_modules=leaves)
    if method == "boft":  # PEFT's defaults (block size 4; butterfly factor 1, what it runs without its CUDA extension)
        return peft.BOFTConfig(boft_block_size=4, boft_n_butterfly_factor=1, target_modules=leaves)
    if method == "ia3":
        split = "." in feedforward  # GPT-2's c_proj is both the attention's and the MLP's output
        targets = [n for n in leaves if n != feedforward.rsplit(".", 1)[-1] or not split]
        targets += ["attn.c_proj", feedforward] if split else []
        return peft.IA3Config(target_modules=targets, feedforward_modules=[feedforward])
    cls = peft.PromptTuningConfig if method == "prompt-tuning" else peft.PrefixTuningConfig
    return cls(task_type="CAUSAL_LM", num_virtual_tokens=virtual_tokens)


def peft_model(model_id: str, method: str, layers: int, dtype, rank: int = 8, virtual_tokens: int = 20):
    """The tiny model of `model_id` wrapped by PEFT for `method` (LoRA-FA: A frozen by create_lorafa_optimizer)."""
    config = tiny_config(model_id, layers)
    leaves = sorted({g.name for g in build_inventory(config).linears if g.component != "head"})
    wrapped = peft.get_peft_model(build_model(config, "sdpa", dtype),
                                  peft_config(method, leaves, FEEDFORWARD[model_id], rank, virtual_tokens))
    if method == "lora-fa":
        from peft.optimizers import create_lorafa_optimizer

        create_lorafa_optimizer(wrapped, r=rank, lora_alpha=16, lr=1e-4)
    wrapped.train()
    return wrapped


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model_id", sorted(FEEDFORWARD))
def test_trainable_parameters_equal_peft(model_id: str, method: str) -> None:
    if method in {"oft", "boft"} and model_id == "openai-community/gpt2":
        pytest.skip("PEFT's OFT refuses GPT-2's Conv1D layers, as hfmem does (test_oft_refuses_conv1d_like_peft)")
    wrapped = peft_model(model_id, method, 2, torch.float32)
    trainable = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    config = tiny_config(model_id, 2)
    settings = TrainingSettings(method=method, lora_rank=8, num_virtual_tokens=20).validated()
    split = parameter_split(read_architecture(config), build_inventory(config), settings)
    assert split.trainable == trainable
    if method in {"lora-fa", "vera", "boft"}:  # LoRA-FA's frozen A; VeRA's shared projections, BOFT's boft_P (buffers)
        buffers = sum(b.numel() for n, b in wrapped.named_buffers() if "vera_" in n or "boft_P" in n)
        frozen_a = sum(p.numel() for n, p in wrapped.named_parameters() if "lora_A" in n and not p.requires_grad)
        assert split.frozen_adapters == (frozen_a if method == "lora-fa" else buffers) > 0


# ---------------------------------------------------------------------------------------------
# What each method saves for backward: a pure bf16 model with PEFT's fp32 adapters (no autocast), as the LoRA tests

B, S = 2, 100


def alive_saved_bytes(model, batch: int, seq: int) -> tuple[int, list[int]]:
    """Bytes of the unique non-parameter, non-buffer storages saved for backward and still alive after forward + loss.

    DoRA builds lora_weight = B·A through autograd on each forward and drops it (peft/tuners/lora/dora.py
    get_lora_weight): what that graph saved is freed at once, and its storages are reused, so a storage counts only
    while its saved tensor lives (a freed address seen again counts its new tensor)."""
    import weakref

    from live_peak import Fp32Products
    from saved_activations import sdpa_backends

    params = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, tuple[int, weakref.ref]] = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params and (ptr not in seen or seen[ptr][1]() is None):
            seen[ptr] = (t.untyped_storage().nbytes(), weakref.ref(t))
        return t

    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    with sdpa_backends() as backends, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), Fp32Products():
        out = model(input_ids=ids, labels=ids, use_cache=False)
    assert out.loss.requires_grad
    return sum(n for n, ref in seen.values() if ref() is not None), backends


def predicted_saved(model_id: str, method: str, layers: int, backends: list[int]):
    """hfmem's activation estimate for the tiny model, bf16-pure with fp32 adapters, on the SDPA backend torch chose."""
    import dataclasses

    from hfmem.memory.activations import estimate_activations
    from hfmem.memory.estimate import Context, activation_settings

    config = tiny_config(model_id, layers)
    ctx = Context(read_architecture(config), build_inventory(config))
    settings = TrainingSettings(method=method, lora_rank=8, num_virtual_tokens=20, attention="sdpa",
                                micro_batch_size=B, dtype="bf16-pure").validated()
    kernel = "sdpa_math" if backends and all(b == 0 for b in backends) else "sdpa"
    step = dataclasses.replace(activation_settings(ctx, settings, S), attention=kernel, dropout_mask_bytes=None)
    return estimate_activations(ctx.arch, ctx.inventory, step)


@pytest.mark.parametrize("method", METHODS)
@pytest.mark.parametrize("model_id", sorted(FEEDFORWARD))
def test_saved_tensors_match_peft_within_5_percent(model_id: str, method: str) -> None:
    if method in {"oft", "boft"} and model_id == "openai-community/gpt2":
        pytest.skip("PEFT's OFT refuses GPT-2's Conv1D layers, as hfmem does (test_oft_refuses_conv1d_like_peft)")
    if method == "boft" and model_id not in BOFT_SAVED:
        pytest.skip("BOFT's in x in rotations make its forward slow on CPU: one family here, every family in "
                    "`python bench/peft_methods.py boft`")
    measured = {}
    for layers in (1, 2):
        measured[layers], backends = alive_saved_bytes(peft_model(model_id, method, layers, torch.bfloat16), B, S)
    est = predicted_saved(model_id, method, 2, backends)
    assert est.layers[-1].bytes == pytest.approx(measured[2] - measured[1], rel=0.05)
    assert est.stored == pytest.approx(measured[2], rel=0.05)


def test_dora_saves_more_than_lora_by_its_scaled_outputs() -> None:
    """DoRA keeps each adapted layer's base output (compute dtype) and adapter output (fp32) for the magnitude's
    gradient: (2 + 4) bytes x out features per token more than LoRA on the same layers."""
    from hfmem.memory.estimate import Context, activations_for

    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    ctx = Context(read_architecture(config), build_inventory(config))
    per = {m: activations_for(ctx, TrainingSettings(method=m, dtype="bf16-pure", seq_len=S).validated(), S)
           for m in ("lora", "dora")}
    outs = 2 * (256 + 64 + 64 + 256 + 896 + 896 + 256)  # q, k, v, o, gate, up, down per layer, two layers
    assert per["dora"].stored - per["lora"].stored == S * outs * (2 + 4)


@pytest.mark.parametrize(("in_features", "out_features"), [(256, 896), (896, 256), (512, 512)])
def test_dora_forward_workspace_equals_live_tensors(in_features: int, out_features: int) -> None:
    """One DoRA layer's forward (bf16 weight, fp32 adapters): the live-tensor peak above what it leaves alive is the
    column-norm workspace hfmem adds to the layer being computed (x_eye, B·A, the fp32 weight, scaled and summed)."""
    from live_peak import LiveBytes

    from hfmem.memory.peft_methods import dora_workspace
    from hfmem.model.inventory import LinearGroup

    class One(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q = torch.nn.Linear(in_features, out_features, bias=False)

        def forward(self, x):
            return self.q(x)

    wrapped = peft.get_peft_model(One().to(torch.bfloat16), peft.LoraConfig(r=8, target_modules=["q"], use_dora=True))
    wrapped.train()
    x = torch.randn(1, 4, in_features, dtype=torch.bfloat16, requires_grad=True)
    with LiveBytes() as tracker:
        tracker.adopt([*wrapped.parameters(), x], "model")
        tracker.reset_peak()
        before = tracker.current
        out = wrapped(x)
        workspace = tracker.peak - tracker.current
    assert out.requires_grad and tracker.current > before
    group = LinearGroup("q", "attention", in_features, out_features, 1, "linear", False)
    assert dora_workspace((group,), 8, 4, 2) == pytest.approx(workspace, rel=0.02)


def test_oft_refuses_conv1d_like_peft() -> None:
    """PEFT's OFT adapts nn.Linear (and Conv2d, Embedding) only: GPT-2's Conv1D is refused by both."""
    from hfmem.errors import InvalidInputError

    with pytest.raises(TypeError, match="Conv1D"):
        peft_model("openai-community/gpt2", "oft", 1, torch.float32)
    config = tiny_config("openai-community/gpt2", 1)
    with pytest.raises(InvalidInputError, match="c_attn"):
        parameter_split(read_architecture(config), build_inventory(config), TrainingSettings(method="oft").validated())



def test_the_assumptions_line_names_each_adapter_s_size() -> None:
    """The `assumes:` line gives OFT's and BOFT's rotation blocks where LoRA's rank would mean nothing, each once."""
    from tiny_models import reference_model

    from hfmem.memory.estimate import estimate
    from hfmem.render.common import settings_line

    arch, inventory = reference_model("meta-llama/Meta-Llama-3-8B")
    report = {"estimates": {m: estimate(arch, inventory, TrainingSettings(method=m, oft_block_size=64,
                                                                          boft_block_size=8)).to_dict()
                            for m in ("boft", "oft", "lora", "qlora")}}
    line = settings_line(report)
    assert line.endswith(" · BOFT blocks of 8 × 1 butterfly, OFT blocks of 64, LoRA r=16 on all-linear")
