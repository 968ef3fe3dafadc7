"""The hfmem dtype of a Hugging Face Trainer run: what its bf16/fp16 flag means depends on the weights' dtype.

HF Trainer's `bf16`/`fp16` turn on torch.autocast; they do not cast the model. So the precision follows from
three facts the frameworks' configs spell differently: the autocast flag, the dtype the trained weights (or
LoRA's frozen base) are stored in, and whether DeepSpeed or FSDP owns the optimizer. DeepSpeed keeps fp32
master weights of 16-bit parameters in its optimizer, and accelerate upcasts FSDP's trainable parameters to
fp32 whenever mixed precision is on ("we follow DeepSpeed's strategy to hold the parameters in full
precision", accelerate src/accelerate/accelerator.py at 16cb6eb8, lines 1981-2030, and utils/fsdp_utils.py
lines 806-814): both are hfmem's mixed `bf16`/`fp16`. Without either, 16-bit weights are trained as they are,
with 16-bit AdamW states (`bf16-pure`), and fp32 weights under autocast are `amp-bf16`/`amp-fp16`.
"""

from __future__ import annotations

WEIGHT_DTYPES = {
    "bfloat16": "16", "bf16": "16", "float16": "16", "fp16": "16", "half": "16",
    "float32": "fp32", "fp32": "fp32", "float": "fp32",
    "auto": "16",  # the checkpoint's own dtype: 16-bit for the LLM checkpoints these configs train
}
"""A load dtype as configs write it (torch_dtype / dtype) -> "16" (bf16 or fp16) or "fp32"."""


def trainer_dtype(method: str | None, autocast: str | None, weights: str, engine: bool) -> str:
    """hfmem's dtype for a Trainer run: `autocast` "bf16"/"fp16"/None, `weights` "16"/"fp32", `engine` DeepSpeed/FSDP.

    `weights` is the dtype of the trained weights for a full fine-tune and of the frozen base for LoRA (QLoRA's
    quantised layers aside). A 16-bit full fine-tune without a master copy is `bf16-pure` whichever 16-bit dtype it
    is: the bytes per weight, gradient and state are the same.
    """
    if engine and autocast:
        return autocast
    if weights == "fp32":
        return f"amp-{autocast}" if autocast else "fp32"
    if method == "full" or autocast is None:
        return "bf16-pure"
    return autocast
