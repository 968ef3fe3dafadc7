"""torchtitan's train.py as its JobConfig defaults set it: FSDP2 over every GPU, bf16 compute over fp32 shards.

Read from the last torchtitan commit whose configs were TOML files (JobConfig in torchtitan/config/job_config.py;
#2386 then moved them to Python dataclasses with the same fields) and the Llama 3 parallelize code.
"""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

TORCHTITAN = github("pytorch/torchtitan", "238fa9953e4aec2a62582121564273d7cbb1e9f1") + "torchtitan/"
"""torchtitan main before the config refactor (#2386, February 2026)."""
JOB = TORCHTITAN + "config/job_config.py"
PARALLELIZE = TORCHTITAN + "models/llama3/infra/parallelize.py"

PROFILE = Profile(
    name="torchtitan",
    title="torchtitan train.py",
    versions="torchtitan main (238fa99, the last TOML-config commit)",
    defaults=(
        Default("sharding", "fsdp_full_shard", JOB + "#L324",
                "data_parallel_shard_degree -1: FSDP2 (fully_shard) over every GPU the other dimensions leave, "
                "weights, gradients and optimizer states sharded"),
        Default("dtype", "bf16", PARALLELIZE + "#L313",
                "MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32) over fp32 sharded parameters "
                "(training.dtype float32, job_config.py L275): fp32 shards, fp32 gradient shards and fp32 AdamW "
                "moments are 16 bytes per parameter, the same total as bf16 weights and gradients with an fp32 "
                "master copy"),
        Default("fsdp_wrap_embeddings", True, PARALLELIZE + "#L333",
                "tok_embeddings and norm + output are fully_shard units of their own: each gathered only while "
                "used"),
        Default("sync_each_batch", True, TORCHTITAN + "train.py#L542",
                "each micro-batch's loss.backward() runs with gradient sync on (no no_sync): FSDP2 reduce-scatters "
                "every time, so only gradient shards accumulate"),
        Default("optimizer", "adamw", JOB + "#L151",
                "optimizer AdamW with implementation fused (L135): torch's fused AdamW, no extra state-sized buffer"),
        Default("attention", "sdpa", TORCHTITAN + "models/llama3/model/model.py#L219",
                "attn_type sdpa: F.scaled_dot_product_attention with enable_gqa (L275), grouped K/V not repeated"),
        Default("loss_upcast", True, TORCHTITAN + "components/loss.py#L23",
                "cross_entropy_loss runs on pred.flatten(0, 1).float(): fp32 logits"),
        Default("sequence_parallel", "dtensor", PARALLELIZE + "#L219",
                "with tensor_parallel_degree above 1, attention_norm and ffn_norm are SequenceParallel and the "
                "linears ColwiseParallel(input_layouts=Shard(1)): torch's DTensor sequence parallelism"),
        Default("cp_kind", "all-gather", JOB + "#L446",
                "context_parallel_rotate_method allgather: every rank's K/V gathered for the layer"),
        Default("pp_schedule", "1f1b", JOB + "#L396", "pipeline_parallel_schedule 1F1B"),
        Default("compile_layers", False, JOB + "#L722", "compile.enable false: the layers run eagerly"),
        Default("compile_loss", False, JOB + "#L722", "compile.enable false: the loss runs eagerly"),
    ),
)

NOT_MODELLED: tuple[str, ...] = (
    "activation_checkpoint.mode defaults to selective with selective_ac_option 2: every second layer is "
    "checkpointed whole, which no gradient_checkpointing value expresses (full or off are): " + JOB + "#L652",
    "without FSDP (one GPU, or DDP) mixed_precision_param applies through torch.autocast over fp32 weights, "
    "hfmem's amp-bf16: " + JOB + "#L282",
    "FSDP2 casts each unit's bf16 gradients to fp32 (reduce_dtype) for the reduce-scatter: one unit's fp32 copy "
    "beside its bf16 gradients: " + PARALLELIZE + "#L313",
)
