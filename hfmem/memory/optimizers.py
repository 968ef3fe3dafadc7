"""The memory-saving optimizers: state bytes for the trainable parameters, the step's transient buffers, and whether
a layer-wise update keeps only one parameter's gradient alive.

`hidden` are the trainable 2-D matrices of the decoder (rows, cols, count): what GaLore and APOLLO project, Muon
orthogonalises and Adam-mini gives one second moment per row; the rest (embeddings, head, norms, biases) gets
AdamW's two moments. `e` is bytes per state value in the parameters' dtype (4 under mixed precision). Each rule
cites the source it follows; tests/test_optimizers.py and bench/optimizers.py compare them with the real
optimizers on CPU where their packages install. Pure arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass

BNB_BLOCK = 256
"""bitsandbytes' blockwise 8-bit optimizer states: one fp32 absmax per 256 values."""
TORCHAO_8BIT_BLOCK, TORCHAO_4BIT_BLOCK = 256, 128
"""torchao.optim AdamW8bit / AdamW4bit block sizes (one fp32 scale per block; torchao/optim/adam.py defaults)."""

Matrix = tuple[int, int, int]


@dataclass(frozen=True)
class OptimizerState:
    """What an optimizer adds beside the weights and gradients."""

    states: float
    """Bytes of state kept between steps."""
    step: float = 0.0
    """Bytes allocated only inside optimizer.step() (the largest matrix's working buffers)."""
    one_gradient: bool = False
    """Layer-wise: each parameter steps in its post-accumulate-grad hook and frees its gradient."""
    note: str = ""


def _elements(hidden: tuple[Matrix, ...]) -> int:
    """Values in the matrices."""
    return sum(r * c * n for r, c, n in hidden)


def _largest(hidden: tuple[Matrix, ...]) -> tuple[int, int]:
    """(rows, cols) of the largest hidden matrix."""
    return max(((r, c) for r, c, _ in hidden), key=lambda rc: rc[0] * rc[1], default=(0, 0))


def _bnb8(n: float) -> float:
    """Bytes of n values in bitsandbytes' blockwise 8-bit format."""
    return n * (1 + 4 / BNB_BLOCK)


def projected(hidden: tuple[Matrix, ...], rank: int, moment_bytes: float, projector_bytes: float,
              whole_factor: bool = False) -> float:
    """Projected states (GaLore's GaLoreProjector.project, proj_type std; APOLLO's GradientProjector): an m x n
    gradient is projected on its shorter side, so AdamW's two moments are rank x max(m, n), and the kept
    ortho_matrix is rank x min(m, n). `whole_factor`: GaLore on fp32 gradients keeps `Vh[:rank, :]` / `U[:, :rank]`,
    views of the whole SVD factor (galore_torch/galore_projector.py lines 83-97: the .type() copy is made only for
    non-fp32 data), so min(m, n)² values per matrix stay alive."""
    total = 0.0
    for r, c, n in hidden:
        k = min(rank, r, c)
        kept = min(r, c) ** 2 if whole_factor else k * min(r, c)
        total += n * (2 * k * max(r, c) * moment_bytes + kept * projector_bytes)
    return total


def optimizer_state(optimizer: str, trainable: int, hidden: tuple[Matrix, ...], e: float, rank: int, *,
                    matrices: tuple[Matrix, ...] = (), largest: int = 0) -> OptimizerState:
    """The state of a memory-saving `optimizer` over `trainable` parameters, `hidden` of them in decoder matrices;
    `matrices`: every trained matrix (embeddings and head too), `largest`: elements of the largest trained tensor."""
    in_hidden = _elements(hidden)
    rest = max(0, trainable - in_hidden)
    r, c = _largest(hidden)
    short = min(r, c)
    if optimizer.startswith("galore_adamw"):
        eight = "8bit" in optimizer
        moment = (1 + 4 / BNB_BLOCK) if eight else e
        states = projected(hidden, rank, moment, e, whole_factor=e == 4) + (_bnb8(2 * rest) if eight else 2 * e * rest)
        # the update_proj_gap step: torch.linalg.svd(matrix.float(), full_matrices=False) of one gradient (U and Vh,
        # and an fp32 copy of a 16-bit gradient), then project_back's full-size update in the gradient's dtype
        svd = 4 * short * (r + c) + (4 * r * c if e < 4 else 0) + e * r * c
        return OptimizerState(states, svd, one_gradient=optimizer.endswith("layerwise"),
                              note=f"GaLore: moments of each decoder matrix's gradient projected to rank {rank} "
                              "plus its projection; every update_proj_gap steps an fp32 SVD of one gradient")
    if optimizer in {"apollo_adamw", "apollo_mini"}:
        k = 1 if optimizer == "apollo_mini" else rank
        # apollo_torch/random_projector.py keeps its random ortho_matrix (rank x min) between update_proj_gap steps;
        # the step's channel-wise scaling builds the scaled full-size gradient and its update
        states = projected(hidden, k, e, e) + 2 * e * rest
        return OptimizerState(states, 2 * e * r * c + 4 * e * k * max(r, c),
                              note=f"APOLLO: moments of each decoder matrix's gradient projected to rank {k} by a "
                              "random projection; AdamW for the rest")
    if optimizer == "adam_mini":
        # one second moment per output row (per head for q/k: fewer); the rest in rows of the hidden width
        rows = sum(rr * n for rr, _, n in hidden) + -(-rest // max(1, short))
        return OptimizerState(e * trainable + e * rows, 2 * e * largest,
                              note="Adam-mini: the first moment for every weight, one second moment per block "
                              "(output row; embeddings per token)")
    if optimizer == "muon":
        # torch/optim/_muon.py: one momentum_buffer per 2-D matrix; _zeropower_via_newtonschulz works in bf16 on
        # grad.lerp(buf) (a gradient-sized copy): the bf16 matrix, the Gram matrix and its update (short x short)
        # and the next iterate
        step = e * r * c + 2 * 2 * r * c + 2 * 2 * short * short
        return OptimizerState(e * in_hidden + 2 * e * rest, step,
                              note="Muon: one momentum buffer for the decoder's 2-D matrices (Newton-Schulz in "
                              "bf16 in the step), AdamW for embeddings, head, norms and biases")
    if optimizer == "schedulefree_adamw":
        # schedulefree/adamw_schedulefree.py's foreach step allocates one temporary per parameter
        return OptimizerState(2 * e * trainable, e * trainable,
                              note="schedule-free AdamW: z and the second moment per weight (the iterate y lives in "
                              "the weights)")
    if optimizer == "came":
        # came_pytorch/CAME.py: exp_avg for every weight; for every tensor of 2 or more dims exp_avg_sq and
        # exp_avg_res as row and column vectors (type_as the gradient), for the rest a whole exp_avg_sq
        every = matrices or hidden
        in_matrices = sum(rr * cc * n for rr, cc, n in every)
        factored = sum(n * 2 * (rr + cc) for rr, cc, n in every)
        return OptimizerState(e * trainable + e * factored + e * max(0, trainable - in_matrices), 4 * e * largest,
                              note="CAME: the first moment per weight, the second moment and the confidence "
                              "residual factored (a row and a column vector per matrix)")
    if optimizer in {"adamw_torchao_8bit", "adamw_torchao_4bit"}:
        # torchao/optim/adam.py _new_buffer: `if p.numel() >= 4096 and p.numel() % self.block_size == 0` the state is
        # quantised, so every matrix (embeddings and head too); vectors (norms, biases) stay in full precision
        bits, block = (1, TORCHAO_8BIT_BLOCK) if optimizer.endswith("8bit") else (0.5, TORCHAO_4BIT_BLOCK)
        quantised = sum(rr * cc * n for rr, cc, n in (matrices or hidden))
        return OptimizerState(2 * quantised * (bits + 4 / block) + 2 * e * max(0, trainable - quantised),
                              note=f"torchao {optimizer[-4:]} AdamW: both moments quantised per block of {block} "
                              "with an fp32 scale (tensors under 4096 values keep full precision)")
    per_state = {"lion_8bit": (1, True), "ademamix": (3, False), "ademamix_8bit": (3, True), "rmsprop": (1, False),
                 "rmsprop_8bit": (1, True)}
    if optimizer in per_state:
        count, eight = per_state[optimizer]
        return OptimizerState(_bnb8(count * trainable) if eight else count * e * trainable)
    raise ValueError(f"unknown optimizer {optimizer!r}")
