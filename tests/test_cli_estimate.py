"""`hfmem MODEL` estimate flags, the JSON estimates/fit, and the one-screen fit table (offline examples)."""

from __future__ import annotations

import json
from dataclasses import fields

import pytest

from hfmem.cli.main import run
from hfmem.memory.record import cells, estimates

PER_GPU_KEYS = {"weights", "gradients", "optimizer", "activations", "overhead", "total"}


def hfmem(capsys, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = run(list(args))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("COLUMNS", "100")


def test_json_carries_every_method_and_gpu(capsys):
    code, out, err = hfmem(capsys, "example:Llama-2-70b-hf", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    assert [e["method"] for e in estimates(data)] == ["full", "lora", "qlora"]
    for est in estimates(data):
        assert PER_GPU_KEYS <= est["per_gpu_bytes"].keys()
        parts = sum(est["per_gpu_bytes"][k] for k in PER_GPU_KEYS - {"total"})
        assert parts >= est["per_gpu_bytes"]["total"] > 0
        for key in ("dtype", "optimizer", "micro_batch_size", "seq_len", "gradient_checkpointing", "attention", "overhead"):
            assert key in est["assumptions"]
    assert len(cells(data)) == 3 * len({f["gpu"]["name"] for f in cells(data)}) >= 3 * 15
    # mixed-precision AdamW: 16 bytes per parameter of model state (ZeRO paper), not the 6 GB/B rule
    full = estimates(data)[0]
    state = sum(full["per_gpu_bytes"][k] for k in ("weights", "gradients", "optimizer"))
    assert state == 16 * data["parameters"]["total"]


def test_flags_reach_the_estimate(capsys):
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-m", "lora", "--seq-len", "4096",
                           "-b", "2", "--gradient-checkpointing", "full", "--attention", "sdpa", "--lora-rank", "8",
                           "--lora-targets", "q_proj,v_proj", "--optimizer", "adamw_8bit", "--gpu", "mycard=40",
                           "--gpu", "h100", "--cuda-context-gib", "1", "--fragmentation", "0.2")
    assert code == 0, err
    data = json.loads(out)
    (est,) = estimates(data)
    a = est["assumptions"]
    assert (a["method"], a["seq_len"], a["micro_batch_size"], a["gradient_checkpointing"], a["optimizer"]) == (
        "lora", 4096, 2, "full", "adamw_8bit")
    assert a["lora"]["rank"] == 8 and a["lora"]["targets"] == ["q_proj", "v_proj"]
    assert a["overhead"]["cuda_context_gib"] == 1 and a["overhead"]["fragmentation"] == 0.2
    # LoRA r=8 on q_proj and v_proj of Llama-3-8B: 32 layers x 8 x ((4096+4096) + (4096+1024))
    assert est["parameters"]["trainable"] == 32 * 8 * (8192 + 5120)
    assert [f["gpu"]["name"] for f in cells(data)] == ["mycard", "H100 80GB"]
    assert cells(data)[0]["gpu"]["usable_gib"] == 40


# Every estimate flag's spelling, as users and scripts type them.
FLAGS = ("--method", "-m", "--seq-len", "--batch-size", "-b", "--grad-accum", "--dtype", "--optimizer", "--zero",
         "--num-gpus", "--offload-optimizer", "--offload-params", "--fsdp-wrap-embeddings", "--gradient-checkpointing",
         "--attention", "--repeat-kv", "--lora-rank", "--lora-targets", "--lora-dropout", "--adapter-dtype",
         "--loss-chunks", "--compile-loss", "--compile-layers", "--activation-offloading", "--optimizer-in-backward",
         "--qlora-double-quant", "--no-qlora-double-quant", "--qlora-kernel", "--quantize-head", "--loss-upcast",
         "--no-loss-upcast", "--previous-step-alive", "--gpu", "-g", "--cuda-context-gib", "--fragmentation", "--engine",
         "--context", "--serve-concurrency", "--kv-cache-dtype", "--quantization")


@pytest.mark.parametrize("command", [["--help"], ["scan", "--help"]])
def test_every_setting_has_its_flag(capsys, command):
    import typer

    from hfmem.cli.main import app
    from hfmem.cli.scan import scan_app
    from hfmem.memory.settings import Overhead, Serving, TrainingSettings

    code, out, _ = hfmem(capsys, *command)
    assert code == 0
    assert set(FLAGS) <= set(out.replace("/", " ").replace(",", " ").split())
    params = {p.name for p in typer.main.get_command(scan_app if command[0] == "scan" else app).params}
    leaves = {f.name for cls in (TrainingSettings, Overhead, Serving) for f in fields(cls)} - {"overhead", "serving"}
    assert leaves | {"gpu"} <= params  # every knob that changes memory is reachable from the CLI


def test_the_new_flags_reach_the_estimate(capsys):
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-m", "qlora", "-g", "h100",
                           "--lora-dropout", "0.05", "--adapter-dtype", "bf16", "--previous-step-alive",
                           "--qlora-kernel", "bitsandbytes-legacy", "--attention", "flash")
    assert code == 0, err
    (est,) = estimates(json.loads(out))
    a = est["assumptions"]
    assert a["lora"]["dropout"] == 0.05 and a["lora"]["adapter_dtype"] == "compute"
    assert a["quantization"]["previous_step_alive"] is True and a["attention"] == "flash_attention_2"
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-m", "qlora", "-g", "h100",
                           "--qlora-kernel", "bitsandbytes-legacy")
    (plain,) = estimates(json.loads(out))
    assert est["activations"]["peak"] > plain["activations"]["peak"]  # dropout masks and the previous step's inputs


def test_compile_layers_flag_shrinks_the_layers(capsys):
    base = ("example:Meta-Llama-3-8B", "-f", "json", "-m", "full", "--attention", "sdpa")
    code, out, err = hfmem(capsys, *base, "--compile-layers")
    assert code == 0, err
    (on,) = estimates(json.loads(out))
    code, out, err = hfmem(capsys, *base)
    (off,) = estimates(json.loads(out))
    assert on["assumptions"]["compile_layers"] is True and off["assumptions"]["compile_layers"] is False
    assert on["activations"]["per_layer"][0]["bytes"] < off["activations"]["per_layer"][0]["bytes"]


def test_sharding_divides_model_state(capsys):
    one = json.loads(hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-m", "full")[1])
    eight = json.loads(hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "json", "-m", "full", "--zero", "3",
                             "--num-gpus", "8")[1])
    state = lambda d: sum(estimates(d)[0]["per_gpu_bytes"][k] for k in ("weights", "gradients", "optimizer"))
    assert state(eight) < state(one) / 7  # ZeRO-3 shards all of it (plus gather buffers)


@pytest.mark.parametrize("args, words", [
    (["--method", "dpo"], "--method"),
    (["--dtype", "fp8"], "dtype"),
    (["--gpu", "nosuchgpu"], "unknown GPU"),
    (["--gpu", "x=-3"], "bad GPU spec"),
    (["--batch-size", "0"], "micro_batch_size"),
    (["--zero", "7"], "sharding"),
    (["--num-gpus", "4", "--zero", "none"], "sharding"),
    (["--offload-params"], "offload"),
    (["--lora-dropout", "1.5"], "lora_dropout"),
    (["--adapter-dtype", "int4"], "adapter_dtype"),
    (["--cuda-context-gib", "100"], "cuda_context_gib"),
    (["--dtype", "fp8-te", "--gpu", "a100"], "A100 80GB has none"),
    (["--dtype", "nvfp4", "--gpu", "b200", "--gpu", "h100"], "needs FP4 tensor cores"),
    (["--dtype", "fp8-te", "--fp8-all-gather"], "fp8_all_gather needs dtype fp8-torchao"),
])
def test_bad_flags_are_one_line_errors(capsys, args, words):
    code, out, err = hfmem(capsys, "example:gpt2", *args)
    assert code == 2 and words in err and err.count("\n") == 1 and out == ""


def test_default_table_is_one_screen(capsys):
    code, out, err = hfmem(capsys, "example:Llama-2-70b-hf")
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) <= 32 and max(len(line) for line in lines) <= 100
    assert "H100 80GB" in out and "QLoRA" in out and "assumes: 1 GPU · bf16" in out
    assert '"6 × params(B) GB" napkin: 385.4 GiB · hfmem: full 1,131' in out  # the napkin rule, as a contrast


def test_details_add_the_breakdown(capsys):
    code, out, _ = hfmem(capsys, "example:Mixtral-8x7B-v0.1", "--details", "-g", "h100")
    assert code == 0
    for words in ("Architecture", "experts", "Memory per GPU by term", "optimizer", "Activations"):
        assert words in out


def test_multi_gpu_count_also_with_checkpointing(capsys):
    data = json.loads(hfmem(capsys, "example:Llama-2-70b-hf", "-f", "json", "-m", "full", "-g", "h100")[1])
    (fit,) = cells(data)
    plain, ckpt = fit["multi_gpu"], fit["multi_gpu_with_checkpointing"]
    assert ckpt["gradient_checkpointing"] == "full" and plain["gradient_checkpointing"] == "off"
    assert 8 < ckpt["num_gpus"] < plain["num_gpus"]  # 16 B/param of 69B params alone need > 8 x 80 GB
    assert ckpt["total_bytes"] <= fit["gpu"]["usable_bytes"]


def test_markdown_carries_the_fit_matrix(capsys):
    code, out, _ = hfmem(capsys, "example:Meta-Llama-3-8B", "-f", "markdown", "-g", "rtx4090", "-g", "h200")
    assert code == 0
    assert "| GPU | full fine-tune | LoRA | QLoRA |" in out
    rows = [line for line in out.splitlines() if line.startswith(("| RTX 4090", "| H200"))]
    assert len(rows) == 2 and rows[1].count("✓") == 3  # an 8B model trains every way on a 141 GB H200
    assert "assumes: 1 GPU · bf16" in out


def test_qlora_without_double_quantization_costs_the_fp32_absmax(capsys):
    args = ["example:Meta-Llama-3-8B", "-f", "json", "-m", "qlora", "-g", "rtx4090"]
    with_dq = estimates(json.loads(hfmem(capsys, *args)[1]))[0]
    without = estimates(json.loads(hfmem(capsys, *args, "--no-qlora-double-quant")[1]))[0]
    quantized = with_dq["parameters"]["frozen_quantized"]
    # QLoRA paper: 4 bytes of fp32 absmax per 64 weights, versus 8-bit absmax + fp32 per 256 blocks with DQ
    extra = without["per_gpu_bytes"]["weights"] - with_dq["per_gpu_bytes"]["weights"]
    assert abs(extra - quantized * (4 / 64 - 1 / 64 - 4 / (64 * 256))) < 1e-3 * quantized
    assert without["assumptions"]["quantization"]["double_quant"] is False


def test_the_table_answers_for_the_setup_asked_with_one_total(capsys):
    """2×A100 with ZeRO-3: the cell is that setup's verdict (⚠ when a change such as checkpointing makes it fit),
    with the same figure as --details and the JSON."""
    args = ("example:Mixtral-8x7B-v0.1", "-m", "lora", "-g", "a100-80gb", "--zero", "3", "--num-gpus", "2",
            "--gradient-checkpointing", "full")  # without it, each layer's LoRA-merged experts are kept: 174 GiB
    code, out, err = hfmem(capsys, *args, "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    fit, est = cells(data)[0], estimates(data)[0]
    assert (fit["settings"]["sharding"], fit["settings"]["num_gpus"]) == ("zero3", 2)
    assert fit["total_bytes"] == est["per_gpu_bytes"]["total"]
    figure = f"{est['per_gpu_bytes']['total'] / 2**30:.1f}"
    code, table, err = hfmem(capsys, *args, "--details")
    assert code == 0, err
    cell = next(line for line in table.splitlines() if line.strip().startswith("A100 80GB"))
    mark = "✓" if fit["fits"] else {"change": "⚠"}.get(fit["verdict"], "✗")
    assert mark in cell and figure in cell
    assert any(line.split()[:1] == ["total"] and figure in line for line in table.splitlines())
    assert "2 GPUs, ZeRO-3" in " ".join(table.split())


def test_qlora_cell_and_details_show_the_same_total(capsys):
    """Paged optimizer states count in the total shown everywhere, and only the check leaves them out."""
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-m", "qlora", "-g", "rtx4090", "--format", "json")
    assert code == 0, err
    data = json.loads(out)
    fit, est = cells(data)[0], estimates(data)[0]
    assert est["per_gpu_bytes"]["paged_optimizer"] > 0
    assert fit["total_bytes"] == est["per_gpu_bytes"]["total"] > fit["required_bytes"]


def test_a_figure_above_the_card_that_fits_is_explained(capsys):
    """8-bit paged AdamW on an 80 GiB card: the shown total is above 80 yet fits; the line under the table says why."""
    from hfmem.render.common import PAGED_HINT

    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-g", "a100", "-f", "json")
    data = json.loads(out)
    full = next(f for f in cells(data) if f["method"] == "full")
    change = full["mitigations"][0]
    assert change["total_bytes"] > full["gpu"]["usable_bytes"] >= change["required_bytes"]
    for fmt in ("table", "markdown"):
        code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-g", "a100", "-f", fmt)
        assert code == 0 and PAGED_HINT in " ".join(out.split())
    code, out, err = hfmem(capsys, "example:Meta-Llama-3-8B", "-g", "h200", "-m", "lora")
    assert code == 0 and PAGED_HINT not in " ".join(out.split())
