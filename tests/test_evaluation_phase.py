"""The evaluation phase against real no-grad forwards of scaled-down real models on CPU: the peak of live tensors
over the resident weights (LiveBytes) is what memory.evaluation predicts, the logits and loss buffers included."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from live_peak import LiveBytes  # noqa: E402
from saved_activations import build_model  # noqa: E402
from tiny_models import tiny_config  # noqa: E402

from hfmem.memory.evaluation import eval_forward_bytes, no_grad_mlp_bytes  # noqa: E402
from hfmem.memory.settings import TrainingSettings  # noqa: E402
from hfmem.model.architecture import read_architecture  # noqa: E402


def no_grad_peak(model: torch.nn.Module, batch: int, seq: int) -> int:
    """Bytes alive at the peak of one no-grad forward with labels, over the weights, buffers and inputs."""
    ids = torch.randint(0, model.config.vocab_size, (batch, seq), generator=torch.Generator().manual_seed(0))
    tracker = LiveBytes()
    with tracker:
        tracker.adopt(list(model.parameters()) + list(model.buffers()) + [ids], "resident")
        tracker.reset_peak()
        resident = tracker.current
        model.eval()
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids, use_cache=False).loss
        del loss
    return tracker.peak - resident


@pytest.mark.parametrize("model_id", ["meta-llama/Meta-Llama-3-8B", "Qwen/Qwen2.5-0.5B", "google/gemma-2b",
                                      "microsoft/phi-2", "mistralai/Mixtral-8x7B-v0.1"])
@pytest.mark.parametrize("upcast", [True, False])
def test_the_no_grad_forward_peak_is_predicted(model_id, upcast):
    config = tiny_config(model_id, 2)
    model = build_model(config, "sdpa", torch.bfloat16)
    if not upcast:  # transformers' loss without its fp32 upcast: the labels are shifted, not the logits
        model.loss_function = lambda logits, labels, vocab_size, **_: torch.nn.functional.cross_entropy(
            logits.view(-1, vocab_size), torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1))
    measured = no_grad_peak(model, 4, 64)
    settings = TrainingSettings(method="full", dtype="bf16-pure", eval_batch_size=4, loss_upcast=upcast).validated()
    predicted = eval_forward_bytes(read_architecture(config), settings, 64)
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)


def test_a_fine_grained_moe_peaks_back_at_hidden_width():
    """DeepSeek's experts are narrower than its hidden size (64 against 256 here, 2,048 against 7,168 in V3), so
    the no-grad MoE peaks after the down projection: per routed copy of a token its input, the output, the output
    times the router's fp32 weight and that product's copy back in token order. 2 x 512 tokens without the loss's
    upcast, where the MoE is the peak: counting its intermediate-width moment only, hfmem was 45% under. Values as wide
    as keys, as in tests/test_generation_phase.py (KERNEL_DIMS)."""
    config = tiny_config("deepseek-ai/DeepSeek-V3", 2, v_head_dim=48)
    model = build_model(config, "sdpa", torch.bfloat16)
    model.loss_function = lambda logits, labels, vocab_size, **_: torch.nn.functional.cross_entropy(
        logits.view(-1, vocab_size), torch.nn.functional.pad(labels, (0, 1), value=-100)[:, 1:].reshape(-1))
    measured = no_grad_peak(model, 2, 512)
    settings = TrainingSettings(method="full", dtype="bf16-pure", eval_batch_size=2, loss_upcast=False).validated()
    arch = read_architecture(config)
    predicted = eval_forward_bytes(arch, settings, 512)
    assert predicted == no_grad_mlp_bytes(arch, settings, 2 * 512)  # the MoE, not the head, is the peak
    assert predicted == pytest.approx(measured, rel=0.05), (predicted, measured)


def test_no_evaluation_adds_nothing():
    arch = read_architecture(tiny_config("meta-llama/Meta-Llama-3-8B", 2))
    assert eval_forward_bytes(arch, TrainingSettings(dtype="bf16-pure").validated(), 64) == 0


def test_a_larger_evaluation_is_the_total_and_a_smaller_eval_batch_is_the_advice(capsys):
    """Qwen2.5-0.5B's 152k-token vocabulary: evaluating 8 sequences of 2,048 needs more than training 2 (measured on
    an H200: 26.0 against 15.1 GiB allocated, fixtures/gpu_measured.json). The total is the evaluation phase's,
    and on a 24 GB GPU the advice is to evaluate a sequence at a time; with checkpointing too on a 16 GB one."""
    import json

    from hfmem.cli.main import run
    from hfmem.memory.record import cells, estimates

    args = ["example:Qwen2.5-0.5B", "-m", "full", "--dtype", "bf16-pure", "-b", "2", "--seq-len", "2048",
            "-g", "4090", "-g", "t4", "-f", "json"]
    assert run([*args, "--eval-batch-size", "8"]) == 0
    report = json.loads(capsys.readouterr().out)
    (est,) = estimates(report)
    assert est["phases"]["largest"] == "evaluation"
    assert est["per_gpu_bytes"]["total"] == est["phases"]["evaluation"] > est["phases"]["train_step"]
    advice = {c["gpu"]["name"]: (c["advice"]["mitigation"], c["advice"]["settings_changes"]) for c in cells(report)}
    assert advice == {"RTX 4090": ("smaller_eval_batch", {"eval_batch_size": 1}),
                      "T4": ("gradient_checkpointing", {"gradient_checkpointing": "full", "eval_batch_size": 1})}
    assert run(args) == 0
    (plain,) = estimates(json.loads(capsys.readouterr().out))
    assert plain["phases"]["evaluation"] is None and plain["per_gpu_bytes"]["total"] == est["phases"]["train_step"]
