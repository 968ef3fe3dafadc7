"""`hfmem gpus`: the GPU catalogue the fit matrix is computed against, as a table, markdown or JSON."""

from __future__ import annotations

import json
from typing import Annotated, TextIO

import typer

from hfmem.cli.formats import OutputFormat
from hfmem.cli.help import MARKUP, PlainHelpCommand
from hfmem.hardware.prices import Price

gpus_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=MARKUP)


@gpus_app.command(help="The GPU catalogue: names and aliases for --gpu, vendor memory and the usable GiB fitted "
                       "against (a custom GPU is --gpu name=GiB), and the dated default price per GPU-hour.",
                  cls=PlainHelpCommand)
def gpus(output: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
         ) -> None:
    from hfmem.cli.output_files import standard_output

    with standard_output() as out:  # a full disk or closed stdout is exit 14
        show(output, out)


def show(output: OutputFormat, out: TextIO) -> None:
    """Print the catalogue on `out` in the chosen format."""
    from hfmem.hardware.capabilities import capabilities
    from hfmem.hardware.gpus import catalogue, catalogue_units
    from hfmem.hardware.prices import as_of, default_price, price_data, source
    from hfmem.hardware.specs import gpu_specs, node_specs

    def peak(specs, dtype: str) -> str:
        value = specs.tflops.get(dtype)
        return f"{value:g}" if value else "–"

    def figure(value: float | None) -> str:
        return "–" if value is None else f"{value:,g}"

    rows = []
    for g in catalogue():
        specs, node = gpu_specs(g), node_specs(g)
        rows.append((g.name, g.vendor or "", f"{g.vendor_memory:g} {g.vendor_unit}" if g.vendor_memory else "",
                     f"{g.usable_gib:g}", capabilities(g).runs, peak(specs, "bf16"), peak(specs, "fp8"),
                     f"{specs.memory_gbps:g}" if specs.memory_gbps else "–", node.server or "–",
                     figure(node.network_gbps), figure(node.host_ram_gib), figure(node.nvme_gib),
                     nvme_cell(node.nvme_read_gbps, node.nvme_write_gbps), price_cell(default_price(g.name)),
                     ", ".join(g.aliases)))
    header = ("GPU", "vendor", "memory (vendor)", "usable GiB", "runs", "bf16 TFLOP/s", "fp8 TFLOP/s", "GB/s",
              "server", "network Gb/s", "host GiB", "NVMe GiB", "NVMe GB/s r/w", "USD/GPU-h", "--gpu aliases")
    short = {"memory (vendor)": "mem", "usable GiB": "GiB", "bf16 TFLOP/s": "bf16 TF/s", "fp8 TFLOP/s": "fp8 TF/s",
             "USD/GPU-h": "$/h", "network Gb/s": "net Gb/s", "host GiB": "host", "NVMe GiB": "NVMe",
             "NVMe GB/s r/w": "NVMe r/w", "--gpu aliases": "aliases"}
    """Headers of the terminal table, narrow enough for 80 columns (GiB: usable; TF/s: dense TFLOP/s)."""
    used = sorted({price_data()["prices"][g.name]["source"] for g in catalogue() if default_price(g.name)})
    node_note = ("server: the GPU class's common machine, whose network (Gb/s per GPU, one direction), host RAM "
                 "(GiB), NVMe data drives (GiB) and their read/write GB/s a cell assumes unless --network-gbps / "
                 "--host-ram-gib / --nvme-gib / --nvme-read-gbps / --nvme-write-gbps say otherwise; – : none "
                 "documented (multi-machine time needs --network-gbps; host RAM and NVMe are not checked and no NVMe "
                 "offload is suggested; NVMe offload is untimed). Sources in --format json.")
    prices_note = (f"USD/GPU-h: default on-demand price per GPU-hour, table of {as_of()} ("
                   + "; ".join(f"{source(k)['title']}, {source(k)['url']}, read {source(k)['read']}" for k in used)
                   + "); – : none published there. --price GPU=USD replaces it; every cost names its price's origin.")
    if output is OutputFormat.json:
        out.write(json.dumps({"units": catalogue_units(), "prices": {
            k: price_data()[k] for k in ("description", "as_of", "sources")}, "gpus": [
            g.to_dict() | {"specs": gpu_specs(g).to_dict(), "capabilities": capabilities(g).to_dict(),
                           "price": price_data()["prices"].get(g.name), "node": node_specs(g).to_dict()}
            for g in catalogue()]}, indent=2) + "\n")
    elif output is OutputFormat.markdown:
        from hfmem.render.markdown import escape, table

        out.write(table(list(header), [[escape(c) for c in row] for row in rows]) + "\n\n"
                  + escape(catalogue_units()) + "\n\n" + escape(node_note) + "\n\n" + escape(prices_note)
                  + "\n")
    else:
        from rich import box
        from rich.table import Table

        from hfmem.cli.output_files import stdout_console

        console = stdout_console(out)
        wide = console.width >= 120
        hidden = {"server"} | (set() if wide else {"vendor", "--gpu aliases", "network Gb/s", "host GiB", "NVMe GiB",
                                                   "NVMe GB/s r/w"})
        hidden |= set() if console.width >= 100 else {"memory (vendor)"}
        keep = [i for i, name in enumerate(header) if name not in hidden]
        grid = Table(title="GPU catalogue", title_justify="left", pad_edge=False, box=box.SIMPLE_HEAD)
        for i in keep:
            name = header[i]
            numeric = any(u in name for u in ("GiB", "memory", "/s", "/GPU", "Gb/s"))
            grid.add_column(short.get(name, name), justify="right" if numeric else "left",
                            no_wrap=name in {"GPU", "runs"})
        for row in rows:
            grid.add_row(*(row[i] for i in keep))
        console.print(grid)
        console.print(catalogue_units() + " GiB: usable; TF/s: dense vendor TFLOP/s (no sparsity); "
                      "GB/s: memory bandwidth; "
                      "sources in --format json. runs: what the chip trains with (bf16 or fp16 only, fp8, fp4, "
                      "FlashAttention-2/3, else SDPA, -mem: its memory-efficient kernel); hfmem's defaults follow it "
                      "per GPU." + ("" if wide else " Vendors, vendor memory, --gpu aliases and each GPU's machine: "
                                                    "--format markdown, or 120 columns."),
                      style="dim", markup=False, highlight=False)
        if wide:
            console.print(node_note.replace("server:", "net Gb/s, host, NVMe: those of", 1)
                          + " Servers: --format markdown.",
                          style="dim", markup=False, highlight=False)
        console.print(prices_note.replace("USD/GPU-h:", "$/h:", 1), style="dim", markup=False, highlight=False)


def nvme_cell(read: float | None, write: float | None) -> str:
    """A server's NVMe bandwidth as the table shows it: "25/12" (GB/s read/write), "–" where neither is documented."""
    if read is None and write is None:
        return "–"
    return "/".join("–" if v is None else f"{v:,g}" for v in (read, write))


def price_cell(price: Price | None) -> str:
    """A default price as the table shows it: "3.99" (USD per GPU-hour), "–" where the table has none."""
    return "–" if price is None else f"{price.usd_per_gpu_hour:g}"
