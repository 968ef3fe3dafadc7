"""`hfmem gpus`: the GPU catalogue the fit matrix is computed against, as a table, markdown or JSON."""

from __future__ import annotations

import json
import sys
from typing import Annotated

import typer

from hfmem.cli.formats import OutputFormat

gpus_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None)


@gpus_app.command(help="The GPU catalogue: names and aliases for --gpu, vendor memory and the usable GiB fitted "
                       "against (a custom GPU is --gpu name=GiB).")
def gpus(output: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.")] = OutputFormat.table,
         ) -> None:
    from hfmem.hardware.gpus import catalogue, catalogue_units
    from hfmem.hardware.specs import gpu_specs

    def peak(specs, dtype: str) -> str:
        value = specs.tflops.get(dtype)
        return f"{value:g}" if value else "–"

    rows = []
    for g in catalogue():
        specs = gpu_specs(g)
        rows.append((g.name, g.vendor or "", f"{g.vendor_memory:g} {g.vendor_unit}" if g.vendor_memory else "",
                     f"{g.usable_gib:g}", peak(specs, "bf16"), peak(specs, "fp8"),
                     f"{specs.memory_gbps:g}" if specs.memory_gbps else "–", ", ".join(g.aliases)))
    header = ("GPU", "vendor", "memory (vendor)", "usable GiB", "bf16 TFLOP/s", "fp8 TFLOP/s", "GB/s",
              "--gpu aliases")
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps({"units": catalogue_units(), "gpus": [
            g.to_dict() | {"specs": gpu_specs(g).to_dict()} for g in catalogue()]}, indent=2) + "\n")
    elif output is OutputFormat.markdown:
        from hfmem.render.markdown import escape, table

        sys.stdout.write(table(list(header), [[escape(c) for c in row] for row in rows]) + "\n\n"
                         + escape(catalogue_units()) + "\n")
    else:
        from rich.console import Console
        from rich.table import Table

        grid = Table(title="GPU catalogue", title_justify="left", pad_edge=False)
        for name in header:
            grid.add_column(name, justify="right" if any(u in name for u in ("GiB", "memory", "/s")) else "left")
        for row in rows:
            grid.add_row(*row)
        console = Console()
        console.print(grid)
        console.print(catalogue_units() + " TFLOP/s: dense vendor peaks (no sparsity); GB/s: memory bandwidth; "
                      "sources in --format json. No prices: give --price GPU=USD.", style="dim", markup=False,
                      highlight=False)
