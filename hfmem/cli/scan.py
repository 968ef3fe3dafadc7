"""`hfmem scan`: analyse many models into append-only JSONL, with progress, resume, shards and exports.

`hfmem.cli.run` dispatches `hfmem scan ...` here. The per-model work is `report.build_report`, the
same seam as `hfmem MODEL`, with the same estimate flags (`hfmem.cli.options`) turned into the same
Plan; `scan_settings` puts that Plan into the settings digest that `--resume` matches on.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from hfmem import __version__, errors
from hfmem.cli import options as opt
from hfmem.cli.help import MARKUP, PlainHelpCommand
from hfmem.constants import HUB_TIMEOUT_S

if TYPE_CHECKING:
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.reporting.plan import Plan
    from hfmem.scan.export import FitFilter
    from hfmem.scan.runner import ScanStats

RATE_LIMIT_WAIT_S = 300.0
"""Longest 429 Retry-After a scan sleeps through: the Hub's rate-limit window is 5 minutes."""

DEFAULT_CONCURRENCY = 16
"""Models in flight. Each costs ~1 Hub API and ~3 resolver requests (fewer once cached), two round trips after its
API answer; at 50 ms per request 8 in flight are latency-bound (32 distinct models/s on 2 cores), 16 reach 48
(bench/scan_throughput.py). Over a long scan the Hub's per-5-minute request limits bound throughput, and 429s are
waited out rather than raced."""

scan_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=MARKUP)


@scan_app.command(help="Analyse many models: FILE lists one model per line (org/name[@revision], `#` comments, "
                       "`-` for stdin) and/or --author/--search/--limit list them from the Hub. One JSONL record "
                       "per model goes to --out as it finishes. Without a FILE or Hub listing, exports --out "
                       "(--csv, --markdown, --html).", cls=PlainHelpCommand)
@opt.with_plan_flags
def scan(
    file: Annotated[str | None, typer.Argument(metavar="FILE", help="Model list, or - for stdin.")] = None,
    author: Annotated[str | None, typer.Option(help="List the Hub models of this user or organisation.")] = None,
    search: Annotated[str | None, typer.Option(help="List the Hub models whose id contains this text.")] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="At most this many models from the Hub listing.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="JSONL results file (appended to).")] = Path(
        "hfmem-scan.jsonl"),
    resume: Annotated[bool, typer.Option("--resume", help="Continue --out: skip models recorded with the same "
                                                          "settings.")] = False,
    concurrency: Annotated[int, typer.Option(min=1, max=64, help="Models fetched at once.")] = DEFAULT_CONCURRENCY,
    shard: Annotated[str | None, typer.Option(metavar="K/N", help="Scan only shard K of N (1 <= K <= N).")] = None,
    csv_path: Annotated[Path | None, typer.Option("--csv", help="Also write the results as CSV.")] = None,
    markdown_path: Annotated[Path | None, typer.Option("--markdown", help="Also write a markdown summary.")] = None,
    html_path: Annotated[Path | None, typer.Option("--html", help="Also write a sortable, filterable HTML table "
                                                                     "(one file, opens offline).")] = None,
    fits: Annotated[list[str] | None, typer.Option("--fits", metavar="METHOD:GPU",
                                                   help="Export only models where METHOD fits on one such GPU with "
                                                        "these settings, e.g. qlora:rtx4090 (repeatable: all must "
                                                        "hold).")] = None,
    list_only: Annotated[bool, typer.Option("--list-only", help="Print the models this job would scan and "
                                                                "exit.")] = False,
    token: Annotated[str | None, typer.Option(help="Hub token (default: HF_TOKEN, then the saved login).",
                                                 show_default=False)] = None,
    timeout: Annotated[float, typer.Option(help="Seconds per Hub request before retrying.")] = HUB_TIMEOUT_S,
    compact: Annotated[bool, typer.Option("--compact", help="Record only the fit table per model (verdict, total, "
                                                            "suggestion), no breakdowns: a few kB a model.")] = False,
    plan: Any = None,  # the estimate flags, validated by opt.with_plan_flags
) -> None:
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.memory.gpu_defaults import matrix_gpus
    from hfmem.scan import runner as engine
    from hfmem.scan.export import parse_fit_filter, summarise

    matrix_gpus(plan.training.validated(), plan.gpus)  # a dtype the asked GPUs cannot run: one error, not one per model
    shard_k_n = engine.parse_shard(shard) if shard else None
    filters = [parse_fit_filter(f) for f in fits or []]
    hub = dataclasses.replace(HubSettings.from_env(token=token, timeout=timeout), max_retry_wait=RATE_LIMIT_WAIT_S)
    settings = scan_settings(hub, plan, compact)
    wanted: set[tuple[str, str]] | None = None
    if file or author or search or limit is not None:
        _check_filters(filters, plan)
        models = engine.select_shard(engine.collect_models(file, hub, author, search, limit), shard_k_n)
        if list_only:
            from hfmem.cli.output_files import standard_output

            with standard_output() as listed:
                listed.write("".join(f"{m}\n" for m in models))
            return
        digest = engine.settings_digest(settings)
        wanted = {(m, digest) for m in models}
        stats = _scan(models, hub, plan, settings, out, resume, concurrency, compact)
    elif not (csv_path or markdown_path or html_path):
        raise errors.InvalidInputError("nothing to scan: give a FILE, --author, --search or --limit "
                                       "(or --csv/--markdown/--html to export an existing --out).")
    elif not out.is_file():
        raise errors.InvalidInputError(f"{out}: no such results file to export.")
    else:
        stats = None
    records = engine.iter_records(out)
    if wanted is not None:  # this scan's models and settings, not whatever else the file holds
        records = (r for r in records if engine.record_key(r) in wanted)
    rows = summarise(records, filters)
    _export([row for row, chosen in rows if chosen], filters, out, csv_path, markdown_path, html_path)
    failed = sum(row["status"] != "ok" for row, _ in rows)
    if stats is not None and failed:
        raise errors.ScanFailuresError(f"{failed} of {len(rows)} models failed; their records in {out} say why.")


def scan_settings(hub: HubSettings, plan: Plan, compact: bool = False) -> dict[str, Any]:
    """What a record's results depend on, stored in each record and digested for --resume; never the token.
    A compact record's plan keeps only the training settings that differ from hfmem's defaults, and no empty entry."""
    from hfmem.memory.record import changed
    from hfmem.memory.settings import TrainingSettings

    shown = plan.to_dict()
    if compact:
        shown = {k: v for k, v in shown.items() if v} | {
            "training": changed(TrainingSettings().to_dict(), shown["training"])}
    return {"hfmem": __version__, "endpoint": hub.shown_endpoint, "offline": hub.offline, "compact": compact,
            "plan": shown}


def _check_filters(filters: list[FitFilter], plan: Plan) -> None:
    """Refuse a --fits that this scan's methods and GPUs can never satisfy (a typo would export nothing)."""
    from hfmem.memory.gpu_defaults import matrix_gpus
    from hfmem.memory.settings import SERVE
    from hfmem.scan.export import gpu_key

    gpus = {gpu_key(name) for g in matrix_gpus(plan.training.validated(), plan.gpus) for name in (g.name, *g.aliases)}
    for f in filters:
        if f.method not in plan.methods and not (f.method == SERVE and plan.serve):
            raise errors.InvalidInputError(f"--fits {f}: {f.method} is not among the scanned methods (--method).")
        if gpu_key(f.gpu) not in gpus:
            raise errors.InvalidInputError(f"--fits {f}: {f.gpu} is not among the GPUs fitted against (--gpu).")


def _scan(models: list[str], hub: HubSettings, plan: Plan, settings: dict[str, Any], out: Path, resume: bool,
          concurrency: int, compact: bool) -> ScanStats:
    """Run the scan behind a progress bar on stderr and print a one-line summary."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    from hfmem.memory.record import compact_report
    from hfmem.reporting.plan import build_report
    from hfmem.scan import runner as engine

    def report(ref: Any) -> dict[str, Any]:
        full = build_report(ref, hub, plan)
        return compact_report(full) if compact else full

    console = Console(stderr=True, highlight=False, soft_wrap=True)
    store = engine.ResultStore(out, resume)
    columns = (SpinnerColumn(), TextColumn("scan"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[counts]}"), TimeElapsedColumn())
    try:
        with Progress(*columns, console=console, transient=False) as bar:
            task = bar.add_task("scan", total=len(models), counts="")

            def show(stats: ScanStats) -> None:
                bar.update(task, completed=stats.done + stats.skipped, counts=_counts(stats))

            stats = engine.run_scan(models, report, settings, store, concurrency, show)
    except KeyboardInterrupt:
        raise errors.ScanInterruptedError(
            f"interrupted; finished models are recorded in {out}, rerun with --resume.") from None
    finally:
        store.close()
    console.print(f"hfmem: scanned {stats.total} models: {_counts(stats)}, {stats.builds} meta-model builds, "
                  f"{stats.elapsed:.1f}s; results in {out}", markup=False)
    return stats


def _counts(stats: ScanStats) -> str:
    return (f"done {stats.ok} · failed {stats.failed} · cached {stats.cached} · skipped {stats.skipped} · "
            f"{stats.rate:.1f} models/s")


def _export(rows: list[dict[str, Any]], filters: list[FitFilter], out: Path, csv_path: Path | None,
            markdown_path: Path | None, html_path: Path | None) -> None:
    """Write the requested CSV, markdown and HTML dashboard files from the chosen rows (of the results file `out`)."""
    from hfmem.cli.output_files import write_output
    from hfmem.render.dashboard import render as dashboard
    from hfmem.scan.export import dashboard_data, to_csv, to_markdown

    for path, text in ((csv_path, lambda: to_csv(rows)), (markdown_path, lambda: to_markdown(rows, filters)),
                       (html_path, lambda: dashboard(f"hfmem scan · {out.name}", dashboard_data(rows, filters)))):
        if path is not None:
            write_output(path, text())
