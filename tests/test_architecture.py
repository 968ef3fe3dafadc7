"""Config reading: aliases across families, nested configs, and refusal of absurd or mistyped values."""

import json
from pathlib import Path

import pytest

from hfmem.model.guard import guard_config
from hfmem.model.architecture import read_architecture
from hfmem.errors import AbsurdConfigError, MalformedConfigError
from hfmem.memory.record import estimates

EXAMPLES = Path(__file__).parent.parent / "hfmem" / "examples"
FIXTURES = Path(__file__).parent.parent / "fixtures"


def _config(name: str) -> dict:
    return json.loads((EXAMPLES / name / "config.json").read_text())


def test_llama_2_70b_is_gqa():
    arch = read_architecture(_config("Llama-2-70b-hf"))
    assert (arch.num_layers, arch.hidden_size, arch.num_attention_heads, arch.num_key_value_heads, arch.head_dim) == (
        80, 8192, 64, 8, 128)
    assert arch.attention_kind == "gqa" and arch.gated_mlp and not arch.is_moe


def test_gpt2_aliases():
    arch = read_architecture(_config("gpt2"))
    assert (arch.num_layers, arch.hidden_size, arch.intermediate_size, arch.max_position_embeddings) == (12, 768, 3072, 1024)
    assert arch.attention_kind == "mha" and not arch.gated_mlp and arch.tie_word_embeddings


def test_mixtral_moe():
    arch = read_architecture(_config("Mixtral-8x7B-v0.1"))
    assert (arch.num_experts, arch.experts_per_token, arch.num_dense_layers) == (8, 2, 0)


def test_nested_text_config_is_used():
    arch = read_architecture({"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
                              "vision_config": {"hidden_size": 1024},
                              "text_config": {"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
                                              "num_attention_heads": 32, "vocab_size": 32064}})
    assert (arch.model_type, arch.hidden_size, arch.num_layers, arch.nested) == ("llama", 4096, 32, ("vision_config",))


@pytest.mark.parametrize("change, error, message", [
    ({"hidden_size": "8192"}, MalformedConfigError, "must be an integer"),
    ({"hidden_size": -1}, MalformedConfigError, "must be positive"),
    ({"num_hidden_layers": 0}, MalformedConfigError, "must be positive"),
    ({"num_attention_heads": 7}, MalformedConfigError, "not a multiple"),
    ({"hidden_size": 10**9}, AbsurdConfigError, "exceeds"),
    ({"num_hidden_layers": 2000, "hidden_size": 100000, "intermediate_size": 1000000}, AbsurdConfigError, "parameters"),
])
def test_bad_values_are_refused(change, error, message):
    with pytest.raises(error, match=message):
        read_architecture(_config("Llama-2-70b-hf") | change)


@pytest.mark.parametrize("config", [
    {"text_config": {"num_hidden_layers": 10**7}},
    {"vocab_size": 10**12},
    {"num_local_experts": True},
])
def test_guard_checks_nested_dims_before_any_build(config):
    with pytest.raises((AbsurdConfigError, MalformedConfigError)):
        guard_config(config)


def test_self_contradicting_config_is_a_malformed_config_error(tmp_path, capsys, monkeypatch):
    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    config = _config("Qwen2.5-0.5B") | {"num_hidden_layers": 2, "layer_types": ["full_attention"] * 24}
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert run([str(tmp_path / "config.json")]) == 7
    assert "must be equal to the number of `layer_types`" in capsys.readouterr().err


def test_unknown_architecture_is_counted_from_its_headers(tmp_path, capsys, monkeypatch):
    """No remote code: a model_type transformers lacks is counted from the checkpoint and the config's dims."""
    import math

    from hubserver import safetensors_header

    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    config = {"model_type": "my_custom_arch", "architectures": ["MyCustomForCausalLM"],
              "auto_map": {"AutoModelForCausalLM": "modeling_custom.MyModel"}, "hidden_size": 256,
              "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 512, "vocab_size": 1000}
    tensors = {"model.embed_tokens.weight": ("BF16", [1000, 256]), "lm_head.weight": ("BF16", [1000, 256])}
    for i in range(2):
        tensors |= {f"model.layers.{i}.self_attn.{p}.weight": ("BF16", [256, 256]) for p in ("q_proj", "k_proj", "v_proj", "o_proj")}
        tensors |= {f"model.layers.{i}.mlp.{p}.weight": ("BF16", s) for p, s in
                    (("gate_proj", [512, 256]), ("up_proj", [512, 256]), ("down_proj", [256, 512]))}
        tensors[f"model.layers.{i}.input_layernorm.weight"] = ("BF16", [256])
    header = safetensors_header(tensors)
    with (tmp_path / "model.safetensors").open("wb") as handle:
        handle.write(header)
        handle.truncate(len(header) + 2 * sum(math.prod(shape) for _, shape in tensors.values()))  # sparse data
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert run([str(tmp_path), "--format", "json", "-g", "h100"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["parameters"]["total"] == 2 * 1000 * 256 + 2 * (4 * 256 * 256 + 3 * 512 * 256 + 256)
    assert data["parameters"]["by_component"]["mlp"] == 2 * 3 * 512 * 256
    assert any("not in transformers" in note and "headers" in note for note in data["notes"])
    assert estimates(data)[0]["per_gpu_bytes"]["total"] > 0


def test_moe_defaults_of_a_dense_model_are_not_shown(tmp_path, capsys, monkeypatch):
    """Nemotron-H's config class defaults to n_routed_experts=8, top-2, but its pattern builds no MoE layer: the
    architecture, the headline and the activation model show the dense MLP the model builds."""
    from hfmem.cli.main import run

    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    config = FIXTURES / "hub" / "nvidia" / "Nemotron-H-56B-Base-8K" / "config.json"
    for _ in range(2):  # the build, then the cached inventory
        assert run([str(config), "-m", "lora", "-g", "h200", "--format", "json"]) == 0
        report = json.loads(capsys.readouterr().out)
        arch = report["architecture"]
        assert (arch["num_experts"], arch["experts_per_token"], arch["moe_intermediate_size"]) == (0, 0, None)
        assert arch["num_dense_layers"] == arch["num_layers"] and report["parameters"]["by_component"].get("experts", 0) == 0
    assert run([str(config), "-m", "lora", "-g", "h200"]) == 0
    assert "experts" not in capsys.readouterr().out.splitlines()[0]


def test_as_built_keeps_real_experts():
    from hfmem.model.derive import as_built
    from hfmem.model.inventory import Inventory

    arch = read_architecture(_config("Mixtral-8x7B-v0.1"))
    with_experts = Inventory("MixtralForCausalLM", 10, {"experts": 8}, (), (), {})
    without = Inventory("MixtralForCausalLM", 10, {"mlp": 8}, (), (), {})
    assert as_built(arch, with_experts) == arch
    assert as_built(arch, without).num_experts == 0 and as_built(arch, without).is_moe is False


@pytest.mark.parametrize("model", ["Qwen/Qwen3-30B-A3B", "ibm-granite/granite-3.1-1b-a400m-instruct"])
def test_attention_of_a_moe_model_is_attention(model: str) -> None:
    """Qwen3MoeAttention and GraniteMoeAttention hold "Moe" in their class names but are attention: q/k/v/o count as
    attention (TP-split, not spread over the experts' ranks), the routed experts stay experts."""
    from hfmem.model.meta import build_inventory

    config = json.loads((FIXTURES / "hub" / model / "config.json").read_text())
    config |= {"num_hidden_layers": 2, "vocab_size": 1024}
    inv = build_inventory(config)
    h, heads, kv = config["hidden_size"], config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or h // heads
    roles = {g.name: g.component for g in inv.linears}
    assert all(roles[name] == "attention" for name in ("q_proj", "k_proj", "v_proj", "o_proj"))
    assert inv.by_component["attention"] == 2 * (2 * h * heads * head_dim + 2 * h * kv * head_dim)
    assert inv.by_component["experts"] > 0 and "mlp" not in inv.by_component
