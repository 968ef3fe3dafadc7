"""The output projection and cross-entropy fused into one kernel (fused_loss: Cut Cross-Entropy or Liger's fused
linear cross-entropy): what each keeps instead of the (tokens x vocab) logits, and the config keys that turn it on.

Both are Triton kernels, so no CPU run reproduces them; the bytes follow the sources cited in
hfmem/memory/activations/head.py, and the bench holds published axolotl runs with the CutCrossEntropyPlugin
(`python bench/published.py`, axolotl-gptoss20b-*).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from hfmem.cli.main import run
from hfmem.configs import read_config
from hfmem.memory.activations.head import liger_chunk_rows
from hfmem.memory.estimate import estimate
from hfmem.memory.evaluation import eval_forward_bytes
from hfmem.memory.settings import TrainingSettings
from hfmem.model.architecture import read_architecture
from hfmem.model.meta import build_inventory

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
GPT_OSS_YAML = FIXTURES / "training_configs" / "axolotl" / "examples" / "gpt-oss" / "gpt-oss-20b-fft-fsdp2.yaml"


@pytest.fixture(scope="module")
def llama_3b():
    config = json.loads((FIXTURES / "hub" / "meta-llama" / "Llama-3.2-3B" / "config.json").read_text())
    config.pop("_note", None)
    return read_architecture(config), build_inventory(config)


def _activations(model, fused_loss: str, method: str = "lora", seq_len: int = 2048):
    arch, inventory = model
    settings = TrainingSettings(method=method, dtype="bf16", micro_batch_size=2, seq_len=seq_len,
                                fused_loss=fused_loss, gradient_checkpointing="full")
    return estimate(arch, inventory, settings).activations


@pytest.mark.parametrize("fused", ["cce", "liger"])
def test_a_fused_loss_keeps_the_heads_input_size_not_the_logits(llama_3b, fused):
    """transformers' loss keeps log_softmax's fp32 output (4 bytes per logit); CCE keeps the head's bf16 input
    (cce.py#L130) and Liger the input's bf16 gradient (fused_linear_cross_entropy.py#L318): 2 bytes per hidden
    element, twice as much at twice the tokens, nothing that grows with the vocabulary."""
    arch, _ = llama_3b
    plain = _activations(llama_3b, "none")
    short, long = _activations(llama_3b, fused, seq_len=1024), _activations(llama_3b, fused)
    tokens = 2 * 2048
    assert plain.loss >= 4 * tokens * arch.vocab_size
    assert long.loss == pytest.approx(2 * tokens * arch.hidden_size, rel=0.03)  # + fp32 per-token, per-vocab rows
    assert long.loss == pytest.approx(2 * short.loss, rel=0.03)
    assert long.loss_peak < tokens * arch.vocab_size / 8
    assert plain.peak - long.peak > 4 * tokens * arch.vocab_size


def test_liger_keeps_a_trained_heads_weight_gradient(llama_3b):
    """A trained head (full fine-tune; Llama 3.2 ties it to the embeddings): Liger's forward also keeps the weight's
    gradient in the weight's dtype (L318-L322) and builds each chunk's in the compute dtype and fp32 (L182)."""
    arch, _ = llama_3b
    vh = arch.vocab_size * arch.hidden_size
    lora, full = _activations(llama_3b, "liger"), _activations(llama_3b, "liger", method="full")
    assert full.loss - lora.loss == 2 * vh
    assert full.loss_peak - lora.loss_peak >= (2 + 4) * vh - 2 * liger_chunk_rows(4096, arch.hidden_size,
                                                                                   arch.vocab_size) * arch.hidden_size


@pytest.mark.parametrize(("tokens", "rows"), [(8192, 256), (1000, 32), (16, 1)])
def test_liger_chunk_rows_follow_its_formula(tokens, rows):
    """next_power_of_2(cdiv(tokens, cdiv(V, H))), at most every token: Llama 3 (V 128,256, H 4,096) at 8,192
    tokens gives 256 rows, as the kernel's chunking does."""
    assert liger_chunk_rows(tokens, 4096, 128256) == rows


def test_cut_cross_entropy_skips_the_eval_logits_too(llama_3b):
    """CCE's patched forward returns logits=None whenever labels are given, in eval too (train_only=False); Liger
    skips them only in training."""
    arch, _ = llama_3b
    base = {"method": "lora", "micro_batch_size": 2, "seq_len": 2048, "eval_batch_size": 4}
    plain = eval_forward_bytes(arch, TrainingSettings(**base).validated(), 2048)
    cce = eval_forward_bytes(arch, TrainingSettings(**base, fused_loss="cce").validated(), 2048)
    liger = eval_forward_bytes(arch, TrainingSettings(**base, fused_loss="liger").validated(), 2048)
    assert plain - cce >= 2 * 4 * 2048 * arch.vocab_size and liger == plain


def _axolotl(tmp_path: Path, **changes) -> Path:
    """The real gpt-oss FSDP2 YAML with some keys changed."""
    data = yaml.safe_load(GPT_OSS_YAML.read_text()) | changes
    path = tmp_path / "axolotl.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_axolotl_plugins_choose_the_fused_loss(tmp_path):
    """CutCrossEntropyPlugin: cce unless cut_cross_entropy is false; LigerPlugin: liger when
    liger_fused_linear_cross_entropy is on; another plugin is listed as unmodelled."""
    assert read_config(GPT_OSS_YAML).values["fused_loss"] == "cce"
    off = read_config(_axolotl(tmp_path, cut_cross_entropy=False))
    assert "fused_loss" not in off.values and "plugins" not in off.unmodelled
    liger = read_config(_axolotl(tmp_path, plugins=["axolotl.integrations.liger.LigerPlugin"],
                                 liger_fused_linear_cross_entropy=True, liger_rms_norm=True))
    assert liger.values["fused_loss"] == "liger"
    assert "liger_rms_norm" in liger.unmodelled and "plugins" not in liger.unmodelled
    other = read_config(_axolotl(tmp_path, plugins=["axolotl.integrations.spectrum.SpectrumPlugin"]))
    assert "fused_loss" not in other.values and "plugins" in other.unmodelled


def test_llama_factory_liger_fuses_the_loss_of_sft_only(tmp_path):
    """enable_liger_kernel applies Liger with its fused linear cross-entropy for pt/sft; stages that need the logits
    (dpo, rm, ...) switch it off (llamafactory/model/loader.py#L142)."""
    real = FIXTURES / "training_configs" / "llama-factory" / "examples" / "train_lora" / "llama3_lora_sft.yaml"
    data = yaml.safe_load(real.read_text()) | {"enable_liger_kernel": True}
    for stage, fused in (("sft", "liger"), ("dpo", None)):
        path = tmp_path / f"{stage}.yaml"
        path.write_text(yaml.safe_dump(data | {"stage": stage}))
        config = read_config(path)
        assert config.values.get("fused_loss") == fused and "enable_liger_kernel" in config.unmodelled


def test_liger_kernel_config_can_turn_the_fused_loss_off(tmp_path):
    """use_liger_kernel with liger_kernel_config {fused_linear_cross_entropy: false}: the Trainer's Liger leaves the
    loss to transformers."""
    args = {"output_dir": "out", "use_liger_kernel": True, "per_device_train_batch_size": 2}
    on, off = tmp_path / "on.json", tmp_path / "off.json"
    on.write_text(json.dumps(args))
    off.write_text(json.dumps(args | {"liger_kernel_config": {"fused_linear_cross_entropy": False}}))
    assert read_config(on).values["fused_loss"] == "liger"
    assert "fused_loss" not in read_config(off).values


def test_the_cli_takes_the_fused_loss_and_reports_it(capsys):
    """--fused-loss is a flag like any setting; the JSON's plan names it, the estimate's notes explain it and the
    activations shrink."""
    figures = {}
    for fused in ("none", "cce"):
        assert run(["example:Meta-Llama-3-8B", "-m", "lora", "--seq-len", "4096", "--fused-loss", fused,
                    "--format", "json"]) == 0
        report = json.loads(capsys.readouterr().out)
        (estimate_,) = report["estimates"].values()
        assert report["plan"]["training"].get("fused_loss", "none") == fused  # the plan lists what differs
        notes = estimate_["notes"]
        assert any("Cut Cross-Entropy" in n for n in notes) == (fused == "cce")
        figures[fused] = estimate_["per_gpu_bytes"]["activations"]
    assert figures["cce"] < figures["none"]
    assert run(["example:Meta-Llama-3-8B", "--fused-loss", "xentropy"]) != 0
