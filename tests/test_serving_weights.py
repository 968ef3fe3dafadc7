"""Serving weights: as stored, exactly what the safetensors library reads from the checkpoint's files (FP8 and
F32 scales, AWQ/GPTQ packed int32 and F16 scales, gpt-oss's MXFP4 U8 blocks and scales), and as --quantization
packs a 16-bit model, exactly the stored AWQ and GPTQ checkpoints' bytes."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from hfmem.hub.safetensors import Checkpoint, parse_header
from hfmem.model.architecture import read_architecture
from hfmem.model.inventory import Inventory
from hfmem.serving.weights import matrix_bytes, quantized_bytes, weight_bytes

safetensors = pytest.importorskip("safetensors")
torch = pytest.importorskip("torch")

HUB = Path(__file__).resolve().parent.parent / "fixtures" / "hub"
ELEMENT_BYTES = {"F8_E4M3": 1, "U8": 1, "I32": 4, "F16": 2, "BF16": 2, "F32": 4}


def library_bytes(repo: Path, tmp_path: Path) -> tuple[int, Checkpoint]:
    """Bytes of every tensor as the safetensors library reads each shard (the header-only files made whole as
    sparse files), and hfmem's own parse of the same headers."""
    total, checkpoint = 0, Checkpoint()
    for shard in sorted(repo.glob("*.safetensors")):
        raw = shard.read_bytes()
        (length,) = struct.unpack("<Q", raw[:8])
        header = json.loads(raw[8:8 + length])
        end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
        whole = tmp_path / shard.name
        with whole.open("wb") as f:
            f.write(raw[:8 + length])
            f.truncate(8 + length + end)
        with safetensors.safe_open(str(whole), framework="pt") as f:
            for name in f.keys():  # noqa: SIM118 - safe_open is not a dict
                piece = f.get_slice(name)
                count = 1
                for dim in piece.get_shape():
                    count *= dim
                total += count * ELEMENT_BYTES[piece.get_dtype()]
        checkpoint.add(shard.name, parse_header(raw[8:8 + length], shard.name))
        whole.unlink()
    return total, checkpoint


@pytest.mark.parametrize("repo", ["hfmem-test/Meta-Llama-3-8B-AWQ", "hfmem-test/Meta-Llama-3-8B-GPTQ",
                                  "openai/gpt-oss-20b", "deepseek-ai/DeepSeek-V2-Lite"])
def test_stored_weights_are_what_the_library_reads(repo: str, tmp_path: Path) -> None:
    expected, checkpoint = library_bytes(HUB / repo, tmp_path)
    config = json.loads((HUB / repo / "config.json").read_text())
    arch = read_architecture(config)
    no_inventory = Inventory("", 0, {}, (), (), {})  # the headers alone decide stored weights
    weights = weight_bytes(arch, no_inventory, checkpoint, None, "bfloat16")
    assert weights.total_bytes == expected
    assert weights.source.startswith("safetensors headers")


@pytest.mark.parametrize("method", ["awq", "gptq"])
def test_packing_a_16_bit_model_gives_the_stored_checkpoint(method: str, tmp_path: Path) -> None:
    """Meta-Llama-3-8B's inventory packed by --quantization equals the AWQ/GPTQ checkpoint's bytes to the byte."""
    from tiny_models import reference_model

    _, inventory = reference_model("meta-llama/Meta-Llama-3-8B")
    stored, _ = library_bytes(HUB / f"hfmem-test/Meta-Llama-3-8B-{method.upper()}", tmp_path)
    assert quantized_bytes(inventory, method) == stored


def test_formats_pack_as_their_blocks_say() -> None:
    """One 4096 x 4096 weight: MXFP4 4.25 bits, NVFP4 4.5 bits and a global scale, GGUF q4_0 4.5 and q8_0 8.5
    bits, FP8 one byte and a per-tensor scale."""
    n = 4096 * 4096
    assert matrix_bytes("mxfp4", 4096, 4096) == n * 4.25 / 8
    assert matrix_bytes("nvfp4", 4096, 4096) == n * 4.5 / 8 + 4
    assert matrix_bytes("q4_0", 4096, 4096) == n * 18 / 32
    assert matrix_bytes("q8_0", 4096, 4096) == n * 34 / 32
    assert matrix_bytes("fp8", 4096, 4096) == n + 4
