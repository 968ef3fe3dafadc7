"""What each PEFT method trains and keeps frozen beside the base: parameter counts per adapted layer (PEFT).

LoRA: A (r x in) and B (out x r) per layer. DoRA adds a magnitude vector per output (peft/tuners/lora/dora.py
DoraLinearLayer.update_layer: `self.weight = nn.Parameter(weight_norm)`, out elements). LoRA-FA freezes A
(peft/optimizers/lorafa.py create_lorafa_optimizer: `param.requires_grad_(False)` on lora_A). VeRA trains
lambda_d (r) and lambda_b (out) per layer over one shared frozen pair vera_A (r x largest in) and vera_B (largest
out x r), fp32 buffers (peft/tuners/vera/model.py _find_dim, _init_vera_A_vera_B). IA3 trains one vector per
layer: out elements, or in for a feedforward layer (peft/tuners/ia3/layer.py: `x * ia3_scaling` before the
base layer). OFT trains, per adapted layer, in/bs skew-symmetric blocks of bs(bs - 1)/2 values
(peft/tuners/oft/layer.py OFTRotationModule: weight (r, n_elements)). BOFT trains boft_R (factor, in/bs, bs, bs)
and boft_s (out, 1) per adapted layer beside a frozen fp32 buffer boft_P (factor, in, in) (peft/tuners/boft/layer.py
BOFTLayer.update_layer). Prompt tuning trains n x hidden; prefix
tuning n x layers x 2 x (kv heads x head dim) (peft/tuners/prefix_tuning/model.py PrefixEncoder;
peft/utils/other.py _prepare_prompt_learning_config's GQA rule). Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

from hfmem.errors import InvalidInputError
from hfmem.model.architecture import Architecture
from hfmem.model.inventory import LinearGroup

ADAPTER_KINDS = {"lora": "lora", "qlora": "lora", "dora": "dora", "lora-fa": "lora-fa", "vera": "vera", "ia3": "ia3",
                 "oft": "oft", "boft": "boft"}
"""Methods that adapt linear layers (the lora_targets), and the adapter each puts on them."""
PROMPT_METHODS = frozenset({"prompt-tuning", "prefix-tuning"})
"""Methods that train virtual tokens and adapt no layer."""
FEEDFORWARD_LEAVES = frozenset({"down_proj", "fc2", "dense_4h_to_h", "w2", "fc_out", "wo", "c_proj"})
"""The MLP's output projections by leaf name (PEFT's TRANSFORMERS_MODELS_TO_IA3_FEEDFORWARD_MODULES_MAPPING):
IA3 scales their input, not their output."""


@dataclass(frozen=True)
class Adapters:
    """A method's parameters beside the frozen base."""

    trainable: int
    frozen: int = 0
    """Frozen adapter parameters, held in the adapter dtype (LoRA-FA's A, VeRA's shared projections)."""
    matrices: tuple[tuple[int, int, int], ...] = ()
    """(rows, cols, count) of the trained matrices (Adafactor factors them)."""
    vectors: int = 0
    """Trained parameters outside matrices."""
    largest: int = 0
    """Elements of the largest trained tensor."""
    matmul: int = 0
    """Trained weights that are matmul operands (what autocast copies to 16 bits)."""


def is_feedforward(group: LinearGroup) -> bool:
    """Whether IA3 treats the layer as feedforward (scales its input): an MLP or expert output projection."""
    return group.component in {"mlp", "experts"} and group.name.rsplit(".", 1)[-1] in FEEDFORWARD_LEAVES


def adapters(method: str, groups: tuple[LinearGroup, ...], rank: int, block_size: int = 32,
             butterfly: int = 1) -> Adapters:
    """The parameters `method` (one of ADAPTER_KINDS) adds on the adapted `groups` at rank `rank` (OFT and BOFT: in
    blocks of `block_size`; BOFT: `butterfly` factors)."""
    kind = ADAPTER_KINDS[method]
    if kind == "boft":
        return boft_adapters(groups, block_size, butterfly)
    if kind == "oft":
        conv = sorted({g.name for g in groups if g.kind != "linear"})
        if conv:  # peft/tuners/oft/model.py _create_new_module: "Target module Conv1D ... is not supported"
            raise InvalidInputError(f"oft: PEFT's OFT adapts nn.Linear only; {','.join(conv)} are not.")
        odd = sorted({g.name for g in groups if g.in_features % block_size})
        if odd:  # PEFT refuses these too
            raise InvalidInputError(f"oft_block_size {block_size} does not divide the input width of {','.join(odd)}.")
        shape = tuple((g.in_features // block_size, block_size * (block_size - 1) // 2, g.count) for g in groups)
        n = sum(r * c * k for r, c, k in shape)
        return Adapters(n, matrices=shape, largest=max((r * c for r, c, _ in shape), default=0))
    if kind == "ia3":
        sizes = [(g.in_features if is_feedforward(g) else g.out_features, g.count) for g in groups]
        return Adapters(sum(n * c for n, c in sizes), vectors=sum(n * c for n, c in sizes),
                        largest=max((n for n, _ in sizes), default=0))
    if kind == "vera":
        trained = sum(g.count * (rank + g.out_features) for g in groups)
        widest_in = max((g.in_features for g in groups), default=0)
        widest_out = max((g.out_features for g in groups), default=0)
        return Adapters(trained, frozen=rank * (widest_in + widest_out), vectors=trained,
                        largest=max(widest_out, rank))
    a = tuple((rank, g.in_features, g.count) for g in groups)
    b = tuple((g.out_features, rank, g.count) for g in groups)
    a_params = sum(r * c * n for r, c, n in a)
    b_params = sum(r * c * n for r, c, n in b)
    largest_b = max((rank * g.out_features for g in groups), default=0)
    if kind == "lora-fa":
        return Adapters(b_params, frozen=a_params, matrices=b, largest=largest_b, matmul=b_params)
    largest = max([largest_b] + [rank * g.in_features for g in groups])
    magnitude = sum(g.count * g.out_features for g in groups) if kind == "dora" else 0
    return Adapters(a_params + b_params + magnitude, matrices=a + b, vectors=magnitude, largest=largest,
                    matmul=a_params + b_params)


def boft_adapters(groups: tuple[LinearGroup, ...], block_size: int, butterfly: int) -> Adapters:
    """BOFT on the adapted `groups`, with PEFT's checks (peft/tuners/boft/layer.py BOFTLayer.update_layer): boft_R
    (butterfly, in/bs, bs, bs) and boft_s (out, 1) trained, the permutations boft_P (butterfly, in, in) frozen."""
    conv = sorted({g.name for g in groups if g.kind != "linear"})
    if conv:  # peft/tuners/boft/model.py _create_new_module: only torch.nn.Linear and torch.nn.Conv2d
        raise InvalidInputError(f"boft: PEFT's BOFT adapts nn.Linear only here; {','.join(conv)} are not.")
    span = block_size * 2 ** (butterfly - 1)
    odd = sorted({g.name for g in groups if g.in_features % span or (butterfly > 1 and block_size % 2)})
    if odd:
        raise InvalidInputError(f"boft_block_size {block_size} with boft_n_butterfly_factor {butterfly} does not fit "
                                f"the input width of {','.join(odd)} (PEFT needs each to be a multiple of {span}).")
    rotations = tuple((block_size, block_size, g.count * butterfly * (g.in_features // block_size)) for g in groups)
    scales = sum(g.count * g.out_features for g in groups)
    trained = sum(r * c * n for r, c, n in rotations) + scales
    return Adapters(trained, frozen=sum(g.count * butterfly * g.in_features ** 2 for g in groups), matrices=rotations,
                    vectors=scales, largest=max((butterfly * g.in_features * block_size for g in groups), default=0))


def boft_rotation_bytes(in_features: int, out_features: int, block_size: int, butterfly: int, compute_bytes: int,
                        adapter_bytes: float) -> float:
    """What one BOFT layer's forward keeps for backward whatever the token count (peft/tuners/boft/layer.py
    Linear.forward, measured with autograd's saved tensors at butterfly 1): the block-diagonal rotation, the
    permutation cast to the input's dtype and their product, each (butterfly, in, in) in the compute dtype; the Cayley
    transform's three (in/bs, bs, bs) tensors and its int32 pivots in the adapter dtype; the ones it scales and the
    (out) scale."""
    cayley = butterfly * in_features * (3 * block_size * adapter_bytes + 4)
    return 3 * butterfly * in_features ** 2 * compute_bytes + cayley + out_features * (compute_bytes + adapter_bytes)


def oft_rotation_bytes(in_features: int, block_size: int, adapter_bytes: float) -> float:
    """What one OFT layer's Cayley-Neumann rotation keeps for backward whatever the token count: four (in/bs, bs, bs)
    tensors in the adapter dtype (measured on PEFT's OFTRotationModule: Q_skew, its powers, the rotation)."""
    return 4 * in_features * block_size * adapter_bytes


def kv_width(arch: Architecture) -> int:
    """Elements of one token's keys (or values) in one layer: kv heads x head dim."""
    heads = arch.num_key_value_heads or arch.num_attention_heads
    return heads * (arch.head_dim or arch.hidden_size // max(1, arch.num_attention_heads))


def prompt_adapters(method: str, arch: Architecture, virtual_tokens: int) -> Adapters:
    """Prompt tuning's n x hidden embeddings, or prefix tuning's n x layers x 2 x kv-width past keys and values."""
    width = arch.hidden_size if method == "prompt-tuning" else arch.num_layers * 2 * kv_width(arch)
    n = virtual_tokens * width
    return Adapters(n, matrices=((virtual_tokens, width, 1),), largest=n)


def dora_workspace(groups: tuple[LinearGroup, ...], rank: int, adapter_bytes: int, weight_bytes: int) -> float:
    """Bytes alive at once while DoRA's forward takes one adapted layer's column norm (peft/tuners/lora/dora.py
    DoraLinearLayer.forward and get_lora_weight): the identity x_eye (in x in) and lora_A(x_eye) held by
    lora_weight's graph, lora_weight = B·A (in x out), the base weight cast to the adapter dtype, scaling·lora_weight
    and W + scaling·lora_weight, all in the adapter dtype; the largest adapted layer's."""
    def one(g: LinearGroup) -> float:
        cast = adapter_bytes if adapter_bytes != weight_bytes else 0
        return adapter_bytes * (g.in_features * (g.in_features + rank) + 3 * g.in_features * g.out_features) \
            + cast * g.in_features * g.out_features
    return max((one(g) for g in groups if g.kind != "experts"), default=0.0)


METHOD_NOTES = {
    "dora": "DoRA: LoRA's A and B plus a magnitude vector per output; each adapted layer also keeps its base output "
            "(compute dtype) and adapter output for the magnitude's gradient, and each forward builds B·A and "
            "W + B·A in the adapter dtype to take the column norm (the largest layer's, with an in x in identity, "
            "as a workspace)",
    "lora-fa": "LoRA-FA: A frozen (held in the adapter dtype, no gradient or optimizer state); no adapter keeps a "
               "copy of its input, B's gradient reads A's rank-r output",
    "vera": "VeRA: two trained vectors per adapted layer (r + out) over one shared frozen random A/B pair (fp32 "
            "buffers); each layer keeps its rank-r middle and out-wide product, not its input",
    "ia3": "IA3: one trained vector per adapted layer (out, or in for the MLP's output projection); each keeps the "
           "output it scales, or the feedforward input cast to the adapter dtype; the base keeps no weight inputs",
    "oft": "OFT: a block-diagonal orthogonal rotation (Cayley-Neumann) of each adapted layer's input; each keeps its "
           "input cast to the adapter dtype and four block-sized tensors of the rotation's series",
    "boft": "BOFT: a butterfly product of block-diagonal rotations of each adapted layer's input and a scale per "
            "output; each layer holds frozen fp32 permutations (in x in per butterfly factor), keeps its input and "
            "its base output, and each forward builds the in x in rotation (three such matrices kept for backward)",
    "prompt-tuning": "prompt tuning: num_virtual_tokens x hidden trained; every sequence is num_virtual_tokens longer "
                     "and every layer's input needs a gradient, but no weight does",
    "prefix-tuning": "prefix tuning: num_virtual_tokens keys and values per layer trained; under SDPA each layer's "
                     "K/V are repeated to every query head beside an explicit (s, s + n) mask",
}
"""A line per PEFT method on what it trains and keeps (the estimate's notes)."""
