"""The `hfmem` command line: `hfmem MODEL [options]` and `hfmem scan FILE [options]`.

Every failure the user can cause ends in one line on stderr and a distinct exit code (see
hfmem/errors.py); tracebacks appear only with HFMEM_DEBUG=1.
"""

from __future__ import annotations

import json
import sys
from functools import partial
from pathlib import Path
from typing import Annotated, Any

import typer

from hfmem import __version__, errors
from hfmem.cli import options as opt
from hfmem.cli.formats import OutputFormat, PlotFormat
from hfmem.cli.help import MARKUP, PlainHelpCommand
from hfmem.constants import HUB_TIMEOUT_S
from hfmem.memory.fields import MODEL_PANEL, OUTPUT_PANEL

# typer may vendor click; find its ClickException through a public subclass either way.
_CLICK_ERROR: type[Any] = next(c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException")

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=MARKUP)


def _print_version(value: bool) -> None:
    """`--version`: print `hfmem <version>` and stop, before MODEL is required or anything is imported."""
    if value:
        from hfmem.cli.output_files import standard_output

        with standard_output() as out:
            out.write(f"hfmem {__version__}\n")
        raise typer.Exit()


COMMANDS = ("Commands: hfmem MODEL [options] (this page) · hfmem scan FILE [options] (many models into JSONL; "
            "hfmem scan --help) · hfmem serve MODEL (serving memory; hfmem serve --help) · hfmem gpus (the GPU "
            "catalogue for --gpu) · hfmem --version")
"""Every command, listed under `hfmem --help` (the dispatch is in `run`)."""


@app.command(help="Exact architecture, parameter count and training memory fit of a Hugging Face model. "
                  "MODEL is a Hub id (org/name[@revision]), a local directory, a config.json, or example:NAME.",
             epilog=COMMANDS, cls=PlainHelpCommand)
@opt.with_plan_flags
def model(
    model: Annotated[str | None, typer.Argument(
        metavar="MODEL", help="org/name[@revision], a directory, a config.json or example:NAME (default: the model "
                              "the --config file names)", show_default=False)] = None,
    revision: Annotated[str | None, typer.Option(help="Branch, tag or commit sha.",
                                                    rich_help_panel=MODEL_PANEL)] = None,
    token: Annotated[str | None, typer.Option(help="Hub token (default: HF_TOKEN, then the saved login).",
                                                 show_default=False, rich_help_panel=MODEL_PANEL)] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per Hub request before retrying.",
                                           rich_help_panel=MODEL_PANEL)] = HUB_TIMEOUT_S,
    output: Annotated[OutputFormat, typer.Option("--format", "-f", help="Output format.",
                                                 rich_help_panel=OUTPUT_PANEL)] = OutputFormat.table,
    details: Annotated[bool, typer.Option("--details", help="Show the architecture and full breakdowns.",
                                          rich_help_panel=OUTPUT_PANEL)] = False,
    html: Annotated[Path | None, typer.Option("--html", metavar="FILE", rich_help_panel=OUTPUT_PANEL,
                                                 help="Also write a self-contained HTML report with charts (no network "
                                                      "needed to open it); adds `curves` to the JSON.")] = None,
    plot_dir: Annotated[Path | None, typer.Option("--plot-dir", metavar="DIR", rich_help_panel=OUTPUT_PANEL,
                                                     help="Also write each chart of the HTML report as a file of its "
                                                          "own in DIR (created if missing): fit, terms, seq-len, "
                                                          "micro-batch-size, frontier with --tokens and --price, "
                                                          "serving with -m serve; adds `curves` to the JSON.")] = None,
    plot_format: Annotated[PlotFormat | None, typer.Option(
        "--plot-format", rich_help_panel=OUTPUT_PANEL, show_default=False,
        help="svg (default): standalone SVG files; png: also a PNG of each, drawn by headless Chromium or Chrome "
             "(needs --plot-dir).")] = None,
    version: Annotated[bool, typer.Option("--version", is_eager=True, callback=_print_version,
                                          help="Print hfmem's version and exit.")] = False,
    plan: Any = None,  # the estimate flags, validated by opt.with_plan_flags
) -> None:
    from hfmem.cli.waiting import stall_notices
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.reporting.plan import build_report

    model = model or plan.model
    if not model:
        raise errors.InvalidInputError("give MODEL (a Hub id, a directory, a config.json or example:NAME), or a "
                                       "--config file that names one.")
    if plot_format is not None and plot_dir is None:
        raise errors.InvalidInputError("--plot-format needs --plot-dir DIR, the folder to write the charts in.")
    ref = parse_model_ref(model, revision)
    hub = partial(HubSettings.from_env, token=token, timeout=timeout)
    with stall_notices():
        report = build_report(ref, hub, plan, curves=html is not None or plot_dir is not None)
    if html is not None:
        from hfmem.cli.output_files import write_output
        from hfmem.render.html import render

        write_output(html, render(report))
    if plot_dir is not None:
        from hfmem.cli.plots import write_plots

        write_plots(report, plot_dir, plot_format or PlotFormat.svg)
    emit(report, output, details)


def emit(report: dict, output: OutputFormat, details: bool) -> None:
    """Print the report on stdout in the chosen format (a failed write is exit 14, see cli/output_files.py)."""
    from hfmem.cli.output_files import standard_output, stdout_console

    with standard_output() as out:
        if output is OutputFormat.json:
            out.write(json.dumps(report, separators=(",", ":"), ensure_ascii=False) + "\n")
        elif output is OutputFormat.markdown:
            from hfmem.render.markdown import render as markdown

            out.write(markdown(report))
        else:
            from hfmem.render.table import render as table

            table(report, stdout_console(out), details=details)


def _fail(message: str, code: int) -> int:
    """Print `hfmem: error: MESSAGE` on stderr (when there is one) and return the exit code."""
    if sys.stderr is not None:  # closed (`2>&-`): the exit code still says it
        sys.stderr.write(f"hfmem: error: {message}\n")
        sys.stderr.flush()
    return code


def run(argv: list[str]) -> int:
    """Run the CLI on argv and return the exit status instead of raising.

    Ctrl-C is exit 130 and one line wherever it lands: typer turns a KeyboardInterrupt inside a command into
    `Exit(130)`, which `standalone_mode=False` returns as the status; outside a command it is classified here.
    (`hfmem.entry` covers the moments before this module is imported.)
    """
    if argv[:1] == ["scan"]:
        from hfmem.cli.scan import scan_app

        command, argv, prog = typer.main.get_command(scan_app), argv[1:], "hfmem scan"
    elif argv[:1] == ["serve"]:
        from hfmem.cli.serve import serve_app

        command, argv, prog = typer.main.get_command(serve_app), argv[1:], "hfmem serve"
    elif argv[:1] == ["gpus"]:
        from hfmem.cli.catalogue import gpus_app

        command, argv, prog = typer.main.get_command(gpus_app), argv[1:], "hfmem gpus"
    else:
        command, prog = typer.main.get_command(app), "hfmem"
    try:
        status = command.main(args=argv, prog_name=prog, standalone_mode=False)
    except _CLICK_ERROR as err:  # click's own status: 2 (ExitCode.INVALID_INPUT) for a bad command line
        return _fail(err.format_message().splitlines()[0] if err.format_message() else str(err), err.exit_code)
    except typer.Abort:
        return _fail("aborted.", errors.ExitCode.INTERRUPTED)
    except (Exception, KeyboardInterrupt) as err:  # hfmem's errors, Ctrl-C, and bugs: still one line
        code, message = errors.classify(err)
        if code is errors.ExitCode.INTERNAL and errors.debugging():
            raise
        return _fail(message, code)
    if status == errors.ExitCode.INTERRUPTED:  # typer's Exit(130) for a KeyboardInterrupt inside the command
        return _fail(errors.classify(KeyboardInterrupt())[1], errors.ExitCode.INTERRUPTED)
    return status if isinstance(status, int) else errors.ExitCode.OK  # a command returns None; --version's Exit 0
