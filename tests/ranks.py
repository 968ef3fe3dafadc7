"""Local multi-process runs on CPU (gloo): a free port, the spawn, and an exit that cannot abort.

gloo and DeepSpeed keep C++ threads that are still joinable when the interpreter tears down; under load their
destructors can abort the process ("terminate called without an active exception", SIGABRT) after every result is
written. Each rank therefore waits for the others and leaves with os._exit, skipping that teardown.
"""

from __future__ import annotations

import gc
import json
import os
import socket
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch.distributed as dist
import torch.multiprocessing as mp


def deepspeed_rank(rank: int, port: int, world: int) -> Any:
    """Join `world` ranks as `rank` for DeepSpeed on CPU: its gloo process group, one thread, and no JIT build of
    DeepSpeed's shared-memory all-reduce (a C++ compile per machine), so gloo carries every collective. Returns the
    deepspeed module."""
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    import deepspeed
    import torch

    torch.set_num_threads(1)
    sys.modules["deepspeed.comm.torch"].build_shm_op = lambda: None
    deepspeed.init_distributed(dist_backend="gloo")
    return deepspeed


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def leave() -> None:
    """End a rank whose results are on disk: wait for every rank, then exit 0 without C++ teardown."""
    if dist.is_initialized():
        dist.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def spawn(rank_main: Callable[..., None], world: int, *args: Any, start_method: str = "spawn") -> list[dict[str, Any]]:
    """Run rank_main(rank, port, *args, out) on `world` processes; every rank's JSON result, by rank. "fork" starts
    each rank from this process as it is, with its imports done (no CUDA is involved on CPU runs), its objects frozen
    (`frozen`)."""
    with tempfile.TemporaryDirectory() as tmp, frozen(start_method == "fork"):
        out = os.path.join(tmp, "rank")
        mp.start_processes(rank_main, args=(free_port(), *args, out), nprocs=world, start_method=start_method)
        return [json.loads(Path(f"{out}.{rank}").read_text()) for rank in range(world)]


@contextmanager
def frozen(freeze: bool) -> Iterator[None]:
    """While forked ranks run: this process's objects out of the garbage collector's reach (gc.freeze, as Python's
    docs advise before a fork), so that a rank's collections, DeepSpeed's explicit gc.collect() calls among them,
    walk the rank's own objects rather than the whole inherited heap of pytest, torch and transformers (and do not
    copy its pages by writing their counts); they are collectable here again once the ranks have ended."""
    if freeze:
        gc.freeze()
    try:
        yield
    finally:
        if freeze:
            gc.unfreeze()
