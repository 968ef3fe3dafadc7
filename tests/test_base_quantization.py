"""base_quantization: a LoRA base stored as LLM.int8, GPTQ or AWQ, against the formats' tensors and real autograd.

Ground truth: the tensors each format allocates (tests/quantized_linears.py, shapes and dtypes from the
libraries' source), bitsandbytes' own int8 quantiser where it imports, and PEFT's LoRA layers for these formats
(GPTQLoraLinear, AwqLoraLinear) wrapped around those layers in a tiny bf16 Llama: the bytes of its parameters
and quantized buffers, its trainable count, what autograd saves (saved_tensors_hooks) and, for LLM.int8, whose
matmul keeps its input as a ctx attribute that no hook sees, the bytes alive at the end of the forward.
"""

from __future__ import annotations

import functools
import warnings

import pytest
from tiny_models import tiny_config

from hfmem.errors import MalformedConfigError
from hfmem.memory.estimate import estimate
from hfmem.memory.quantization import BaseFormat
from hfmem.memory.record import estimates
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import StoredQuantization, read_architecture
from hfmem.model.meta import build_inventory

torch = pytest.importorskip("torch")
peft = pytest.importorskip("peft")

import quantized_linears as ql

B, S = 2, 64
MODEL = "meta-llama/Meta-Llama-3-8B"
SHAPES = [(256, 896), (896, 256), (256, 64)]


def _settings(fmt: str | None, **kw) -> TrainingSettings:
    return TrainingSettings(method="lora", lora_rank=8, base_quantization=fmt, dtype="bf16-pure", optimizer="adamw",
                            seq_len=S, micro_batch_size=B, attention="sdpa", **kw)


def _tiny(**config):
    c = tiny_config(MODEL, 2) | config
    return read_architecture(c), build_inventory(c)


@pytest.mark.parametrize(("in_features", "out_features"), SHAPES)
@pytest.mark.parametrize("fmt", ["gptq", "awq", "int8"])
def test_bytes_per_matrix_are_the_formats_tensors(fmt: str, in_features: int, out_features: int) -> None:
    layer = ql.FORMATS[fmt](torch.nn.Linear(in_features, out_features, bias=False))
    real = sum(b.untyped_storage().nbytes() for b in layer.buffers())
    assert BaseFormat(fmt, 8 if fmt == "int8" else 4).matrix_bytes(in_features, out_features) == real


def test_int8_bytes_from_bitsandbytes_itself() -> None:
    """bitsandbytes' int8_vectorwise_quant (what Int8Params calls): int8 data and float32 row scales."""
    functional = pytest.importorskip("bitsandbytes.functional")
    cb, scb, _ = functional.int8_vectorwise_quant(torch.randn(896, 256, dtype=torch.float16))
    assert (cb.dtype, scb.dtype) == (torch.int8, torch.float32)
    assert BaseFormat("int8", 8).matrix_bytes(256, 896) == cb.nbytes + scb.nbytes


def test_a_dequantising_matmul_saves_the_weight_not_the_input() -> None:
    """torch.matmul(x, W) with x needing a gradient and W (dequantised from buffers) not: autograd saves W only."""
    layer = ql.GptqTorchLinear(torch.nn.Linear(256, 896, bias=False))
    x = torch.randn(B, S, 256, dtype=torch.bfloat16, requires_grad=True)
    saved: dict[int, int] = {}

    def pack(t):
        saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        layer(x)
    assert x.untyped_storage().data_ptr() not in saved
    assert sorted(saved.values()) == [256 * 896 * 2]


@functools.cache
def _peft_on(fmt: str, checkpointing: bool) -> dict[str, int]:
    """The tiny Llama with its linears (lm_head aside) in `fmt` and PEFT's LoRA r=8 on them."""
    from peft.tuners.lora.awq import AwqLoraLinear
    from peft.tuners.lora.gptq import GPTQLoraLinear
    from saved_activations import build_model, saved_bytes

    model = build_model(tiny_config(MODEL, 2), "sdpa", torch.bfloat16)
    names = ql.quantize(model, fmt)
    config = peft.LoraConfig(r=8, target_modules=names)
    # PEFT's GPTQ layer for GPTQ; its AWQ layer, whose forward is its bitsandbytes layers' (no cast under
    # autocast), for AWQ and LLM.int8
    config._register_custom_module({ql.FORMATS[fmt]: GPTQLoraLinear if fmt == "gptq" else AwqLoraLinear})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        wrapped = peft.get_peft_model(model, config)
    wrapped.train()
    if checkpointing:
        wrapped.base_model.model.enable_input_require_grads()
    saved, _ = saved_bytes(wrapped.base_model.model, B, S, checkpointing=checkpointing)
    return {"trainable": sum(p.numel() for p in wrapped.parameters() if p.requires_grad),
            "weights": ql.weight_bytes(wrapped), "saved": saved}


@pytest.mark.parametrize("checkpointing", [False, True])
@pytest.mark.parametrize("fmt", ["gptq", "awq"])
def test_gptq_and_awq_bases_match_peft(fmt: str, checkpointing: bool) -> None:
    """Parameters and packed buffers byte for byte; saved activations, every layer's dequantised weights included
    (with full checkpointing: only the layer inputs, one layer's weights in the recompute)."""
    real = _peft_on(fmt, checkpointing)
    est = estimate(*_tiny(), _settings(fmt, gradient_checkpointing="full" if checkpointing else "off"))
    assert est.split.trainable == real["trainable"]
    assert est.per_gpu_bytes.weights == real["weights"]
    assert est.activations.saved == pytest.approx(real["saved"], rel=0.001)


def test_int8_base_matches_peft_and_keeps_inputs_on_the_ctx() -> None:
    """LLM.int8: int8 weights and fp32 row scales byte for byte; MatMul8bitLt keeps each layer's input as a ctx
    attribute (alive until backward, invisible to saved-tensor hooks): what the attribute alone keeps alive at the
    end of the forward is what hfmem adds for it (layer 0's q/k/v input needs no gradient, so it is not kept)."""
    from peft.tuners.lora.awq import AwqLoraLinear
    from saved_activations import build_model
    from test_loss_and_offload import _LiveBytes

    real = _peft_on("int8", False)
    est = estimate(*_tiny(), _settings("int8"))
    assert est.split.trainable == real["trainable"]
    assert est.per_gpu_bytes.weights == real["weights"]
    alive = {}
    for keeps in (True, False):
        ql._MatMul8bit.keeps = keeps
        try:
            model = build_model(tiny_config(MODEL, 2), "sdpa", torch.bfloat16)
            config = peft.LoraConfig(r=8, target_modules=ql.quantize(model, "int8"))
            config._register_custom_module({ql.Int8Linear: AwqLoraLinear})
            wrapped = peft.get_peft_model(model, config)
            ids = torch.randint(0, 1024, (B, S), generator=torch.Generator().manual_seed(0))
            with _LiveBytes(*wrapped.parameters(), *wrapped.buffers()) as live:
                out = wrapped(input_ids=ids, labels=ids)  # held: its graph keeps what backward would need
                alive[keeps] = live.live
            del out
        finally:
            ql._MatMul8bit.keeps = True
    kept = est.activations.saved - estimate(*_tiny(), _settings("nf4")).activations.saved  # nf4: keeps no input
    assert kept == alive[True] - alive[False] > 0


QUANTIZATION_CONFIGS = [
    ({"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False}, StoredQuantization("gptq", 4, 128)),
    ({"quant_method": "gptq", "bits": 4, "group_size": 32}, StoredQuantization("gptq", 4, 32)),
    ({"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm"}, StoredQuantization("awq", 4, 128)),
    ({"quant_method": "bitsandbytes", "load_in_8bit": True}, StoredQuantization("int8", 8, 128)),
    ({"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_quant_type": "nf4"}, StoredQuantization("nf4")),
    ({"quant_method": "fp8", "fmt": "e4m3"}, None),
]


@pytest.mark.parametrize(("quantization_config", "stored"), QUANTIZATION_CONFIGS)
def test_a_quantized_checkpoint_sets_the_default(quantization_config: dict, stored) -> None:
    """The config's quantization_config decides the base's format (lora and qlora alike) unless the setting names
    one; formats hfmem does not model (fp8) leave the method's default. The parameter count stays the model's."""
    arch, inventory = _tiny(quantization_config=quantization_config)
    assert arch.quantization == stored
    plain_arch, plain_inventory = _tiny()
    assert inventory.total == plain_inventory.total  # the meta build counts logical weights, not packed tensors
    for method in ("lora", "qlora"):
        default = estimate(arch, inventory, TrainingSettings(method=method))
        named = stored.format if stored else ("nf4" if method == "qlora" else None)
        explicit = estimate(plain_arch, plain_inventory, TrainingSettings(method=method, base_quantization=named))
        if stored is not None and stored.group_size != 128:
            assert default.per_gpu_bytes.weights > explicit.per_gpu_bytes.weights  # finer groups: more scales
        else:
            assert default.per_gpu_bytes.weights == explicit.per_gpu_bytes.weights


def test_the_configs_group_size_is_the_formats() -> None:
    """GPTQ with group_size 32: the tensors AutoGPTQ allocates for that group size."""
    class Group32(ql.GptqTorchLinear):
        group_size = 32

    arch, inventory = _tiny(quantization_config={"quant_method": "gptq", "bits": 4, "group_size": 32})
    est = estimate(arch, inventory, TrainingSettings(method="lora"))
    real = sum(g.count * sum(b.untyped_storage().nbytes() for b in
                             Group32(torch.nn.Linear(g.in_features, g.out_features, bias=False)).buffers())
               for g in inventory.linears if g.component != "head")
    assert est.split.quantized_bytes == real


@pytest.mark.parametrize("bad", [{"bits": 5}, {"bits": "4"}, {"group_size": 0}, {"group_size": True}])
def test_a_malformed_quantization_config_is_one_line(bad: dict) -> None:
    with pytest.raises(MalformedConfigError) as caught:
        read_architecture(tiny_config(MODEL, 2) | {"quantization_config": {"quant_method": "gptq"} | bad})
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(("fmt", "quantization_config"), [
    ("gptq", {"quant_method": "gptq", "bits": 4, "group_size": 128, "desc_act": False, "sym": True}),
    ("awq", {"quant_method": "awq", "bits": 4, "group_size": 128, "version": "gemm", "zero_point": True}),
])
def test_a_quantized_checkpoint_on_disk(fmt: str, quantization_config: dict, tmp_path, monkeypatch, capsys) -> None:
    """A checkpoint directory as GPTQ/AWQ write them (config.json with quantization_config; safetensors holding
    the fp16 embeddings, norms and head and each linear's packed tensors), through the CLI: the parameter count is
    the model's own (packed tensors explained, not counted), and the frozen base's bytes are the checkpoint's."""
    import json

    from safetensors.torch import save_file
    from saved_activations import build_model

    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    config = tiny_config(MODEL, 2) | {"torch_dtype": "float16"}
    model = build_model(config, "sdpa", torch.float16)
    logical = sum(p.numel() for p in model.parameters())
    ql.quantize(model, fmt)
    tensors = {name: t.contiguous() for name, t in model.state_dict().items()}
    save_file(tensors, str(tmp_path / "model.safetensors"))
    (tmp_path / "config.json").write_text(json.dumps(config | {"quantization_config": quantization_config}))
    stored = sum(t.nbytes for t in tensors.values())
    assert run([str(tmp_path), "-m", "lora", "--dtype", "bf16-pure", "--lora-rank", "8", "-g", "h100",
                "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["parameters"]["total"] == logical
    assert report["architecture"]["quantization"] == {"format": fmt, "bits": 4, "group_size": 128}
    assert report["crosscheck"]["status"] == "explained"
    lora = estimates(report)[0]
    adapters = lora["parameters"]["trainable"] * 4  # PEFT's fp32 adapters
    assert lora["per_gpu_bytes"]["weights"] - adapters == stored
