"""Live tensor bytes over a whole training step on CPU: unique storages alive after every aten op, and the peak.

`LiveBytes` is a TorchDispatchMode: it sees every tensor an aten op returns (the forward, autograd's backward
nodes, the optimizer), counts each new untyped storage once at its size and drops it when a weakref finalizer
sees the storage freed. Storages made before the mode (parameters, buffers, inputs) are registered with
`adopt`. After each op the live sum is compared with the peak, and the storages alive at the peak are kept, each
with the op, phase and module that made it. What a kernel allocates and frees inside one op without returning
it (a CPU kernel's scratch buffers) is not seen: this is the peak of live tensors, as on CUDA
max_memory_allocated is, less the allocator's rounding and the kernels' private workspaces.

A bf16 matrix product of CPU tensors is computed in fp32 and rounded to bf16 once (`_run`): without AVX-512
(CI's and most x86 runners), torch's bf16 GEMM falls back to a scalar loop, 85x slower than fp32 on a tiny model's
backward (115 ms against 1.3 ms for a 256 x 896 x 256 product), and that loop was most of every step's time. The op
still returns a new contiguous bf16 tensor of its shape, as the bf16 kernel does (which also accumulates in fp32);
the fp32 copies live and die inside the op, unseen like a kernel's scratch, so every count and peak is the same.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Self

import torch
from torch.distributed.tensor import DTensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


@dataclass
class Storage:
    """One live storage: its bytes and where it came from; `category` is set later by `mark` (gradients, states)."""

    nbytes: int
    op: str
    phase: str
    module: str
    category: str = ""


class LiveBytes(TorchDispatchMode):
    """Counts the bytes of unique live storages after every op and records the peak and what was alive then."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, Storage] = {}
        self.current = 0
        self.peak = 0
        self.at_peak: list[tuple[Storage, int]] = []
        """The storages alive at the peak with their sizes then (a storage may be resized later)."""
        self.peak_op = ""
        self.phase_name = "setup"
        self.modules: list[str] = []
        self._resize = torch.UntypedStorage.resize_

    def _add(self, storage: torch.UntypedStorage, op: str, category: str = "") -> None:
        """Count a storage once (or follow its new size), labelled with the op, phase and module making it."""
        key = storage._cdata
        entry = self.live.get(key)
        nbytes = storage.nbytes()
        if entry is not None:  # an in-place op or a view: the same storage, perhaps resized
            self.current += nbytes - entry.nbytes
            entry.nbytes = nbytes
            if category:
                entry.category = category
            return
        entry = Storage(nbytes, op, self.phase_name, self.modules[-1] if self.modules else "", category)
        self.live[key] = entry
        self.current += nbytes
        weakref.finalize(storage, self._free, key, entry)

    def _free(self, key: int, entry: Storage) -> None:
        """The weakref finalizer: the storage is gone."""
        if self.live.get(key) is entry:
            del self.live[key]
            self.current -= entry.nbytes

    def _check_peak(self, op: str) -> None:
        """Record a new peak and what is alive at it."""
        if self.current > self.peak:
            self.peak = self.current
            self.at_peak = [(s, s.nbytes) for s in self.live.values()]
            self.peak_op = f"{self.phase_name}:{op}"

    def adopt(self, tensors: Any, category: str) -> None:
        """Count tensors made before the mode (or outside it) under `category`; also re-labels known ones."""
        for storage in _storages(tensors):
            self._add(storage, "adopted", category)
        self._check_peak("adopt")

    mark = adopt

    def reset_peak(self) -> None:
        """Start a new peak from what is alive now."""
        self.peak = self.current
        self.at_peak = [(s, s.nbytes) for s in self.live.values()]
        self.peak_op = f"{self.phase_name}:start"

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Label the storages made inside the block with `name` (forward, loss, backward, step)."""
        previous, self.phase_name = self.phase_name, name
        try:
            yield
        finally:
            self.phase_name = previous

    def follow_modules(self, model: torch.nn.Module) -> list[Any]:
        """Name each forward storage after the module that made it (layer indices as '*'); returns the hooks."""
        handles = []
        for name, module in model.named_modules():
            label = re.sub(r"\.\d+\.", ".*.", f".{name}.").strip(".")
            handles.append(module.register_forward_pre_hook(lambda _m, _a, label=label: self._enter(label)))
            handles.append(module.register_forward_hook(lambda *_: self._leave()))
        return handles

    def _enter(self, label: str) -> None:
        """A module's forward starts."""
        self.modules.append(label)

    def _leave(self) -> None:
        """A module's forward ends."""
        self.modules.pop()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """Run the op, then count the storages it returned and check the peak."""
        out = _run(func, args, kwargs or {})
        name = func.overloadpacket.__name__
        for storage in _storages(out):
            self._add(storage, name)
        self._check_peak(name)
        return out

    def __enter__(self) -> Self:
        """Also follow storages resized in place (FSDP2 frees and refills its unsharded parameters so)."""
        tracker = self

        def resize_(storage: torch.UntypedStorage, size: int) -> Any:
            """The original resize, then the storage's new size counted."""
            result = tracker._resize(storage, size)
            tracker._add(storage, "resize_")
            tracker._check_peak("resize_")
            return result

        torch.UntypedStorage.resize_ = resize_  # type: ignore[method-assign]
        return super().__enter__()

    def __exit__(self, *args: object) -> None:
        """Restore UntypedStorage.resize_."""
        torch.UntypedStorage.resize_ = self._resize  # type: ignore[method-assign]
        super().__exit__(*args)

    def breakdown(self) -> dict[str, int]:
        """Bytes alive at the peak by category, or by phase:module:op for the uncategorised ones."""
        groups: dict[str, int] = defaultdict(int)
        for s, nbytes in self.at_peak:
            groups[s.category or f"{s.phase}:{s.module}:{s.op}".replace("::", ":")] += nbytes
        return dict(sorted(groups.items(), key=lambda kv: -kv[1]))


class Fp32Products(TorchDispatchMode):
    """LiveBytes's fp32 matrix products alone (`_run`), for a measurement that reads tensors another way (autograd's
    saved-tensor hooks): every op returns the tensor it returns without the mode."""

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        """Run the op, a bf16 matrix product in fp32."""
        return _run(func, args, kwargs or {})


_FP32_PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default,
                  torch.ops.aten.baddbmm.default, torch.ops.aten._grouped_mm.default}
"""The matrix products `_run` computes in fp32 when every floating operand is a bf16 CPU tensor (a grouped
product's offsets are int32; MoE experts run through it)."""
_PLAIN = (torch.Tensor, torch.nn.Parameter, DTensor)
"""The operand types `_run` upcasts: a tensor, a parameter (ZeRO-3's backward multiplies by one), or a DTensor (its
local product runs on the upcast shards; the redistributions it needs happen inside the op, unseen either way)."""


def _run(func: Any, args: Any, kwargs: dict[str, Any]) -> Any:
    """The op's result; a bf16 matrix product of CPU tensors computed in fp32 and rounded once (the module
    docstring says why: the same tensor out, at a fraction of the time)."""
    if func in _FP32_PRODUCTS:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        if all(type(t) in _PLAIN and t.device.type == "cpu" for t in tensors) and all(
                t.dtype == torch.bfloat16 for t in tensors if t.is_floating_point()):
            upcast = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
            return func(*upcast, **kwargs).to(torch.bfloat16)
    return func(*args, **kwargs)


def _storages(tree: Any) -> Iterator[torch.UntypedStorage]:
    """The storages of the real tensors in `tree`; a tensor subclass wrapping a local tensor (DTensor) is
    counted by its local shard."""
    for t in tree_flatten(tree)[0]:
        if isinstance(t, torch.Tensor):
            t = getattr(t, "_local_tensor", t)
            if t.device.type != "meta":
                yield t.untyped_storage()
