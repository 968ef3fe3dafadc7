"""Per-GPU training memory by term (`MemoryBreakdown`) and how `combine` adds the terms into the peak.

How the total is formed (all per GPU):
    allocated_peak = weights + gradients + optimizer + sharding_buffers + activations
                     + optimizer_step_transient + autocast_weight_copies + quantized_weight_copies
                     + parallel_buffers + scaling_state - gradient_activation_overlap
                   = weights + optimizer + scaling_state + sharding_buffers - backward-only buffers
                     + max(activations + gradients alive in forward,
                           stored activations + a layer's backward + backward-only buffers,
                           the first layer's backward + gradients + backward-only buffers,
                           gradients + optimizer_step_transient)
    total = allocated_peak + fragmentation + cuda_context + nccl + paged_optimizer
(or the total of another phase where it needs more: loading the whole model on each GPU before sharding, an
evaluation forward, generating samples, a full checkpoint save), where
paged_optimizer (bitsandbytes paged states, in CUDA managed memory) sits outside PyTorch's
allocator: it is in the device total but not in allocated/reserved, and it can page out to the CPU,
so `required` = total - paged_optimizer is what must stay resident (the fit checks use it);
where `optimizer` is ZeRO's K·Ψ (states + fp32 master weights), `activations` is what backward
keeps at the end of the forward pass plus the largest transient (the loss's fp32 buffers, a layer's
backward: its checkpointed recompute and its intermediates' gradients, QLoRA's dequantised weight),
and the overlap removes the gradients that are not yet allocated while all activations are alive (and FSDP's
unsharded unit gradients, which exist only while the layers run backward, not at the end of the forward nor in the
loss's backward):
with gradients set to None after each step (the HF default), backward allocates gradients as it
frees activations, so the loss and the last layers run beside the first gradients only, and the
first layer's backward (the last to run: its saved tensors or recompute, its working set, the
embedding's) beside nearly all of them. Accumulating over several micro-batches (or ZeRO's
preallocated gradient partitions) keeps gradients alive: no overlap. `fragmentation` is the
allocator's reserved-but-unused share and `cuda_context` the CUDA context: both explicit settings; `nccl` the
buffers of the NCCL communicators a rank of a multi-GPU run uses (hfmem.memory.nccl), outside the allocator like the
context, so in every phase's device total but never in allocated_peak or reserved_peak.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from hfmem.memory.activations import ActivationEstimate
from hfmem.memory.model_state import ModelState, ParameterSplit
from hfmem.memory.nccl import nccl_bytes
from hfmem.memory.settings import TrainingSettings
from hfmem.units import GIB


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes per GPU by term; the field order is the order of the JSON report's `per_gpu_bytes`."""

    weights: int
    """The model's weights on this GPU (after sharding and offload)."""
    gradients: int
    """Gradients of the trainable parameters on this GPU."""
    optimizer: int
    """ZeRO's K·Ψ: optimizer states plus the fp32 master weights."""
    activations: int
    """What backward keeps at the end of the forward pass plus the largest transient."""
    overhead: int
    """fragmentation + cuda_context + nccl."""
    total: int
    """The device total: allocated_peak + overhead + paged_optimizer."""
    required: int
    """What must stay resident: total - paged_optimizer (the fit checks compare this)."""
    master_weights: int
    """The fp32 master copy of the trainable weights (part of optimizer)."""
    optimizer_states: int
    """The optimizer's moments (part of optimizer)."""
    sharding_buffers: int
    """DDP buckets, ZeRO's reduce bucket and gathered parameters, FSDP's root unit."""
    activations_stored: int
    """Activations saved for backward at the end of the forward pass."""
    activation_transient: int
    """The largest transient on top of the stored activations."""
    loss_peak: int
    """The loss's peak buffers (fp32 logits and their gradient)."""
    recompute: int
    """One checkpointed layer's activations, recomputed during backward."""
    backward_working: int
    """The gradients of the largest layer's intermediates, alive together during its backward."""
    optimizer_step_transient: int
    """Allocated only inside optimizer.step(), when the activations are gone."""
    autocast_weight_copies: int
    """Autocast's 16-bit weight copies, alive from the forward through the backward."""
    paged_optimizer: int
    """Optimizer states in CUDA managed memory: in total, outside the allocator's peaks."""
    gradient_activation_overlap: int
    """Gradients not yet allocated while all activations are alive (subtracted from the sum)."""
    allocated_peak: int
    """PyTorch's max_memory_allocated."""
    reserved_peak: int
    """PyTorch's max_memory_reserved: allocated_peak + fragmentation."""
    cuda_context: int
    """The CUDA context (a setting)."""
    fragmentation: int
    """The allocator's reserved-but-unused share of allocated_peak (a setting)."""
    host_per_node: int
    """Host RAM per machine, not GPU memory: offloaded states of its ranks during training (plus rank 0's copy
    while it saves a full checkpoint), or the checkpoint copies while loading, whichever is larger (checked against
    host_ram_gib)."""
    load: int
    """The device total while loading the checkpoint (0: loading stays below the training step); `total` and
    `required` are the largest of the phases."""
    evaluation: int
    """The device total during an evaluation forward at eval_batch_size (0: no evaluation): the resident weights,
    optimizer states and buffers, and the no-grad forward's peak (memory.evaluation)."""
    generation: int
    """The device total while generating samples between steps (0: no generation): the resident state (under
    ZeRO-3 with the whole model gathered) and model.generate's KV cache and forward (memory.generation)."""
    save: int
    """The device total while a sharded run saves a full checkpoint (0: it saves shards, or runs unsharded): the
    resident weights and optimizer states and the unit being unsharded for rank 0's copy."""
    parallel_buffers: int
    """Model parallelism's communication buffers (hfmem.memory.parallel.CommBuffers: TP's SP all-gather, PP's
    boundary tensors, CP's K/V chunks, EP's token dispatch), alive with the activations."""
    quantized_weight_copies: int = 0
    """A low-precision recipe's quantized copies of the decoder's linear weights (hfmem.memory.lowprecision),
    alive from the forward through the backward like autocast's copies."""
    scaling_state: int = 0
    """FP8 delayed scaling's amax histories and scales (TransformerEngine), resident like the weights."""
    nccl: int = 0
    """NCCL's communicator buffers (hfmem.memory.nccl): outside the allocator, like the CUDA context."""
    nvme_per_node: int = 0
    """NVMe space per machine, not GPU memory: with offload_device nvme, its ranks' swapped optimizer states,
    gradient partitions and parameters (checked against nvme_gib); host_per_node then holds the swap buffers."""

    def to_dict(self) -> dict[str, int]:
        """The terms by name, in field order: the report's `per_gpu_bytes`."""
        return asdict(self)


def combine(settings: TrainingSettings, split: ParameterSplit, state: ModelState,
            act: ActivationEstimate, eval_forward: int = 0, generate: int = 0, *,
            parallel_buffers: int = 0) -> MemoryBreakdown:
    """Per-GPU bytes by term, and the total (see the module docstring for how they add up); `eval_forward`: the
    evaluation forward's peak over the resident state (memory.evaluation), 0 without evaluation; `generate`:
    model.generate's (memory.generation), 0 without generation; `parallel_buffers`: model parallelism's
    communication buffers, alive with the activations."""
    activations = act.peak
    full_grads = split.trainable * state.bytes_per_param["gradients"]
    shard = state.gradients / full_grads if full_grads else 0.0
    early = min(state.gradients, round(split.largest_trainable * state.bytes_per_param["gradients"] * shard))
    grads_in_forward = state.gradients if state.gradients_persist else early
    # the loss and the last layers run before most gradients exist, the first layer's backward after all but its
    # own and the input embedding's
    late_grads = round(state.gradients * (1 - split.last_trainable / split.trainable)) if split.trainable else 0
    copies = state.forward_transient + state.quantized_weight_copies  # alive from the forward through the backward
    # the buffers of the layers' backward (FSDP's unsharded unit gradients) beside a layer's backward: any layer's
    # (with the stored activations) or the first layer's (the last to run, with nearly all gradients); not at the end
    # of the forward nor during the loss's backward
    layers_backward = act.stored + act.layer_backward + grads_in_forward if state.backward_buffers else 0
    backward_peak = (max(activations + grads_in_forward, layers_backward + state.backward_buffers,
                         act.first_layer_backward + late_grads + state.backward_buffers)
                     + copies + parallel_buffers)
    step_peak = state.gradients + state.step_transient
    transients = state.step_transient + copies + parallel_buffers + state.backward_buffers
    overlap = activations + state.gradients + transients - max(backward_peak, step_peak)
    paged = state.paged_optimizer
    resident_buffers = state.sharding_buffers - state.backward_buffers
    resident = state.weights + state.optimizer - paged + state.scaling_state
    allocated = resident + resident_buffers + max(backward_peak, step_peak)
    fragmentation = round(allocated * settings.overhead.fragmentation)
    context = round(settings.overhead.cuda_context_gib * GIB)
    nccl = nccl_bytes(settings)
    outside = context + nccl  # memory outside PyTorch's allocator, in every phase

    def device(allocated_bytes: int) -> int:
        """A phase's device total: what it allocates, the allocator's share on top, the CUDA context and NCCL."""
        return allocated_bytes + round(allocated_bytes * settings.overhead.fragmentation) + outside

    # between steps: gradients were set to None unless they persist; a forward makes its autocast copies again and
    # gathers its units as the step did, a save unshards one unit at a time instead
    held = resident + (state.gradients if state.gradients_persist else 0)
    forward = held + resident_buffers + copies
    load = device(state.load_peak) if state.load_peak else 0
    evaluation = device(forward + eval_forward) if eval_forward else 0
    generation = device(forward + state.generation_gathered + generate) if generate else 0
    save = device(held + state.save_gathered) if state.save_gathered else 0
    step = device(allocated)
    return MemoryBreakdown(
        weights=state.weights,
        gradients=state.gradients,
        optimizer=state.optimizer,
        activations=activations,
        overhead=fragmentation + outside,
        total=max(step + paged, load, evaluation + paged, generation + paged, save + paged),
        required=max(step, load, evaluation, generation, save),
        master_weights=state.master_weights,
        optimizer_states=state.optimizer_states,
        sharding_buffers=state.sharding_buffers,
        activations_stored=act.stored,
        activation_transient=act.transient,
        loss_peak=act.loss_peak,
        recompute=act.recompute,
        backward_working=act.backward_working,
        optimizer_step_transient=state.step_transient,
        autocast_weight_copies=state.forward_transient,
        paged_optimizer=paged,
        gradient_activation_overlap=overlap,
        allocated_peak=allocated,
        reserved_peak=allocated + fragmentation,
        cuda_context=context,
        fragmentation=fragmentation,
        host_per_node=host_per_node(settings, state),
        load=load,
        evaluation=evaluation,
        generation=generation,
        save=save,
        parallel_buffers=parallel_buffers,
        quantized_weight_copies=state.quantized_weight_copies,
        scaling_state=state.scaling_state,
        nccl=nccl,
        nvme_per_node=state.nvme_bytes * min(settings.num_gpus, settings.gpus_per_node),
    )


def host_per_node(settings: TrainingSettings, state: ModelState) -> int:
    """Host RAM one machine needs: its ranks' offloaded states in training (and beside them rank 0's copy while it
    saves a full checkpoint), or the load-time copies."""
    ranks = min(settings.num_gpus, settings.gpus_per_node)
    loading = state.host_load_bytes * (ranks if settings.model_loading == "per-rank-cpu" else 1)
    return max(state.cpu_bytes * ranks + state.host_save_bytes, loading)


def fits_on(per_gpu: MemoryBreakdown, usable_bytes: int, settings: TrainingSettings) -> bool:
    """Whether the GPU holds what must stay resident and, when host_ram_gib (nvme_gib) is set, the host's RAM (its
    NVMe) holds its share."""
    return per_gpu.required <= usable_bytes and room_on(per_gpu, settings.host_ram_gib, settings.nvme_gib)


def room_on(per_gpu: MemoryBreakdown, host_ram_gib: float | None, nvme_gib: float | None) -> bool:
    """Whether a machine with `host_ram_gib` of RAM and `nvme_gib` of NVMe (None: not checked) holds a setup's
    shares of them."""
    host_ok = host_ram_gib is None or per_gpu.host_per_node <= host_ram_gib * GIB
    return host_ok and nvme_ok(per_gpu.nvme_per_node, nvme_gib)


def nvme_ok(nvme_per_node: int, nvme_gib: float | None) -> bool:
    """Whether a machine with `nvme_gib` of NVMe (None: not checked) holds a setup's NVMe share."""
    return nvme_gib is None or nvme_per_node <= nvme_gib * GIB
