"""compile_layers against real compiled decoder layers on CPU: what torch.compile's partitioner saves for backward.

Each tiny model (tests/tiny_models.py, one decoder layer) has its layer wrapped in torch.compile, as
torchtune's compile=True does per layer; forward + loss run under saved_tensors_hooks. The compiled
region's autograd.Function saves the tensors the partitioner chose, so the hooks see them: the bytes
saved while the layer runs (its input included, the shared RoPE tables excluded) are the layer's figure,
the bytes of the whole forward the model's. The backend is aot_eager_decomp_partition: the same
decompositions and min-cut partitioner as inductor without its C++ build (inductor on CPU saves the
same bytes for the Llama layer, checked by hand on torch 2.13: 2,238,464 both).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow  # about 30 s of torch.compile; deselect with -m "not slow"

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.activations import ActivationSettings, Trainability, estimate_activations  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402
from hfmem.model.meta import build_inventory  # noqa: E402

B, S = 2, 128
TOLERANCE = 0.05


def _compiled_saved(model, layer_index: int = 0) -> tuple[int, int]:
    """(bytes saved by the compiled layer, bytes saved by the whole forward + loss)."""
    torch._dynamo.reset()
    layers = model.model.layers
    layer = layers[layer_index]
    layers[layer_index] = torch.compile(layer, backend="aot_eager_decomp_partition")
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen: dict[int, int] = {}
    in_layer: dict[int, int] = {}
    state = {"inside": False, "shared": set()}

    def pre(module, args, kwargs):
        # the layer's other tensor arguments (RoPE cos/sin, positions) are the model's, shared by all layers
        shared = [v for v in list(args[1:]) + list(kwargs.values()) for v in (v if isinstance(v, tuple) else (v,))]
        state["shared"] = {t.untyped_storage().data_ptr() for t in shared if isinstance(t, torch.Tensor)}
        state["inside"] = True

    def post(module, args, kwargs, out):
        state["inside"] = False

    handles = [layer.register_forward_pre_hook(pre, with_kwargs=True),
               layer.register_forward_hook(post, with_kwargs=True)]

    def pack(t):
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        if ptr not in params and ptr not in seen:
            seen[ptr] = storage.nbytes()
            if state["inside"] and ptr not in state["shared"]:
                in_layer[ptr] = storage.nbytes()
        return t

    ids = torch.randint(0, model.config.vocab_size, (B, S), generator=torch.Generator().manual_seed(0))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = model(input_ids=ids, labels=ids, use_cache=False)
    out.loss.backward()  # the compiled backward runs on what was saved
    for h in handles:
        h.remove()
    return sum(in_layer.values()), sum(seen.values())


def _predict(config: dict, kernel: str, compiled: bool, **kw):
    arch, inventory = read_architecture(config), build_inventory(config)
    return estimate_activations(arch, inventory, ActivationSettings(
        micro_batch_size=B, seq_len=S, compute_bytes=2, attention=kernel, dropout_mask_bytes=None,
        compiled_layers=compiled, **kw))


def _close(predicted: float, measured: float) -> bool:
    return abs(predicted / measured - 1) <= TOLERANCE


# SDPA on CPU runs its flash kernel for these shapes (out + logsumexp), predicted as the fused kernel.
@pytest.mark.parametrize(("model_id", "kernel"), [
    ("meta-llama/Meta-Llama-3-8B", "sdpa"),  # GQA
    ("meta-llama/Meta-Llama-3-8B", "eager"),  # raw scores and fp32 row statistics instead of the fp32 softmax
    ("mistralai/Mistral-7B-v0.1", "sdpa"),
    ("Qwen/Qwen2.5-0.5B", "sdpa"),  # q/k/v biases, 7:1 GQA
    ("google/gemma-2b", "sdpa"),  # fp32 (1 + w) RMSNorm, gelu_pytorch_tanh, MQA
    ("microsoft/phi-2", "sdpa"),  # LayerNorm, parallel block, gelu_new, partial RoPE
    ("mistralai/Mixtral-8x7B-v0.1", "sdpa"),  # MoE: compiles (grouped_mm path), routed copies b·s·k
])
def test_compiled_layer_matches_the_partitioners_saved_set(model_id: str, kernel: str) -> None:
    config = tiny_config(model_id, 1)
    layer, total = _compiled_saved(build_model(config, kernel))
    est = _predict(config, kernel, True)
    eager = _predict(config, kernel, False)
    assert _close(est.layers[0].bytes, layer), (model_id, est.layers[0].bytes, layer, est.layers[0].terms)
    assert _close(est.stored, total), (model_id, est.stored, total)
    assert est.layers[0].bytes < eager.layers[0].bytes  # compile saves less than eager


def test_compiled_lora_layer_with_compute_dtype_adapters() -> None:
    """torchtune-style LoRA (bf16 adapters sharing the base layer's input) inside a compiled layer, through PEFT."""
    peft = pytest.importorskip("peft")
    model_id = "meta-llama/Meta-Llama-3-8B"
    config = tiny_config(model_id, 1)
    model = build_model(config, "sdpa")
    targets = ["q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    wrapped = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=targets),
                                  autocast_adapter_dtype=False)
    wrapped.train()
    layer, total = _compiled_saved(wrapped.base_model.model)
    trained = Trainability(trainable=frozenset(), lora=frozenset(targets), lora_rank=8, adapter_input_bytes=0,
                           adapter_output_bytes=2, input_requires_grad=False)
    est = _predict(config, "sdpa", True, trained=trained)
    # layer 0 with a frozen embedding: its input needs no grad (the estimate's layer-0 adjustment)
    assert _close(est.layers[0].bytes + est.adjustments, layer), (est.layers[0].terms, est.adjustments, layer)
    assert _close(est.stored, total), (est.stored, total)
