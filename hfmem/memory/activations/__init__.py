"""Activation memory of one training step, from the real architecture: what autograd saves, layer by layer.

The model lists, for each decoder layer, the tensors that transformers' modeling code leaves saved
for backward (norm upcasts, projections' inputs, RoPE'd q/k, the attention kernel's saved state,
the MLP's activation internals, MoE routing and routed-token copies, dropout masks) with their
sizes for micro-batch b and sequence s. Storages shared by several ops (one normed input feeding
q/k/v) count once. A tensor kept only for a *weight* gradient (a linear's input, a norm's
normalised input) is dropped when that weight is frozen (LoRA/QLoRA), and LoRA adapters add their
own input copies. This is what `tests/test_activations.py` checks against real forward passes.

Conventions (all documented in the estimate's assumptions):
- compute dtype p bytes (2 for bf16/fp16, 4 for fp32); norms upcast to fp32 as the HF code does;
- dropout masks: 1 byte/element (CUDA's bool mask); `dropout_mask_bytes=None` models the CPU path,
  which keeps the mask in the dtype of the tensor it masks;
- the loss: transformers upcasts logits to fp32 and keeps log_softmax's fp32 output (4·b·s·V);
  its backward briefly needs two more fp32 (b·s, V) buffers: the "loss peak";
- gradient checkpointing "full" keeps each checkpointed region's input plus one region recomputed at a time
  (every layer on its own by default; Megatron's uniform groups and block method, torchtitan's every n-th layer
  in `recompute`); "selective" (Korthikanti et al.) recomputes only the attention core (the a·s² terms); "op"
  (torchtitan's per-op policy) keeps each layer's input and every other matmul's and SDPA's outputs;
- a layer's backward holds its intermediates' gradients on top of its saved tensors (`backward`); it runs
  after the loss and the head have freed theirs, and the first layer's runs beside nearly all gradients
  (the whole step's live bytes are checked by `tests/test_live_peak.py`);
- compiled layers (torch.compile of each decoder layer, inductor's min-cut partitioner): backward
  recomputes cheap elementwise work from what the matmuls and kernels need, so an RMSNorm keeps only
  its input and rstd (no fp32 copy, no normalised copy), an activation function keeps its input but
  not its output or temporaries, and eager attention keeps its raw scores and two fp32 row
  statistics instead of the fp32 softmax. Everything else (matmul inputs, RoPE'd q/k, the fused
  attention's output and logsumexp, MoE routing and routed copies) is saved as in eager mode.
  Validated term by term against real compiled forwards (tests/test_compiled_layers.py).
No torch import: pure arithmetic over the Architecture and the Inventory's linear layers.

Layout: `spec` (the step's settings and the per-estimate spec, with `families`' quirks and `structure`'s
layers by role) feeds one module per kind of op (`norms`, `linears`, `attention`, `mlp`, `moe`, `mamba`,
with `ops`' shared rules), composed into a `layer`, the `stack`, the `embedding`, the `head` and loss, and
the step's `schedule` (which layers are recomputed: `recompute`); `backward` gives each layer's backward working
set; `compose` puts them together into the `result`.
"""

from hfmem.memory.activations.compose import estimate_activations
from hfmem.memory.activations.result import ActivationEstimate, LayerActivation
from hfmem.memory.activations.spec import ActivationSettings
from hfmem.memory.activations.structure import LayerModules, layer_modules
from hfmem.memory.activations.trainability import Trainability

__all__ = ["ActivationEstimate", "ActivationSettings", "LayerActivation", "LayerModules", "Trainability",
           "estimate_activations", "layer_modules"]
