"""Which weights get gradients and how LoRA adapters hold their inputs: what decides which tensors autograd keeps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Trainability:
    """Which weights get gradients, and how LoRA adapters see their inputs.

    `trainable`: leaf names of trainable weight matrices, or {"*"} for full fine-tuning (norms,
    embeddings and routers included). `lora`: leaf names carrying a LoRA adapter.
    `adapter_input_bytes`: bytes per element of the copy of the input that each adapter saves
    (0: it shares the base layer's input, as torchtune/LitGPT or QLoRA under autocast do).
    """

    trainable: frozenset[str] = frozenset({"*"})
    lora: frozenset[str] = frozenset()
    lora_rank: int = 0
    adapter_input_bytes: float = 0.0
    adapter_output_bytes: float = 4.0
    lora_dropout: float = 0.0
    kept_inputs: frozenset[str] = frozenset()
    """Frozen layers that keep their input anyway: bitsandbytes < 0.43.2's 4-bit matmul stored its input for
    a weight gradient it never computes (ctx.tensors = (A, B) in MatMul4Bit; bitsandbytes PR #1270 dropped A)."""
    dequantized: frozenset[str] = frozenset()
    """Frozen quantized layers whose kernel dequantises the weight and matmuls it (GPTQ/AWQ torch kernels):
    autograd saves that compute-dtype weight for the input's gradient, once per layer and step."""
    merged: frozenset[str] = frozenset()
    """Fused 3-D expert tensors with LoRA (PEFT's ParamWrapper, transformers 5): each forward folds B·A into a whole
    new copy of the tensor (W + B·A, one baddbmm), which the expert matmuls save for the input's gradient and whose
    full-size gradient backward builds before reducing it to A's and B's; their inputs are kept for that gradient,
    as a trained weight's are. No adapter sees the tokens."""
    adapter: str = "lora"
    """The adapter on the `lora` layers (hfmem.memory.peft_methods.ADAPTER_KINDS): lora and dora read their own
    input for lora_A's gradient, boft its input in the compute dtype for the rotation's; lora-fa (A frozen), vera
    (frozen shared A/B) and ia3 (a scaling vector) do not."""
    ia3_feedforward: frozenset[str] = frozenset()
    """IA3 layers scaled on their input (the MLP's output projection); the others are scaled on their output."""
    oft_block_size: int = 0
    """OFT: the rotation's block size (its per-layer tensors are in/bs x bs x bs)."""
    boft_block_size: int = 0
    """BOFT: the rotation's block size; with boft_butterfly, its butterfly factors."""
    boft_butterfly: int = 0
    prefix_tokens: int = 0
    """Prefix tuning: virtual tokens prepended to every layer's keys and values."""
    input_requires_grad: bool = True
    """Whether the embedding output requires grad (full FT, or LoRA with checkpointing, where HF calls
    enable_input_require_grads). When False, layer 0 saves nothing before its first adapter."""

    @property
    def full(self) -> bool:
        """Full fine-tuning: every weight gets a gradient."""
        return "*" in self.trainable

    def weight(self, name: str) -> bool:
        """Whether the weight named `name` (leaf name, or a role like "norm"/"router") gets a gradient."""
        return self.full or name in self.trainable or name in self.lora

    def needs_input(self, name: str, input_grad: bool = True) -> bool:
        """Whether the layer `name` keeps its input for backward (its weight or a sharing adapter needs it, or its
        kernel keeps it anyway, which it does only for an input that needs a gradient: `input_grad`)."""
        if self.full or name in self.trainable or name in self.merged or (input_grad and name in self.kept_inputs):
            return True
        if self.adapter == "boft":  # x @ boft_rotation keeps the layer's own input for the rotation's gradient
            return name in self.lora
        reads_input = self.adapter in {"lora", "dora"}
        return name in self.lora and reads_input and self.adapter_input_bytes == 0 and self.lora_dropout == 0


FULL = Trainability()
"""Full fine-tuning."""
