"""Real tensor and pipeline parallelism on CPU (gloo): each rank's live bytes over a whole training step.

    python tests/layout_ranks.py OUT.json tp|tp-sp|fsdp-tp|pp-gpipe|pp-1f1b|pp-interleaved BATCH SEQ [MICRO]
    python tests/layout_ranks.py OUT.json tp-qwen2|tp-sp-qwen2|tp-mixtral|tp-sp-mixtral BATCH SEQ

tp / tp-sp: a tiny Llama (tests/tiny_models.py) under torch.distributed.tensor.parallel on 2 ranks, with
torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py apply_tp): q/k/v, gate/up column-parallel,
o/down row-parallel, a vocabulary-parallel embedding and head, and the loss under loss_parallel; tp-sp adds
SequenceParallel norms and the attention's and MLP's inputs gathered once by PrepareModuleInput; -qwen2 and -mixtral
train a tiny Qwen2 (biased q/k/v, GQA) or Mixtral (its routed experts split by TP as torchtitan's MoE plan does, the
router replicated) instead of the Llama. fsdp-tp: the same
TP plan on a 2 x 2 mesh (dp_shard x tp, 4 ranks) with each layer and the root under fully_shard over dp_shard, as
torchtitan composes them. pp-*: torch.distributed.pipelining on 2 ranks, each stage a torch.nn.Module holding half
the layers (the embedding on the first, the final norm, head and loss on the last), MICRO_BATCHES micro-batches a
step under ScheduleGPipe or Schedule1F1B; pp-interleaved: 4 layers on 4 stages, stages r and r + 2 on rank r,
under ScheduleInterleaved1F1B. Every case: pure bf16, AdamW (fused), two steps, the second measured
by LiveBytes (tests/live_peak.py), parameters counted by their local shards. OUT.json gets each rank's peak, the op
it happened at, and what was alive then by category.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from live_peak import LiveBytes
from ranks import leave, spawn
from saved_activations import build_model
from tiny_models import tiny_config

MODEL = "meta-llama/Meta-Llama-3-8B"
MODELS = {"qwen2": "Qwen/Qwen2.5-0.5B", "mixtral": "mistralai/Mixtral-8x7B-v0.1"}
"""Other families the TP cases run (`tp-qwen2`, `tp-sp-mixtral`, ...): Qwen2's biased q/k/v projections under
GQA, Mixtral's routed experts split by TP."""
OVERRIDES = {"qwen2": {"hidden_size": 256, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 32,
                       "tie_word_embeddings": False}}
"""Qwen2.5-0.5B's tiny shape has 7 heads and 1 KV head, which TP 2 cannot split: 8 and 2 here (the GQA ratio of
Qwen2.5-7B), and an untied head (as Qwen2.5-7B's) so that the embedding and head shard apart."""
WORLD = {"tp": 2, "tp-sp": 2, "fsdp-tp": 4, "pp-gpipe": 2, "pp-1f1b": 2, "pp-interleaved": 2}
WORLD |= {f"{kind}-{name}": 2 for kind in ("tp", "tp-sp") for name in MODELS}
LAYERS = {"fsdp-tp": 4, "pp-interleaved": 4}
"""Decoder layers where a case needs more than 2: FSDP gathers two layers and the root unit at a time, which two
layers alone would not tell apart from the whole model; the interleaved schedule puts one on each of 4 stages."""
VIRTUAL = 2
"""Stages per rank of the interleaved schedule (ScheduleInterleaved1F1B; stage r and r + 2 on rank r)."""


def family(kind: str) -> str:
    """The model family a case trains: the kind's suffix when it names one of MODELS, else Llama."""
    suffix = kind.rsplit("-", 1)[-1]
    return suffix if suffix in MODELS else "llama"


def base_kind(kind: str) -> str:
    """The layout of a case without its family suffix (tp-sp-mixtral: tp-sp)."""
    return kind.removesuffix(f"-{family(kind)}")


def config(kind: str) -> dict[str, Any]:
    """The tiny model a case trains (a Llama unless the kind names another family)."""
    name = family(kind)
    return tiny_config(MODELS.get(name, MODEL), LAYERS.get(kind, 2), **OVERRIDES.get(name, {}))


def _tp_plan(model: Any, mesh: Any, sequence_parallel: bool) -> None:
    """torchtitan's apply_tp for a transformers Llama: the decoder layers, then the embedding, final norm, head."""
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    seq = Shard(1) if sequence_parallel else Replicate()
    for layer in model.model.layers:
        moe = hasattr(layer.mlp, "experts")
        plan: dict[str, Any] = {
            "self_attn.q_proj": ColwiseParallel(), "self_attn.k_proj": ColwiseParallel(),
            "self_attn.v_proj": ColwiseParallel(), "self_attn.o_proj": RowwiseParallel(output_layouts=seq),
        }
        if not moe:
            plan |= {"mlp.gate_proj": ColwiseParallel(), "mlp.up_proj": ColwiseParallel(),
                     "mlp.down_proj": RowwiseParallel(output_layouts=seq)}
        if sequence_parallel:
            plan |= {
                "input_layernorm": SequenceParallel(), "post_attention_layernorm": SequenceParallel(),
                "self_attn": PrepareModuleInput(input_kwarg_layouts={"hidden_states": Shard(1)},
                                                desired_input_kwarg_layouts={"hidden_states": Replicate()}),
            }
            if not moe:
                plan["mlp"] = PrepareModuleInput(input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),))
        parallelize_module(layer, mesh, plan)
        if moe:
            _expert_tp(layer.mlp, mesh, seq)
    top: dict[str, Any] = {
        "model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=seq),
        "lm_head": ColwiseParallel(input_layouts=seq, output_layouts=Shard(-1), use_local_output=False),
    }
    if sequence_parallel:
        top["model.norm"] = SequenceParallel()
    parallelize_module(model, mesh, top)


class _ToLocal(torch.nn.Module):
    """A parametrization: a DTensor parameter read as its local shard (torchtitan's GroupedExperts.forward reads its
    DTensor weights with to_local() the same way)."""

    def forward(self, weight: Any) -> torch.Tensor:
        return weight.to_local()


def _expert_tp(block: Any, mesh: Any, seq: Any) -> None:
    """torchtitan's TP of a MoE block without EP (torchtitan/models/llama4/infra/parallelize.py apply_moe_ep_tp,
    torchtitan/distributed/expert_parallel.py TensorParallel): the router replicated, the routed experts' up and
    gate projections split on their output dimension and the down projection on its input one, the block's input
    gathered (under SP) and its partial-sum output all-reduced or reduce-scattered by PrepareModuleInputOutput, on
    transformers' fused experts (gate_up_proj: [experts, 2 x intermediate, hidden]), whose gate and up halves are
    interleaved per rank first so that each rank's Shard(1) holds its part of both."""
    from torch.distributed.tensor import Partial, Replicate, Shard, distribute_tensor
    from torch.distributed.tensor.parallel import PrepareModuleInputOutput, parallelize_module
    from torch.nn.utils import parametrize

    experts, tp = block.experts, mesh.size()
    e, two_i, h = experts.gate_up_proj.shape
    with torch.no_grad():
        gate_up = experts.gate_up_proj.view(e, 2, tp, two_i // 2 // tp, h).transpose(1, 2).reshape(e, two_i, h)
        experts.gate_up_proj = torch.nn.Parameter(distribute_tensor(gate_up, mesh, [Shard(1)]))
        experts.down_proj = torch.nn.Parameter(distribute_tensor(experts.down_proj.data, mesh, [Shard(2)]))
    for name in ("gate_up_proj", "down_proj"):
        parametrize.register_parametrization(experts, name, _ToLocal(), unsafe=True)
    parallelize_module(block, mesh, PrepareModuleInputOutput(
        input_layouts=(seq,), desired_input_layouts=(Replicate(),), use_local_input=True,
        output_layouts=(Partial(),), desired_output_layouts=(seq,), use_local_output=True))


def _tp_step(model: Any, ids: torch.Tensor) -> None:
    """The forward, the vocabulary-parallel loss (torch's loss_parallel over the Shard(-1) logits, in fp32) and
    the backward."""
    from torch.distributed.tensor.parallel import loss_parallel

    s = ids.shape[1]
    positions = torch.arange(s).unsqueeze(0)
    logits = model(input_ids=ids, position_ids=positions, cache_position=torch.arange(s), use_cache=False).logits
    with loss_parallel():
        torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), ids.roll(-1, 1).flatten()).backward()


def _tp_rank(rank: int, port: int, case: tuple[str, int, int, int], out: str) -> None:
    """One rank of tp, tp-sp or fsdp-tp: parallelise, train two steps, write the second step's peak."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    kind, b, s, _ = case
    world = WORLD[kind]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = build_model(config(kind), "sdpa")
    if base_kind(kind) == "fsdp-tp":
        mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp_shard", "tp"))
        _tp_plan(model, mesh["tp"], sequence_parallel=True)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh["dp_shard"])
        fully_shard(model, mesh=mesh["dp_shard"])
        data_rank = mesh.get_coordinate()[0]
    else:
        _tp_plan(model, init_device_mesh("cpu", (world,)), sequence_parallel=base_kind(kind) == "tp-sp")
        data_rank = 0
    ids = torch.randint(0, model.config.vocab_size, (b, s), generator=torch.Generator().manual_seed(data_rank))
    _train(model, lambda: _tp_step(model, ids), rank, out)


def _train(model: Any, step: Any, rank: int, out: str) -> None:
    """Two steps of `step` (forward and backward) and AdamW under LiveBytes; the second step's peak written to
    out.RANK. AdamW is the fused one (hfmem's `adamw`, no step temporaries; the for-loop path allocates two
    temporaries the size of each parameter in turn, which for Mixtral's fused experts tensor tops the step), with
    DTensor and plain parameters in separate groups (one fused call may not mix them)."""
    from torch.distributed.tensor import DTensor

    trainable = [p for p in model.parameters() if p.requires_grad]
    groups = [[p for p in trainable if isinstance(p, DTensor) == dtensor] for dtensor in (True, False)]
    optimizer = torch.optim.AdamW([{"params": g} for g in groups if g], lr=1e-4, fused=True)
    live = LiveBytes()
    with live:
        live.adopt(list(model.parameters()) + list(model.buffers()), "weights")
        for index in range(2):
            if index == 1:
                live.reset_peak()
            with live.phase("forward+backward"):
                step()
            with live.phase("step"):
                optimizer.step()
            live.mark([p.grad for p in trainable], "gradients")
            live.mark([optimizer.state[p] for p in trainable], "optimizer states")
            optimizer.zero_grad(set_to_none=True)
    Path(f"{out}.{rank}").write_text(json.dumps({"peak": live.peak, "when": live.peak_op,
                                                 "breakdown": list(live.breakdown().items())}))
    leave()


class _Stage(torch.nn.Module):
    """One pipeline stage of a transformers Llama: its slice of the decoder layers, the embedding on the first,
    the final norm and head on the last (each stage computes its own RoPE tables from the positions)."""

    def __init__(self, model: Any, stage: int, stages: int) -> None:
        super().__init__()
        layers = model.model.layers
        per = len(layers) // stages
        self.layers = torch.nn.ModuleList(layers[stage * per:(stage + 1) * per])
        self.embed = model.model.embed_tokens if stage == 0 else None
        self.norm = model.model.norm if stage == stages - 1 else None
        self.head = model.lm_head if stage == stages - 1 else None
        self.rotary = model.model.rotary_emb

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.embed(x) if self.embed is not None else x
        positions = torch.arange(hidden.shape[1]).unsqueeze(0)
        rope = self.rotary(hidden, positions)
        for layer in self.layers:
            hidden = layer(hidden, position_embeddings=rope, position_ids=positions, attention_mask=None)
        if self.head is None:
            return hidden
        return self.head(self.norm(hidden))


def _pp_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """The causal-LM loss in fp32 on the last stage."""
    return torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), target.flatten())


def _pp_rank(rank: int, port: int, case: tuple[str, int, int, int], out: str) -> None:
    """One rank of pp-gpipe, pp-1f1b or pp-interleaved: its stage (or stages), the schedule over MICRO_BATCHES
    micro-batches, two steps."""
    from torch.distributed.pipelining import (
        PipelineStage,
        Schedule1F1B,
        ScheduleGPipe,
        ScheduleInterleaved1F1B,
    )

    kind, b, s, micro = case
    world = WORLD[kind]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = build_model(config(kind), "sdpa")
    if kind == "pp-interleaved":
        stages = world * VIRTUAL
        chunks = [_Stage(model, rank + v * world, stages) for v in range(VIRTUAL)]
        module: torch.nn.Module = torch.nn.ModuleList(chunks)
        schedule = ScheduleInterleaved1F1B(
            [PipelineStage(c, rank + v * world, stages, torch.device("cpu")) for v, c in enumerate(chunks)],
            micro, loss_fn=_pp_loss)
    else:
        module = _Stage(model, rank, world)
        stage = PipelineStage(module, rank, world, torch.device("cpu"))
        schedule = (ScheduleGPipe if kind == "pp-gpipe" else Schedule1F1B)(stage, micro, loss_fn=_pp_loss)
    del model
    ids = torch.randint(0, config(kind)["vocab_size"], (b * micro, s), generator=torch.Generator().manual_seed(0))
    first, last = rank == 0, rank == world - 1

    def step() -> None:
        schedule.step(ids if first else None, target=ids.roll(-1, 1) if last else None, return_outputs=False)

    _train(module, step, rank, out)


def measure(case: tuple[str, int, int, int]) -> list[dict[str, Any]]:
    """Every rank's second-step peak for (kind, micro-batch, sequence, micro-batches a step); the ranks are forked
    from this process once it has imported torch and transformers (a spawned rank imports them again)."""
    runner = _pp_rank if case[0].startswith("pp") else _tp_rank
    build_model(config(case[0]), "sdpa")  # imports transformers' modules for the case before the fork
    return spawn(runner, WORLD[case[0]], case, start_method="fork")


def main() -> None:
    out, kind, b, s = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    micro = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    Path(out).write_text(json.dumps(measure((kind, b, s, micro))))


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
