"""Generated Hub repos for `hfmem scan` tests and benchmarks: many tiny Llama fine-tunes sharing a few configs,
plus gated, missing, malformed and unknown-architecture ones, added to a running `HubServer`."""

from __future__ import annotations

import json
from dataclasses import dataclass

from hubserver import HubServer, safetensors_header

ORG = "scan-test"
HIDDEN, INTER, LAYERS, HEADS, KV, VOCAB = 64, 128, 2, 4, 2, 1000
ROPE_THETAS = (10_000.0, 20_000.0, 50_000.0, 100_000.0)
"""One distinct config hash per value, all of one shape: rope_theta is in the config hash but leaves the tensors
alone (model.derive.VALUES_ONLY), so they share one meta build."""


def tiny_llama_config(rope_theta: float, name: str, positions: int = 256) -> dict:
    """A 2-layer Llama config; `name` only changes `_name_or_path`, which the config hash ignores; `positions`
    (max_position_embeddings) changes the architecture and its fit matrix but no tensor (RoPE has none)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": HIDDEN,
            "intermediate_size": INTER, "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
            "num_key_value_heads": KV, "vocab_size": VOCAB, "max_position_embeddings": positions,
            "rope_theta": rope_theta, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "_name_or_path": name}


def tiny_llama_header() -> bytes:
    """The header-only model.safetensors of tiny_llama_config (the tensors save_pretrained writes)."""
    head_dim = HIDDEN // HEADS
    tensors: dict[str, tuple[str, list[int]]] = {"model.embed_tokens.weight": ("BF16", [VOCAB, HIDDEN])}
    for i in range(LAYERS):
        p = f"model.layers.{i}."
        tensors |= {p + "self_attn.q_proj.weight": ("BF16", [HEADS * head_dim, HIDDEN]),
                    p + "self_attn.k_proj.weight": ("BF16", [KV * head_dim, HIDDEN]),
                    p + "self_attn.v_proj.weight": ("BF16", [KV * head_dim, HIDDEN]),
                    p + "self_attn.o_proj.weight": ("BF16", [HIDDEN, HEADS * head_dim]),
                    p + "mlp.gate_proj.weight": ("BF16", [INTER, HIDDEN]),
                    p + "mlp.up_proj.weight": ("BF16", [INTER, HIDDEN]),
                    p + "mlp.down_proj.weight": ("BF16", [HIDDEN, INTER]),
                    p + "input_layernorm.weight": ("BF16", [HIDDEN]),
                    p + "post_attention_layernorm.weight": ("BF16", [HIDDEN])}
    tensors |= {"model.norm.weight": ("BF16", [HIDDEN]), "lm_head.weight": ("BF16", [VOCAB, HIDDEN])}
    return safetensors_header(tensors)


@dataclass(frozen=True)
class ScanRepos:
    """What was added: every listed model id and the failures expected, by model id -> error type."""

    models: list[str]
    failures: dict[str, str]
    distinct_configs: int


def add_scan_repos(hub: HubServer, count: int, distinct: int | None = None, shapes: bool = False) -> ScanRepos:
    """Add `count` fine-tunes (with `@v1` branches on some) plus one of each failure kind; return the list.

    The fine-tunes share the four ROPE_THETAS configs, or `distinct` ones (every model its own with
    `distinct=count`): one shape whatever their rope_theta, or with `shapes` each its own max_position_embeddings
    too, so that each needs its own meta build and fit search."""
    header = tiny_llama_header()
    thetas = ROPE_THETAS if distinct is None else tuple(10_000.0 + k for k in range(distinct))
    models = []
    for i in range(count):
        repo_id = f"{ORG}/ft-{i:04d}"
        k = i % len(thetas)
        config = json.dumps(tiny_llama_config(thetas[k], repo_id, 256 + k if shapes else 256)).encode()
        files = {"config.json": config, "model.safetensors": header}
        refs = {"v1": files} if i % 10 == 0 else None
        hub.add_repo(repo_id, files, refs=refs, gated="manual" if i % 50 == 7 else False)
        models.append(f"{repo_id}@v1" if refs else repo_id)
    failures = {m: "GatedRepoError" for m in models if int(m.split("-")[-1].split("@")[0]) % 50 == 7}
    ok_config = json.dumps(tiny_llama_config(ROPE_THETAS[0], "x")).encode()
    hub.add_repo(f"{ORG}/bad-config", {"config.json": b'{"model_type": "llama",', "model.safetensors": header})
    hub.add_repo(f"{ORG}/bad-header", {"config.json": ok_config, "model.safetensors": b"\xff" * 8 + b"{}"})
    hub.add_repo(f"{ORG}/no-config", {"model.safetensors": header})
    hub.add_repo(f"{ORG}/unknown-arch", {"config.json": json.dumps({"model_type": "no-such-arch"}).encode()})
    failures |= {f"{ORG}/bad-config": "MalformedConfigError", f"{ORG}/bad-header": "MalformedCheckpointError",
                 f"{ORG}/no-config": "MalformedConfigError", f"{ORG}/missing": "RepoNotFoundError",
                 f"{ORG}/unknown-arch": "*", f"{ORG}/ft-0001@no-such-branch": "RevisionNotFoundError",
                 "not a model id": "InvalidInputError"}
    extras = [m for m in failures if m not in models]
    return ScanRepos(models + extras, failures, min(count, len(thetas)))
