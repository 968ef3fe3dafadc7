"""torchtune's single-device recipes, as their shipped configs set them (llama3_1/8B_*_single_device.yaml).

torchtune has no defaults apart from a recipe config: the values here are the shipped configs' for the common
case, the recipe and module code they run, and the distributed full config's sharding of the embeddings.
"""

from __future__ import annotations

from hfmem.frameworks.profile import Default, Profile, github

TORCHTUNE = github("pytorch/torchtune", "bd2a0fc7c31430972728494fa01aaeeb0ebf1ba1")
"""torchtune main (0.7.0)."""
CONFIGS = TORCHTUNE + "recipes/configs/llama3_1/"
LORA = CONFIGS + "8B_lora_single_device.yaml"
QLORA = CONFIGS + "8B_qlora_single_device.yaml"
FULL = CONFIGS + "8B_full_single_device.yaml"
TORCHAO = github("pytorch/ao", "36027d82d1ad9949597ea16002ff4940374b1b94")
"""torchao main (0.19.0): the NF4 tensor torchtune's QLoRA quantises with."""

PROFILE = Profile(
    name="torchtune",
    title="torchtune recipes",
    versions="torchtune 0.7.0 (bd2a0fc), recipes/configs/llama3_1 *_single_device.yaml; torchao 0.19.0 (36027d8)",
    defaults=(
        Default("dtype", "bf16-pure", LORA + "#L90",
                "the recipe configs set dtype: bf16 and the recipes build the model in it: bf16 weights, gradients "
                "and optimizer states, no fp32 master copy"),
        Default("gradient_checkpointing", "full", LORA + "#L93",
                "enable_activation_checkpointing: True in the single-device configs: each layer recomputed in "
                "backward"),
        Default("activation_offloading", False, LORA + "#L94",
                "enable_activation_offloading: False: saved activations stay on the GPU"),
        Default("compile_layers", False, LORA + "#L78",
                "compile: False: the decoder layers run eagerly and save what eager autograd saves"),
        Default("compile_loss", False, LORA + "#L78",
                "compile: False: the loss runs eagerly (log_softmax's fp32 output saved)"),
        Default("lora_rank", 8, LORA + "#L27", "lora_rank: 8 in the LoRA and QLoRA configs"),
        Default("lora_dropout", 0.0, LORA + "#L29",
                "lora_dropout: 0.0: no dropout mask or dropped input kept per adapted layer"),
        Default("lora_targets", ("q_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"), LORA + "#L24",
                "lora_attn_modules q_proj, v_proj, output_proj (o_proj) and apply_lora_to_mlp: True (w1, w2, w3 = "
                "gate_proj, down_proj, up_proj); k_proj and the output head are left out"),
        Default("adapter_dtype", "compute", TORCHTUNE + "recipes/lora_finetune_single_device.py#L410",
                "the LoRA recipe builds the whole model, adapters included, under set_default_dtype(bf16): 2-byte "
                "adapters, gradients and AdamW states"),
        Default("loss_chunks", 8, TORCHTUNE + "torchtune/modules/loss/cross_entropy_loss.py#L36",
                "the configs' LinearCrossEntropyLoss splits the output projection and cross-entropy into "
                "num_output_chunks=8 chunks: the loss backward's fp32 buffers exist one chunk at a time"),
        Default("loss_upcast", True, TORCHTUNE + "torchtune/modules/loss/cross_entropy_loss.py#L110",
                "each chunk's cross-entropy runs on logits.float(): fp32 logits per chunk"),
        Default("attention", "sdpa", TORCHTUNE + "torchtune/modules/attention_utils.py#L209",
                "unpacked batches call F.scaled_dot_product_attention (is_causal), which dispatches to its flash "
                "or memory-efficient kernel"),
        Default("repeat_kv", True, TORCHTUNE + "torchtune/modules/attention.py#L289",
                "MultiHeadAttention expands grouped K/V to every query head before SDPA: K/V saved at the query "
                "heads' count"),
        Default("sync_each_batch", True, TORCHTUNE + "recipes/full_finetune_distributed.py#L1024",
                "the distributed recipes call backward() on every micro-batch with no no_sync(): FSDP2 "
                "reduce-scatters each time, so only gradient shards accumulate"),
    ),
    method_defaults={
        "full": (
            Default("optimizer", "paged_adamw_8bit", FULL + "#L60",
                    "8B_full_single_device uses bitsandbytes.optim.PagedAdamW8bit: 8-bit states in CUDA managed "
                    "memory"),
            Default("optimizer_in_backward", True, FULL + "#L66",
                    "optimizer_in_bwd: True: each parameter is stepped and its gradient freed as soon as it is "
                    "ready, no full gradient set"),
            Default("fsdp_wrap_embeddings", True, CONFIGS + "8B_full.yaml#L84",
                    "the distributed full config shards tok_embeddings and output as FSDP units of their own "
                    "(custom_sharded_layers): gathered only while used"),
        ),
        "lora": (
            Default("optimizer", "adamw", LORA + "#L63",
                    "torch.optim.AdamW with fused: True: no extra state-sized buffer in the step"),
        ),
        "qlora": (
            Default("optimizer", "adamw", QLORA + "#L62",
                    "torch.optim.AdamW with fused: True: no extra state-sized buffer in the step"),
            Default("qlora_kernel", "torchao", TORCHTUNE + "torchtune/modules/peft/lora.py#L86",
                    "LoRALinear(quantize_base=True) stores the frozen weight as torchao's NF4Tensor, whose linear "
                    "keeps no input for backward"),
            Default("qlora_double_quant", True, TORCHAO + "torchao/quantization/quantize_/workflows/nf4/"
                    "nf4_tensor.py#L694",
                    "NF4Tensor.from_tensor always double-quantises its per-64-weight scalers (int8, one fp scale per "
                    "256 scalers): 8 bits of statistics per 64 weights"),
            Default("quantize_head", False, TORCHTUNE + "torchtune/models/llama3_1/_component_builders.py#L256",
                    "quantize_base is not applied to the output projection: the head stays a bf16 nn.Linear"),
        ),
    },
)

NOT_MODELLED: tuple[str, ...] = (
    "LinearCrossEntropyLoss drops ignore_index positions before the output projection, so the head and the loss "
    "run on the supervised tokens only: " + TORCHTUNE + "torchtune/modules/loss/cross_entropy_loss.py#L132",
)
