"""Vendor peak figures of the catalogue's GPUs: dense matmul TFLOP/s per dtype, memory bandwidth, links.

Read from the `specs` of each gpus.json entry; every non-null figure names its source page there, a figure
with no public vendor source stays None. User-defined `name=GiB` GPUs have no specs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hfmem.hardware.gpus import Gpu, catalogue_data

DTYPES = ("bf16", "fp16", "fp8", "fp4")
"""The matmul dtypes the catalogue states a dense peak for."""
PCIE_X16_GBPS = {3: 32.0, 4: 64.0, 5: 128.0}
"""A PCIe x16 link's bandwidth in GB/s, both directions together, as NVIDIA's datasheets state it (T4: "PCIe Gen3 x16:
32 GB/s", A100: "PCIe Gen4: 64 GB/s", H100: "PCIe Gen5: 128 GB/s")."""


@dataclass(frozen=True)
class GpuSpecs:
    """One GPU's vendor peaks; None where the vendor publishes no figure."""

    name: str
    variant: str | None = None
    """The form the figures are for (SXM5, PCIe, GeForce, ...)."""
    tflops: dict[str, float | None] = field(default_factory=dict)
    """Dense (no sparsity) peak matmul TFLOP/s by dtype."""
    memory_gbps: float | None = None
    link_gbps: float | None = None
    """GPU-to-GPU link (NVLink, Infinity Fabric) per GPU, GB/s in both directions together."""
    link: str | None = None
    link_gpus: int | None = None
    """How many GPUs the link joins all-to-all: 2 for an NVLink bridge, 8 for an HGX/OAM baseboard."""
    pcie_gen: int | None = None
    sources: dict[str, str] = field(default_factory=dict)

    @property
    def pcie_gbps(self) -> float | None:
        """The host link's x16 bandwidth, both directions together."""
        return PCIE_X16_GBPS.get(self.pcie_gen) if self.pcie_gen else None

    def peak_flops(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for a matmul dtype ("bf16", "fp16", "fp8", "fp4"), None when not stated."""
        tflops = self.tflops.get(dtype)
        return tflops * 1e12 if tflops else None

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "variant": self.variant, "tflops": dict(self.tflops),
                "memory_gbps": self.memory_gbps, "link_gbps": self.link_gbps, "link": self.link,
                "link_gpus": self.link_gpus, "pcie_gen": self.pcie_gen, "pcie_gbps": self.pcie_gbps,
                "sources": dict(self.sources)}


def gpu_specs(gpu: Gpu) -> GpuSpecs:
    """The vendor specs of a catalogue GPU; a user-defined one (or one without specs) gets an empty GpuSpecs."""
    entry = next((g for g in catalogue_data()["gpus"] if g["name"] == gpu.name), None)
    raw = (entry or {}).get("specs") if not gpu.user_defined else None
    if not raw:
        return GpuSpecs(gpu.name)
    return GpuSpecs(
        name=gpu.name, variant=raw.get("variant"), tflops={d: raw.get(f"{d}_tflops") for d in DTYPES},
        memory_gbps=raw.get("memory_gbps"), link_gbps=raw.get("link_gbps"), link=raw.get("link"),
        link_gpus=raw.get("link_gpus"), pcie_gen=raw.get("pcie_gen"), sources=dict(raw.get("sources", {})),
    )


@dataclass(frozen=True)
class NodeSpecs:
    """The GPU class's common server (gpus.json `node`): the default network, host RAM and local NVMe; None where
    undocumented."""

    server: str | None = None
    gpus: int | None = None
    network_gbps: float | None = None
    """Inter-node bandwidth per GPU in Gb/s, one direction."""
    host_ram_gib: float | None = None
    nvme_gib: float | None = None
    """Local NVMe (data drives, not the OS's) per machine in GiB."""
    nvme_read_gbps: float | None = None
    """Those drives' sequential read bandwidth together, GB/s."""
    nvme_write_gbps: float | None = None
    sources: dict[str, str] = field(default_factory=dict)
    note: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"server": self.server, "gpus": self.gpus, "network_gbps": self.network_gbps,
                "host_ram_gib": self.host_ram_gib, "nvme_gib": self.nvme_gib, "nvme_read_gbps": self.nvme_read_gbps,
                "nvme_write_gbps": self.nvme_write_gbps, "sources": dict(self.sources), "note": self.note}


def node_specs(gpu: Gpu) -> NodeSpecs:
    """A catalogue GPU's common server; a user-defined GPU (or one without a documented server) gets an empty one."""
    entry = next((g for g in catalogue_data()["gpus"] if g["name"] == gpu.name), None)
    raw = (entry or {}).get("node") if not gpu.user_defined else None
    if not raw:
        return NodeSpecs()
    return NodeSpecs(server=raw.get("server"), gpus=raw.get("gpus"), network_gbps=raw.get("network_gbps"),
                     host_ram_gib=raw.get("host_ram_gib"), nvme_gib=raw.get("nvme_gib"),
                     nvme_read_gbps=raw.get("nvme_read_gbps"), nvme_write_gbps=raw.get("nvme_write_gbps"),
                     sources=dict(raw.get("sources", {})), note=raw.get("note"))
