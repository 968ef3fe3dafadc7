"""`hfmem serve MODEL`: how many sequences of what length a serving engine holds on each GPU, with its reserve,
the KV pool and the verdict; the same MODEL forms and -g/--gpu as `hfmem MODEL`."""

from __future__ import annotations

import json
import sys
from functools import partial
from typing import Annotated, Any

import typer

from hfmem.cli.formats import OutputFormat
from hfmem.cli.help import MARKUP, PlainHelpCommand
from hfmem.constants import HUB_TIMEOUT_S

serve_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=MARKUP)


@serve_app.command(help="Serving memory of a Hugging Face model: per GPU, the weights, what the engine reserves "
                        "(activation peak, memory outside torch), the KV cache capacity in tokens, the concurrency "
                        "at --context tokens and the longest context at --concurrency. MODEL is a Hub id, a local "
                        "directory, a config.json or example:NAME.", cls=PlainHelpCommand)
def serve(
    model: Annotated[str, typer.Argument(metavar="MODEL", help="org/name[@revision], a directory, a config.json or "
                                                              "example:NAME", show_default=False)],
    gpu: Annotated[list[str] | None, typer.Option("--gpu", "-g", help="GPUs (repeatable or comma-separated; "
                                                     "default: the whole catalogue).", show_default=False)] = None,
    engine: Annotated[str, typer.Option(help="vllm, sglang, llama.cpp or transformers.")] = "vllm",
    context: Annotated[int, typer.Option(help="Tokens per request (prompt and output) for the concurrency.")] = 4096,
    concurrency: Annotated[int, typer.Option(help="Requests at once for the longest context.")] = 1,
    tp: Annotated[int, typer.Option("--tp", help="Tensor-parallel GPUs per replica.")] = 1,
    pp: Annotated[int, typer.Option("--pp", help="Pipeline-parallel stages per replica.")] = 1,
    kv_cache_dtype: Annotated[str, typer.Option(help="auto (the model's dtype), fp8, fp8_e5m2, bfloat16, float16, "
                                                     "float32, q8_0, q4_0.")] = "auto",
    quantization: Annotated[str | None, typer.Option(help="Weights packed as fp8, int8, awq, gptq, nf4, mxfp4, "
                                                             "nvfp4 or a GGUF type (q8_0, q6_k, q5_k, q4_k, q4_0, "
                                                             "q3_k, q2_k, f16); default: as stored.",
                                                        show_default=False)] = None,
    memory_fraction: Annotated[float | None, typer.Option(
        help="vLLM gpu_memory_utilization / SGLang mem_fraction_static (default: the engine's).",
        show_default=False)] = None,
    max_num_batched_tokens: Annotated[int | None, typer.Option(
        help="vLLM max_num_batched_tokens / SGLang chunked_prefill_size / llama.cpp n_ubatch (default: the "
             "engine's for the GPU).", show_default=False)] = None,
    max_num_seqs: Annotated[int | None, typer.Option(help="vLLM max_num_seqs (default: the engine's for the GPU).",
                                                        show_default=False)] = None,
    cuda_context_gib: Annotated[float, typer.Option(help="Memory outside torch per GPU in GiB: CUDA context and "
                                                     "library workspaces.")] = 0.5,
    n_gpu_layers: Annotated[int | None, typer.Option("--n-gpu-layers", "-ngl", help="llama.cpp: layers offloaded "
                                                        "to the GPU (default: all).", show_default=False)] = None,
    revision: Annotated[str | None, typer.Option(help="Branch, tag or commit sha.")] = None,
    token: Annotated[str | None, typer.Option(help="Hub token (default: HF_TOKEN, then the saved login).",
                                                 show_default=False)] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per Hub request before retrying.")] = HUB_TIMEOUT_S,
    output: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
) -> None:
    from hfmem.cli.options import split_list
    from hfmem.cli.waiting import stall_notices
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.model.load import analyse
    from hfmem.serving.capacity import ServingSettings
    from hfmem.serving.report import serving_report

    settings = ServingSettings(engine=engine, context=context, concurrency=concurrency, tp=tp, pp=pp,
                               kv_cache_dtype=kv_cache_dtype, quantization=quantization,
                               memory_fraction=memory_fraction, max_num_batched_tokens=max_num_batched_tokens,
                               max_num_seqs=max_num_seqs, cuda_context_gib=cuda_context_gib, gpu_layers=n_gpu_layers)
    gpus = resolve_gpus(split_list(gpu))
    ref = parse_model_ref(model, revision)
    with stall_notices():
        analysed = analyse(ref, partial(HubSettings.from_env, token=token, timeout=timeout))
    report = serving_report(analysed, gpus, settings)
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(report, separators=(",", ":"), ensure_ascii=False) + "\n")
    else:
        sys.stdout.write(render_text(report, markdown=output is OutputFormat.markdown))


COLUMNS = ("GPU", "weights", "activation", "overhead", "KV pool", "KV tokens", "×@context", "context@concurrency",
           "verdict")


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.1f} GiB"


def render_text(report: dict[str, Any], markdown: bool) -> str:
    """The serving report as a plain or markdown table, then each term of the breakdown explained."""
    s = report["settings"]
    sizes, eng = report["sizes"], report["engine"]
    kv = sizes["kv"]
    head = [f"{report['model']}: serving with {eng['name']} {eng['version']}, TP{s['tp']} PP{s['pp']}, context "
            f"{s['context']:,}, concurrency {s['concurrency']}",
            f"weights: {_gib(sizes['weights_total_bytes'])} from {sizes['weights_source']}",
            f"KV cache per token: {kv['full_bytes_per_token'] + kv['window_bytes_per_token']:,.0f} B on one GPU "
            f"({kv['full_layers']} full-attention layers, {kv['window_layers']} sliding-window layers"
            + (f" of {kv['window']:,} tokens" if kv["window"] else "") + f", {sizes['kv_element_bytes']:g} B per "
            f"element)" + (f"; state per sequence {_gib(kv['state_bytes_per_sequence'])} over {kv['state_layers']} "
                           "Mamba layers" if kv["state_layers"] else "")]
    rows = []
    for g in report["gpus"]:
        kinds = {kind: sum(t["bytes"] for t in g["terms"] if t["kind"] == kind)
                 for kind in ("weights", "activation", "overhead")}
        overhead = kinds["overhead"] + g["gpu_bytes"] - g["budget_bytes"]
        rows.append((g["gpu"], _gib(kinds["weights"]), _gib(kinds["activation"]), _gib(overhead),
                     _gib(g["kv_bytes"]), f"{g['kv_tokens']:,}",
                     f"{g['concurrency_at_context']:.2f}", f"{g['context_at_concurrency']:,}", g["cell"]))
    explained, seen = [], set()
    for g in report["gpus"]:
        for line in [f"{t['name']}: {t['why']}" for t in g["terms"]] + g["notes"]:
            if line not in seen:
                seen.add(line)
                explained.append(line)
    explained.append(f"overhead: memory outside torch and the part of the card the engine leaves unused. "
                     f"Rule: {eng['rule']}")
    if markdown:
        table = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
        table += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n\n".join(["\n".join(f"**{h}**" if i == 0 else h for i, h in enumerate(head)), "\n".join(table),
                            "\n".join(f"- {line}" for line in explained)]) + "\n"
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]
    table = ["  ".join(c.ljust(w) for c, w in zip(COLUMNS, widths, strict=True)).rstrip()]
    table += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(head + [""] + table + [""] + [f"· {line}" for line in explained]) + "\n"
