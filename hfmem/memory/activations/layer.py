"""One decoder layer's saved bytes per token: its attention block then its MLP / MoE block (or a Mamba mixer)."""

from __future__ import annotations

from hfmem.memory.activations.attention import attention
from hfmem.memory.activations.linears import linear_inputs, lora_adapters
from hfmem.memory.activations.mamba import mamba
from hfmem.memory.activations.mlp import mlp
from hfmem.memory.activations.moe import moe, router_needs_normed_input
from hfmem.memory.activations.norms import norm
from hfmem.memory.activations.ops import mask_bytes
from hfmem.memory.activations.saved import Saved, at_length
from hfmem.memory.activations.spec import ActivationSpec
from hfmem.memory.activations.structure import LayerModules, Module, intermediate_width
from hfmem.model.architecture import Architecture


def layer_at(cache: dict, spec: ActivationSpec, kind: str, mlp_kind: str, s: int, *,
             input_grad: bool = True) -> Saved:
    """`layer` at length s, from a cached affine form: per-token terms are a + b·s (the a·s² terms)."""
    sliding = attends_sliding(spec.arch, kind, s)
    key = (spec, kind, mlp_kind, input_grad, sliding)
    forms = cache.get(key)
    if forms is None:
        forms = cache[key] = tuple(layer(spec, kind, mlp_kind, length, input_grad=input_grad, sliding=sliding)
                                   for length in (0, 1))
    zero, one = forms
    return at_length(zero, one, s)


def attends_sliding(arch: Architecture, kind: str, s: int) -> bool:
    """Whether a layer of this kind attends through a sliding-window mask at length s (Mistral: every layer):
    transformers builds it once the sequence reaches the window (kv_length >= local_attention_size)."""
    if arch.sliding_window is None or s < arch.sliding_window:
        return False
    return "sliding" in kind or not any("sliding" in k for k in arch.layer_types)


def layer(spec: ActivationSpec, kind: str, mlp_kind: str, s: int, *, input_grad: bool = True,
          sliding: bool = False) -> Saved:
    """Saved bytes per token of one layer (attention kind x MLP kind); the caller multiplies by b·s.

    input_grad=False: the layer's input needs no gradient (layer 0 of a LoRA model without
    checkpointing): autograd records nothing until the first adapter, so the input norm (and, in a
    parallel block, an adapter-free MLP branch) saves nothing.
    """
    saved = Saved()
    if kind == "mamba":
        mamba(saved, spec)
        return saved
    mods = spec.modules(mlp_kind)
    has_attention = "attention" in kind
    if has_attention:
        _attention_block(saved, spec, mods, mlp_kind, s, input_grad=input_grad, sliding=sliding)
    if mlp_kind != "none" and not (has_attention and _skips_parallel_mlp(spec, mods, input_grad)):
        _mlp_block(saved, spec, mods, mlp_kind, has_attention, input_grad=input_grad)
    return saved


def _mlp_input_users(mods: LayerModules, mlp_kind: str) -> tuple[Module, ...]:
    """The linears reading the MLP block's normed input: the dense MLP's, or a MoE's shared expert and router."""
    if mlp_kind == "none":
        return ()
    return mods.mlp_in if mlp_kind == "dense" else mods.shared_in + mods.router


def _skips_parallel_mlp(spec: ActivationSpec, mods: LayerModules, input_grad: bool) -> bool:
    """A parallel block whose input needs no grad records nothing in an MLP branch without adapters."""
    trained = spec.trained
    adapted = any(m.name in trained.lora for m in mods.mlp_in + mods.mlp_out + mods.shared_in + mods.shared_out)
    return not input_grad and spec.arch.parallel_block and not adapted and not trained.full


def _attention_block(saved: Saved, spec: ActivationSpec, mods: LayerModules, mlp_kind: str, s: int, *,
                     input_grad: bool, sliding: bool) -> None:
    """Input norm, the q/k/v inputs (a parallel block's MLP reads the same normed input), LoRA, attention,
    the sandwich post-attention norm and the residual dropout."""
    arch, h = spec.arch, spec.arch.hidden_size
    norm(saved, "attn_norm", spec, h, residual=True, compiled=spec.compiled, input_needed=input_grad)
    one_normed_input = arch.parallel_block and not arch.parallel_mlp_norm
    users = mods.attn_in + _mlp_input_users(mods, mlp_kind) if one_normed_input else mods.attn_in
    linear_inputs(saved, "attn_norm.out", spec, h, users, residual=True, input_grad=input_grad)
    lora_adapters(saved, "attn_in", spec, mods.attn_in, input_grad=input_grad)
    latents_grad = input_grad or any(m.name in spec.trained.lora for m in mods.attn_in)
    lora_adapters(saved, "attn_in", spec, mods.q_b + mods.kv_b, input_grad=latents_grad)
    attention(saved, spec, s, mods, sliding=sliding, input_grad=input_grad)
    lora_adapters(saved, "attn_out", spec, mods.attn_out)
    if spec.traits.sandwich_norms:
        norm(saved, "post_attn_norm", spec, h, residual=True, compiled=spec.compiled)
    if arch.hidden_dropout > 0:
        saved.add("attn.resid_dropout_mask", mask_bytes(spec.mask_bytes, spec.p) * h)


def _mlp_block(saved: Saved, spec: ActivationSpec, mods: LayerModules, mlp_kind: str, has_attention: bool, *,
               input_grad: bool) -> None:
    """The MLP norm and its input (a parallel block shares the attention's input; with its own norm of it, see
    Architecture.parallel_mlp_norm), the dense MLP or the MoE,
    the sandwich post-MLP norm and the residual dropout."""
    arch, h = spec.arch, spec.arch.hidden_size
    shares_input = arch.parallel_block and has_attention
    if not shares_input or arch.parallel_mlp_norm:
        norm(saved, "mlp_norm", spec, h, residual=True, compiled=spec.compiled,
             input_needed=input_grad or not shares_input, input_counted=shares_input)
        router_needs = mlp_kind == "moe" and router_needs_normed_input(spec)
        linear_inputs(saved, "mlp_norm.out", spec, h, _mlp_input_users(mods, mlp_kind), extra_need=router_needs,
                      residual=True, input_grad=input_grad or not shares_input)
    if mlp_kind == "dense":
        mlp(saved, "mlp", spec, intermediate_width(mods.mlp_in, arch.intermediate_size), mods.mlp_in, mods.mlp_out,
            trained=spec.trained)
        # a parallel block's MLP reads the layer's normed input; a sequential one the residual after attention,
        # which needs a gradient once the attention block has an adapter
        lora_adapters(saved, "mlp_in", spec, mods.mlp_in, input_grad=input_grad or not shares_input)
        lora_adapters(saved, "mlp_out", spec, mods.mlp_out)
    else:
        moe(saved, spec, mods)
    if spec.traits.sandwich_norms:
        norm(saved, "post_mlp_norm", spec, h, residual=True, compiled=spec.compiled)
    if arch.hidden_dropout > 0 and not (arch.parallel_block and spec.traits.one_parallel_dropout):
        saved.add("mlp.resid_dropout_mask", mask_bytes(spec.mask_bytes, spec.p) * h)
