"""The --help page of every hfmem command: rich, with options in panels, and help texts shown exactly as written.

typer draws panels (`rich_help_panel`) only in rich markup mode, where `[...]` would be read as markup;
hfmem's help texts are plain text (`org/name[@revision]`, `[0, 64)`), so they are escaped just before drawing.
"""

from __future__ import annotations

import errno
import os
from typing import Any, Literal

import typer.core

MARKUP: Literal["rich"] = "rich"
"""The typer markup mode of every hfmem app: the one in which typer draws help panels."""


class PlainHelpCommand(typer.core.TyperCommand):
    """A typer command whose help, epilog and parameter help are escaped, not read as rich markup."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """Escape the texts (once per command object), then draw the page on stdout as typer does."""
        if not getattr(self, "_escaped", False):
            from rich.markup import escape

            self.help, self.epilog = (escape(text) if text else text for text in (self.help, self.epilog))
            for param in self.params:
                if getattr(param, "help", None):
                    param.help = escape(param.help)  # type: ignore[attr-defined]  # Options and typer's Arguments have it
            self._escaped = True
        from hfmem.cli.output_files import standard_output

        with standard_output():  # typer prints the page here: a full disk or closed stdout is exit 14
            try:
                super().format_help(ctx, formatter)
            except SystemExit:  # how typer's rich console ends a broken pipe (exit 1): quietly here, as elsewhere
                raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE)) from None
