"""Megatron-LM's pretrain_gpt.py as its arguments set it, trained in bf16 as every shipped example trains.

Megatron's argparse default is fp32 (params_dtype = torch.float when neither --bf16 nor --fp16 is given); the
profile takes --bf16, which its examples and NeMo pass, and what bf16 implies there: an fp32 main_grad buffer that
the data-parallel reduction works in. Every other value is the argument's own default.
"""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

MEGATRON = github("NVIDIA/Megatron-LM", "d98e8a64ddf34856e74b24714e3bedb2f5a39553")
"""Megatron-LM main (core 0.16 development, August 2026)."""
ARGUMENTS = MEGATRON + "megatron/training/arguments.py"
CORE = MEGATRON + "megatron/core/"

PROFILE = Profile(
    name="megatron",
    title="Megatron-LM pretrain_gpt.py",
    versions="Megatron-LM main (d98e8a6)",
    defaults=(
        Default("dtype", "bf16", ARGUMENTS + "#L1204",
                "with --bf16 the model is built in bf16 (params_dtype) and the optimizer keeps fp32 main params and "
                "Adam moments; without it Megatron trains in fp32 (L1194)"),
        Default("grad_dtype", "fp32", ARGUMENTS + "#L1215",
                "bf16 turns on accumulate_allreduce_grads_in_fp32 (main_grads_dtype defaults to fp32, L3671) unless "
                "--grad-reduce-in-bf16: gradients accumulate and are reduced in an fp32 buffer"),
        Default("grad_bucket_view", True, CORE + "distributed/param_and_grad_buffer.py#L1367",
                "each param.main_grad is a view into the DDP gradient buffer that the all-reduce or reduce-scatter "
                "works on: no second gradient copy"),
        Default("sharding", "ddp", ARGUMENTS + "#L3156",
                "--use-distributed-optimizer is off by default: every data-parallel rank holds the whole fp32 main "
                "params and Adam moments (with it: ZeRO-1, hfmem's zero1)"),
        Default("optimizer", "adamw", CORE + "optimizer/__init__.py#L14",
                "--optimizer adam (arguments.py L2913) is Transformer Engine's (or apex's) FusedAdam, with decoupled "
                "weight decay: a fused step, no extra state-sized buffer"),
        Default("sequence_parallel", "off", CORE + "model_parallel_config.py#L94",
                "sequence_parallel defaults to False: with TP, norms, dropouts and the residual stream stay whole "
                "on every TP rank"),
        Default("gradient_checkpointing", "off", CORE + "transformer/transformer_config.py#L532",
                "recompute_granularity defaults to None: no activation recomputation"),
        Default("attention", "flash_attention_2", CORE + "transformer/transformer_config.py#L151",
                "attention_backend auto lets Transformer Engine pick its flash or fused (cuDNN) attention, which "
                "keep no attention matrix"),
        Default("loss_upcast", True, CORE + "tensor_parallel/cross_entropy.py#L25",
                "the vocabulary-parallel cross-entropy casts the logits to fp32 (fp16_lm_cross_entropy is off)"),
        Default("loss_in_place", True, CORE + "tensor_parallel/cross_entropy.py#L25",
                "the fp32 softmax is computed in place in the logits and the gradient written into it"),
        Default("compile_layers", True, CORE + "fusions/fused_bias_swiglu.py#L1",
                "Transformer Engine's and Megatron's fused layers keep what fused kernels keep (the norm's input and "
                "statistics, each linear's input, the activation's input), which compile_layers counts"),
        Default("moe_probs_in_activation", True, CORE + "transformer/moe/experts.py#L963",
                "TEGroupedMLP multiplies the routing weights into the fused SwiGLU (weighted_bias_swiglu_impl), "
                "whose backward keeps only its input and the weights: no expert output is kept"),
        Default("fused_softmax", True, CORE + "fusions/fused_softmax.py#L20",
                "the masked-softmax fusion is on unless --no-masked-softmax-fusion and keeps only its output"),
        Default("pp_buffers", "transfer", CORE + "pipeline_parallel/p2p_communication.py#L336",
                "each receive is allocated when it arrives and each sent output freed (deallocate_pipeline_outputs)"),
        Default("nccl_groups", "megatron", MEGATRON + "megatron/training/training.py#L1729",
                "pretrain's start-time all-reduce runs on the world group, and the mixed-precision optimizer's "
                "found-inf all-reduce and gradient norm on the model-parallel group: two communicators more"),
        Default("pp_schedule", "1f1b", CORE + "pipeline_parallel/schedules.py#L165",
                "with pipeline parallelism and no virtual stages, forward_backward_pipelining_without_interleaving: "
                "1F1B (interleaved when --num-layers-per-virtual-pipeline-stage is given, L163)"),
        Default("cp_kind", "ring", ARGUMENTS + "#L3221",
                "--cp-comm-type defaults to p2p: ring attention, the next rank's K/V chunk received while the "
                "current one is used"),
        Default("hfu_stack", "megatron", MEGATRON + "README.md#L95",
                "the default utilisation is Megatron-LM's own published figures (its README's H100 table: 41-49% MFU, "
                "Megatron-Core r0.8.0; its papers on V100 and A100), not the cross-stack median"),
    ),
)

NOT_MODELLED: tuple[str, ...] = (
    "Megatron ties the output layer to the embedding unless --untie-embeddings-and-output-weights; the profile keeps "
    "the model's config (a Megatron argument file read by --config sets it): " + ARGUMENTS + "#L2460",
)
