"""The memory-saving optimizers: torch.optim.Muon run for real against hfmem's state and step figures, the
layer-wise and block-wise rules, and the config keys that select them. (GaLore, APOLLO, Adam-mini, schedule-free
AdamW and CAME, whose packages are not test dependencies, are compared by bench/optimizers.py.)"""

from __future__ import annotations

import pytest

from hfmem.configs.read import read_config
from hfmem.memory.estimate import estimate
from hfmem.memory.model_state import parameter_split
from hfmem.memory.optimizers import optimizer_state
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory
from tiny_models import reference_model, tiny_config

LLAMA3 = reference_model("meta-llama/Meta-Llama-3-8B")


def test_muon_state_and_step_equal_torch_optim_muon() -> None:
    """torch.optim.Muon over the decoder's 2-D weights (it refuses any other), AdamW over the rest: the states
    after the first step and the second step's transient peak (tests/live_peak.py) against hfmem's."""
    torch = pytest.importorskip("torch")
    if not hasattr(torch.optim, "Muon"):
        pytest.skip("torch.optim.Muon needs torch >= 2.9")
    from live_peak import LiveBytes
    from saved_activations import build_model

    config = tiny_config("meta-llama/Meta-Llama-3-8B", 2)
    model = build_model(config, "sdpa", torch.float32)
    hidden = [p for n, p in model.named_parameters() if p.ndim == 2 and ".layers." in n]
    rest = [p for p in model.parameters() if all(p is not h for h in hidden)]
    optimizers = [torch.optim.Muon(hidden, lr=1e-3), torch.optim.AdamW(rest, lr=1e-3)]
    ids = torch.randint(0, config["vocab_size"], (2, 32))
    model(input_ids=ids, labels=ids).loss.backward()
    for opt in optimizers:
        opt.step()
    states = sum(t.untyped_storage().nbytes() for opt in optimizers for s in opt.state.values() for t in s.values()
                 if isinstance(t, torch.Tensor) and t.dim())
    model(input_ids=ids, labels=ids).loss.backward()
    with LiveBytes() as tracker:
        tracker.adopt([*model.parameters(), *(p.grad for p in model.parameters())], "model")
        tracker.adopt([t for opt in optimizers for s in opt.state.values() for t in s.values()
                       if isinstance(t, torch.Tensor)], "state")
        tracker.reset_peak()
        before = tracker.current
        for opt in optimizers:
            opt.step()
        transient = tracker.peak - before
    split = parameter_split(read_architecture(config), build_inventory(config), TrainingSettings())
    predicted = optimizer_state("muon", split.trainable, split.hidden_matrices, 4.0, 16,
                                largest=split.largest_trainable)
    assert predicted.states == states
    assert predicted.step == pytest.approx(transient, rel=0.10)


def test_muon_keeps_one_state_for_decoder_matrices_and_two_for_the_rest() -> None:
    """Llama-3-8B under mixed precision: 4 bytes per decoder matrix weight, 8 per embedding, head and norm weight."""
    arch, inventory = LLAMA3
    est = estimate(arch, inventory, TrainingSettings(optimizer="muon"))
    decoder = sum(g.count * g.in_features * g.out_features for g in inventory.linears if g.component != "head")
    assert est.state.optimizer_states == 4 * decoder + 8 * (inventory.total - decoder)


def test_galore_keeps_projected_moments_and_layerwise_one_gradient() -> None:
    """GaLore rank 128 on fp32 gradients: per m x n decoder matrix 2 x 128 x max(m, n) moments and the whole
    min(m, n)² SVD factor its projection views; layer-wise, one tensor's gradient (the embedding's) is alive."""
    arch, inventory = LLAMA3
    s = TrainingSettings(optimizer="galore_adamw", galore_rank=128)
    est = estimate(arch, inventory, s)
    matrices = [(g.out_features, g.in_features, g.count) for g in inventory.linears if g.component != "head"]
    projected = sum(n * (2 * 128 * max(r, c) + min(r, c) ** 2) for r, c, n in matrices)
    rest = inventory.total - sum(r * c * n for r, c, n in matrices)
    assert est.state.optimizer_states == 4 * (projected + 2 * rest)
    layerwise = estimate(arch, inventory, TrainingSettings(optimizer="galore_adamw_layerwise", galore_rank=128))
    assert layerwise.state.gradients == 2 * 128256 * 4096
    assert est.state.gradients == 2 * inventory.total


def test_badam_trains_one_layer_and_lisa_the_embeddings_and_head_too() -> None:
    """BAdam (bf16 weights): one decoder layer's gradients, and its fp32 copy and AdamW states (16 + 2 bytes per
    active parameter beyond the weights); LISA two layers and the embeddings and head, in the model's dtype."""
    arch, inventory = LLAMA3
    layer = (inventory.total - 2 * 128256 * 4096 - 4096) // 32
    badam = estimate(arch, inventory, TrainingSettings(optimizer="badam", dtype="bf16-pure")).state
    assert badam.gradients == pytest.approx(2 * layer, rel=1e-3)
    assert badam.master_weights + badam.optimizer_states == pytest.approx(12 * layer, rel=1e-3)
    lisa = estimate(arch, inventory, TrainingSettings(optimizer="lisa", dtype="bf16-pure")).state
    assert lisa.gradients == pytest.approx(2 * (2 * layer + 2 * 128256 * 4096 + 4096), rel=1e-3)


def test_badam_under_zero3_partitions_the_active_block_only() -> None:
    """BAdam's BlockOptimizer rebuilds DeepSpeed ZeRO-3's fp32 partitions from the active block at each switch
    (badam/block_optim.py _reset_ds_optimizer): the step's fp32 gradient partition is one layer's over n GPUs, not
    the whole model's (full AdamW under the same ZeRO-3 keeps the whole model's)."""
    arch, inventory = LLAMA3
    layer = (inventory.total - 2 * 128256 * 4096 - 4096) // 32
    zero3 = {"dtype": "fp16", "sharding": "zero3", "num_gpus": 4}
    badam = estimate(arch, inventory, TrainingSettings(optimizer="badam", **zero3)).state
    adamw = estimate(arch, inventory, TrainingSettings(optimizer="adamw", **zero3)).state
    assert badam.step_transient == pytest.approx(4 * layer / 4, rel=1e-3)
    assert adamw.step_transient == pytest.approx(4 * inventory.total / 4, rel=1e-3)


def test_config_files_select_the_methods_and_optimizers(tmp_path) -> None:
    """LLaMA-Factory's use_badam/use_galore/use_dora, axolotl's peft_use_dora and peft.loftq_config (LoftQ: LoRA's
    memory, the base dequantised in place), TRL's use_dora and the Trainer's optim/optim_args map to settings, and
    none of those keys is reported unmodelled or unknown."""
    lf = "model_name_or_path: m\nstage: sft\nbf16: true\n"
    cases = {
        "lf_badam.yaml": (lf + "finetuning_type: full\nuse_badam: true\nbadam_switch_interval: 50\n",
                          {"optimizer": "badam", "active_layers": 1, "method": "full"}),
        "lf_galore.yaml": (lf + "finetuning_type: full\nuse_galore: true\ngalore_layerwise: true\ngalore_rank: 64\n",
                           {"optimizer": "galore_adamw_layerwise", "galore_rank": 64, "galore_update_proj_gap": 200}),
        "lf_dora.yaml": (lf + "finetuning_type: lora\nuse_dora: true\nquantization_bit: 4\n",
                         {"method": "dora", "base_quantization": "nf4"}),
        "lf_oft.yaml": (lf + "finetuning_type: oft\noft_block_size: 64\n",
                        {"method": "oft", "oft_block_size": 64, "lora_targets": ("all-linear",)}),
        "axolotl.yaml": ("base_model: m\nadapter: lora\npeft_use_dora: true\nsequence_len: 1024\noptimizer: muon\n",
                         {"method": "dora", "optimizer": "muon"}),
        "axolotl_loftq.yaml": ("base_model: m\nadapter: lora\nlora_r: 32\npeft:\n  loftq_config:\n    loftq_bits: 4\n",
                               {"method": "lora", "lora_rank": 32}),
        "trl.yaml": ("model_name_or_path: m\nuse_peft: true\nuse_dora: true\nlora_target_modules: all-linear\n"
                     + "optim: galore_adamw_8bit\noptim_args: rank=256, update_proj_gap=500\nmax_length: 1024\n",
                     {"method": "dora", "optimizer": "galore_adamw_8bit", "galore_rank": 256,
                      "galore_update_proj_gap": 500}),
    }
    for name, (text, want) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        config = read_config(path)
        assert {k: config.values.get(k) for k in want} == want, name
        chosen = {"use_badam", "use_galore", "use_dora", "peft_use_dora", "optim", "optim_args", "optimizer",
                  "finetuning_type", "oft_block_size"}
        assert not chosen & {u.split(":")[-1] for u in config.unmodelled}, (name, config.unmodelled)
        assert not [u for u in config.unknown if "loftq" in u], (name, config.unknown)
        fields = TrainingSettings.__dataclass_fields__
        TrainingSettings(**{k: v for k, v in config.values.items() if k in fields}).validated()
