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

    rows = [(g.name, g.vendor or "", f"{g.vendor_memory:g} {g.vendor_unit}" if g.vendor_memory else "",
             f"{g.usable_gib:g}", ", ".join(g.aliases)) for g in catalogue()]
    header = ("GPU", "vendor", "memory (vendor)", "usable GiB", "--gpu aliases")
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps({"units": catalogue_units(), "gpus": [g.to_dict() for g in catalogue()]},
                                    indent=2) + "\n")
    elif output is OutputFormat.markdown:
        from hfmem.render.markdown import escape, table

        sys.stdout.write(table(list(header), [[escape(c) for c in row] for row in rows]) + "\n\n"
                         + escape(catalogue_units()) + "\n")
    else:
        from rich.console import Console
        from rich.table import Table

        grid = Table(title="GPU catalogue", title_justify="left", pad_edge=False)
        for name in header:
            grid.add_column(name, justify="right" if "GiB" in name or "memory" in name else "left")
        for row in rows:
            grid.add_row(*row)
        console = Console()
        console.print(grid)
        console.print(catalogue_units(), style="dim", markup=False, highlight=False)
