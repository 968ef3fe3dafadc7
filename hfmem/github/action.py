"""The GitHub Action: `run`, which the `hfmem-action` script runs (hfmem/entry.py; action.yml runs it too).

It reports on the listed Hub models and on the pull request's changed config.json files (base vs
head), writes the table to `$GITHUB_STEP_SUMMARY`, the markdown, JSON and HTML files to the step outputs
(action.yml uploads the HTML page as an artifact; the comment links the run page that lists it),
keeps one sticky comment on the pull request (found by a hidden marker, updated in place), and
exits non-zero when a `fail-on` condition holds. Inputs arrive as the runner sets them: `INPUT_NAME`
(a `docker://` step keeps hyphens, `INPUT_MODELS-FILE`; action.yml maps them to underscores).
Log lines are flattened (no workflow-command injection from file names) and never show a token.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, cast

from hfmem import __version__, errors
from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.memory.settings import ALL_METHODS, ENGINES, METHODS, SERVE
from hfmem.render.comment import Item, render

MARKER = "<!-- hfmem-action: sticky fit table -->"
COMMENT_BUDGET = 60_000  # characters: GitHub refuses comments over 65,536; the margin absorbs the footer
SUMMARY_BUDGET = 900_000  # $GITHUB_STEP_SUMMARY takes up to 1 MiB per step
DEFAULT_GPUS = ("T4", "RTX 4090", "A100 40GB", "H100 80GB", "H200 141GB")  # 15 to 141 GiB, five columns
HTML_REPORTS = 50
"""Reports drawn in full on the HTML page (about 70 KB each on the five default GPUs); the rest are listed, and all
are in report.json."""
_REPOSITORY = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_ARTIFACT = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_SERVER = re.compile(r"^https?://[A-Za-z0-9.-]+(?::[0-9]{1,5})?$")


@dataclass(frozen=True)
class Inputs:
    """The action's inputs, validated."""

    models: list[str]
    config_globs: list[str]
    gpus: list[str]
    methods: list[str]
    seq_len: int | None
    batch_size: int
    token: str
    hf_token: str
    fail_on: list[str]
    tokens: float | None = None
    """Training tokens to time and price each fitting setup for (the CLI's --tokens)."""
    prices: dict[str, float] = field(default_factory=dict)
    """USD per GPU-hour by catalogue GPU name (the CLI's --price)."""
    artifact: str = ""
    """The name action.yml uploads report.html under (input artifact-name); empty: no upload, no link."""
    engine: str = "vllm"
    """The serving column's engine (input engine; the CLI's --engine), where methods name serve."""
    context: int | None = None
    """The serving column's tokens per request (input context; the CLI's --context); None: its default."""


@dataclass(frozen=True)
class PullRequest:
    number: int
    base_sha: str | None
    fork: bool


@dataclass
class Log:
    """Lines for the job log: one line each, secrets replaced by ***."""

    secrets: list[str] = field(default_factory=list)
    write: Callable[[str], None] = lambda line: print(line, flush=True)

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "***")
        return text

    def __call__(self, message: str) -> None:
        self.write("hfmem: " + self.redact(" ".join(message.split())))

    def error(self, message: str) -> None:
        """An error annotation (`::error::`), escaped as workflow commands require."""
        text = "hfmem: " + self.redact(" ".join(message.split()))
        self.write("::error::" + text.replace("%", "%25"))


# -- inputs ----------------------------------------------------------------------------------------
def get_input(env: Mapping[str, str], name: str) -> str:
    """An input as the runner passes it: INPUT_MODELS-FILE (docker) or INPUT_MODELS_FILE (composite)."""
    upper = "INPUT_" + name.upper()
    return (env.get(upper) or env.get(upper.replace("-", "_")) or "").strip()


def split_list(text: str) -> list[str]:
    """Items separated by newlines or commas; `#` starts a comment; blanks and repeats dropped."""
    from hfmem.scan.runner import read_list

    return read_list(part for line in text.splitlines() for part in line.split(","))


def positive_int(name: str, text: str) -> int | None:
    if not text:
        return None
    if not text.isdigit() or int(text) < 1:
        raise errors.InvalidInputError(f"input {name}: expected a positive integer, got {text!r}.")
    return int(text)


def read_inputs(env: Mapping[str, str], workspace: Path) -> Inputs:
    """Validate every input before any network request."""
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.scan.runner import load_list, read_list

    models = read_list(get_input(env, "models").splitlines())
    if models_file := get_input(env, "models-file"):
        models += [m for m in load_list(str(workspace / models_file)) if m not in models]
    for model in models:  # the list may come from the pull request: no local paths, only ids (or examples)
        if parse_model_ref(model).kind != "hub" and not model.startswith("example:"):
            raise errors.InvalidInputError(f"input models: {model!r} is not a Hub model id "
                                           "(use config-paths for files).")
    globs = split_list(get_input(env, "config-paths"))
    if not models and not globs:
        raise errors.InvalidInputError("give at least one of the inputs models, models-file or config-paths.")
    gpus = resolve_gpu_names(split_list(get_input(env, "gpus"))) or list(DEFAULT_GPUS)
    methods = [m.lower() for m in split_list(get_input(env, "methods"))] or list(METHODS)
    for method in methods:
        if method not in (*ALL_METHODS, SERVE):
            raise errors.InvalidInputError(f"input methods: {method!r}; choose from {', '.join(ALL_METHODS)} or "
                                           f"{SERVE}.")
    engine = get_input(env, "engine").lower() or "vllm"
    if engine not in ENGINES:
        raise errors.InvalidInputError(f"input engine: {engine!r}; choose from {', '.join(ENGINES)}.")
    fail_on = []
    for condition in split_list(get_input(env, "fail-on") or "error"):
        condition = condition.lower()
        if condition in {"error", "regression"}:
            fail_on.append(condition)
        elif ":" in condition:
            method, gpu = parse_fit_condition(condition, gpus)
            methods += [method] if method not in methods else []  # estimate what the check needs
            gpus += [gpu] if gpu not in gpus else []
            fail_on.append(f"{method}:{gpu}")
        elif condition != "none":
            raise errors.InvalidInputError(
                f"input fail-on: {condition!r}; expected none, error, regression or METHOD:GPU (e.g. qlora:rtx4090).")
    tokens, prices = read_budget(env)
    artifact = get_input(env, "artifact-name")
    if artifact and not _ARTIFACT.match(artifact):
        raise errors.InvalidInputError(f"input artifact-name: {artifact!r:.60}; use letters, digits, '.', '_' and '-' "
                                       "(at most 100).")
    return Inputs(
        models=models, config_globs=globs, gpus=gpus, methods=methods, tokens=tokens, prices=prices, artifact=artifact,
        seq_len=positive_int("seq-len", get_input(env, "seq-len")),
        batch_size=positive_int("batch-size", get_input(env, "batch-size")) or 1,
        engine=engine, context=positive_int("context", get_input(env, "context")),
        token=get_input(env, "token") or env.get("GITHUB_TOKEN", ""),
        hf_token=get_input(env, "hf-token"), fail_on=fail_on,
    )


def read_budget(env: Mapping[str, str]) -> tuple[float | None, dict[str, float]]:
    """The `tokens` and `prices` inputs, checked as the CLI checks --tokens and --price."""
    from hfmem.reporting.budget import budget_tokens, parse_prices

    text = get_input(env, "tokens").strip()
    try:
        tokens = budget_tokens(float(text) if text else None, None, None)
    except (ValueError, errors.InvalidInputError):
        raise errors.InvalidInputError(f"input tokens: expected a positive number of tokens below 1e16 (e.g. 2e9), "
                                       f"got {text!r}.") from None
    try:
        prices = parse_prices(tuple(split_list(get_input(env, "prices"))))
    except errors.InvalidInputError as err:
        raise errors.InvalidInputError(f"input prices: {err}") from None
    return tokens, prices


def resolve_gpu_names(specs: list[str]) -> list[str]:
    """Catalogue names for catalogue GPUs (aliases resolved), `name=GiB` specs kept as given; unknown: error."""
    from hfmem.hardware.gpus import resolve_gpus

    if not specs:  # resolve_gpus reads none as the whole catalogue
        return []
    try:
        return [spec if gpu.user_defined else gpu.name for spec, gpu in zip(specs, resolve_gpus(specs), strict=True)]
    except errors.InvalidInputError as err:
        raise errors.InvalidInputError(f"input gpus: {err}") from None


def parse_fit_condition(condition: str, gpus: list[str]) -> tuple[str, str]:
    """`qlora:rtx4090` -> ("qlora", "RTX 4090"); a GPU may also be one of the `name=GiB` specs in gpus."""
    from hfmem.hardware.gpus import find_gpu

    method, _, gpu = (part.strip() for part in condition.partition(":"))
    if method not in (*ALL_METHODS, SERVE):
        raise errors.InvalidInputError(f"input fail-on: {condition!r}: method must be one of "
                                       f"{', '.join((*ALL_METHODS, SERVE))}.")
    custom = {spec.split("=", 1)[0].strip().lower(): spec for spec in gpus if "=" in spec}
    if gpu in custom:
        return method, custom[gpu]
    try:
        return method, find_gpu(gpu).name
    except errors.InvalidInputError as err:
        raise errors.InvalidInputError(f"input fail-on: {err}") from None


def read_event(env: Mapping[str, str]) -> PullRequest | None:
    """The pull request of a pull_request(_target) event, or None for other events."""
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return None
    try:
        event = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise errors.InvalidInputError(
            f"cannot read the event file $GITHUB_EVENT_PATH ({type(err).__name__}).") from None
    pr = event.get("pull_request") if isinstance(event, dict) else None
    if pr is None:
        return None
    pr = _event_object(pr, "pull_request")
    number = pr.get("number")
    if isinstance(number, bool) or not isinstance(number, int) or number < 1:
        raise errors.InvalidInputError(
            f"the event's pull_request.number must be a positive integer, got {number!r:.40}.")
    base, head = _event_object(pr.get("base"), "pull_request.base"), _event_object(pr.get("head"), "pull_request.head")
    sha = base.get("sha")
    if sha is not None and not isinstance(sha, str):
        raise errors.InvalidInputError(f"the event's pull_request.base.sha must be a string, got {sha!r:.40}.")
    base_repo = _event_object(base.get("repo"), "pull_request.base.repo").get("full_name")
    head_repo = _event_object(head.get("repo"), "pull_request.head.repo").get("full_name")
    return PullRequest(number, sha, fork=bool(head_repo and base_repo and head_repo != base_repo))


def _event_object(value: Any, where: str) -> dict[str, Any]:
    """An object of the event file ({} when absent); anything else is a malformed event, not a crash."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise errors.InvalidInputError(f"the event's {where} must be an object, got {type(value).__name__}.")
    return value


# -- analysis --------------------------------------------------------------------------------------
ReportFn = Callable[[Any], dict[str, Any]]


def analyse(ref: Any, report_fn: ReportFn, paths: Mapping[str, str]) -> tuple[dict[str, Any] | None, str | None]:
    """(report, None) or (None, one-line error); `paths` maps local file paths to the names users know."""
    try:
        return report_fn(ref), None
    except Exception as err:  # hfmem's errors, and bugs: recorded for this row, the others still run
        code, message = errors.classify(err)
        if code is errors.ExitCode.INTERNAL and errors.debugging():
            raise
    for path, shown in paths.items():
        message = message.replace(path, shown)
    return None, message


def build_items(inputs: Inputs, pr: PullRequest | None, workspace: Path, report_fn: ReportFn, log: Log) -> list[Item]:
    """Reports for every listed model, then for the matched config files (head, and base when changed)."""
    from hfmem.github import pr_configs
    from hfmem.hub.modelref import ModelRef, parse_model_ref

    items = [Item(model, "model", "listed", *analyse(parse_model_ref(model), report_fn, {})) for model in inputs.models]
    if not inputs.config_globs:
        return items
    files, why = pr_configs.collect(inputs.config_globs, workspace, pr.base_sha if pr else None)
    if pr and why:
        log(f"config files are shown without a base vs head diff: {why}.")
    if not files:
        log("config-paths matched no " + ("" if why else "added or changed ") + "config files.")
    with tempfile.TemporaryDirectory(prefix="hfmem-base-") as tmp:
        for n, file in enumerate(files):
            if file.status == "outside":
                items.append(Item(file.path, "config", file.status,
                                  head_error="resolves outside the workspace; not read."))
                continue
            head = analyse(ModelRef("config", file.path, path=file.absolute), report_fn,
                           {str(file.absolute): file.path})
            base: tuple[dict[str, Any] | None, str | None] = (None, None)
            if file.base is not None:
                copy = Path(tmp) / f"base-{n}.json"
                copy.write_bytes(file.base)
                base = analyse(ModelRef("config", file.path, path=copy), report_fn, {str(copy): f"{file.path} (base)"})
            items.append(Item(file.path, "config", file.status, *head, *base))
    return items


def failures(items: list[Item], fail_on: list[str]) -> list[str]:
    """One line per violated `fail-on` condition and item (METHOD:GPU: the settings as given fit one GPU)."""
    from hfmem.render.diff import fit_entries, fits, regressions

    found = []
    for condition in fail_on:
        for item in items:
            if condition == "error" and item.head_error:
                found.append(item.head_error if item.label in item.head_error else f"{item.label}: {item.head_error}")
            elif condition == "regression":
                found += [f"{item.label}: {m} no longer fits {g}" for m, g in regressions(item.base, item.head)]
            elif ":" in condition and item.head is not None:
                method, gpu = condition.split(":", 1)
                ok = fits(fit_entries(item.head).get((method, gpu.split("=", 1)[0].strip())))
                if ok is not True:
                    verdict = "does not fit" if ok is False else "no estimate for"
                    found.append(f"{item.label}: {verdict} {gpu} with {method}")
    return found


# -- outputs -----------------------------------------------------------------------------------------
def settings_line(inputs: Inputs) -> str:
    """What the estimates assume, in one line above the tables."""
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.hardware.prices import prices_for
    from hfmem.memory.settings import TrainingSettings
    from hfmem.render.common import price_words
    from hfmem.render.diff import cell
    from hfmem.reporting.plan import price_entry

    t = TrainingSettings().validated()
    gpus = resolve_gpus(inputs.gpus)
    seq = (f"sequence length {inputs.seq_len:,}" if inputs.seq_len
           else f"sequence length {DEFAULT_SEQ_LEN:,} (or the model's maximum)")
    parts = [seq, f"micro-batch {inputs.batch_size}", t.precision.label, f"{t.resolved_optimizer} "
             f"(QLoRA: {replace(t, method='qlora').resolved_optimizer})",
             f"gradient checkpointing {t.gradient_checkpointing}",
             f"LoRA rank {t.lora_rank} on {', '.join(t.lora_targets)}",
             "one GPU each: " + ", ".join(g.split("=", 1)[0].strip() for g in inputs.gpus)]
    if SERVE in inputs.methods:
        s = replace(t.serving, engine=inputs.engine, context=inputs.context or t.serving.context)
        parts.append(f"serve: {s.engine}, context {s.context:,}, one replica per GPU")
    if inputs.tokens:
        parts.append(f"timed for {inputs.tokens:.3g} tokens")
        if prices := price_words(price_entry(prices_for([g.name for g in gpus], inputs.prices)),
                                 [g.name for g in gpus], "prices input"):
            parts.append(prices)
    return cell(" · ".join(parts), 1000)


def footer(env: Mapping[str, str], artifact: str) -> str:
    """hfmem's version and the commit; where the HTML page is uploaded, a link to the run page that lists it."""
    sha = env.get("GITHUB_SHA", "")
    at = f" for commit {sha[:7]}" if len(sha) == 40 and all(c in "0123456789abcdef" for c in sha) else ""
    run_url = run_page(env)
    link = (f"Charts: the HTML report, artifact `{artifact}` of [this run]({run_url})\n\n"
            if artifact and run_url else "")
    return f"{link}<sub>hfmem {__version__}{at}</sub>"


def run_page(env: Mapping[str, str]) -> str | None:
    """`$GITHUB_SERVER_URL/$GITHUB_REPOSITORY/actions/runs/$GITHUB_RUN_ID`, the page that lists the run's artifacts;
    None unless all three are well formed (they end up in a link)."""
    server, repository, run_id = (env.get(k, "") for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if _SERVER.match(server) and _REPOSITORY.match(repository) and run_id.isdigit():
        return f"{server}/{repository}/actions/runs/{run_id}"
    return None


def html_page(items: list[Item]) -> str:
    """Every item's report on one page (the first HTML_REPORTS drawn in full), each error listed."""
    from hfmem.render.html import render_all

    entries: list[tuple[str, dict[str, Any] | None, str | None]] = []
    for item in items:
        drawn = sum(report is not None for _, report, _ in entries)
        if item.head is not None and drawn >= HTML_REPORTS:
            entries.append((item.label, None, f"not drawn: the page draws {HTML_REPORTS} reports; report.json has it"))
        else:
            entries.append((item.label, item.head, item.head_error))
    return render_all("hfmem: will it train?", entries)


def write_outputs(env: Mapping[str, str], summary: str, data: dict[str, Any], page: str, log: Log) -> None:
    """report.md, report.json and report.html under $RUNNER_TEMP/hfmem, the job summary, and the step outputs."""
    out_dir = Path(env.get("RUNNER_TEMP") or tempfile.gettempdir()) / "hfmem"
    markdown, report, html = out_dir / "report.md", out_dir / "report.json", out_dir / "report.html"
    writes = [(markdown, "w", summary), (report, "w", json.dumps(data, indent=2) + "\n"), (html, "w", page)]
    if env.get("GITHUB_STEP_SUMMARY"):
        writes.append((Path(env["GITHUB_STEP_SUMMARY"]), "a", summary + "\n"))
    else:
        log(f"GITHUB_STEP_SUMMARY is not set; the table is in {markdown}.")
    if env.get("GITHUB_OUTPUT"):
        writes.append((Path(env["GITHUB_OUTPUT"]), "a", f"markdown={markdown}\njson={report}\nhtml={html}\n"))
    for path, mode, text in writes:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, mode, encoding="utf-8") as handle:
                handle.write(text)
        except OSError as err:
            raise errors.OutputError(f"cannot write {path}: {err.strerror or type(err).__name__}.") from None


def post_comment(env: Mapping[str, str], inputs: Inputs, pr: PullRequest | None, body: str, log: Log) -> int:
    """Create or update the sticky comment; 0, or the exit code of a GitHub failure other than a fork's 403."""
    from hfmem.github.rest import GitHub

    if pr is None:
        log(f"not a pull request event ({env.get('GITHUB_EVENT_NAME') or 'unknown'}): "
            "the table is in the job summary only.")
        return errors.ExitCode.OK
    if not inputs.token:
        log("no GitHub token (input `token`): the table is in the job summary only.")
        return errors.ExitCode.OK
    repository = env.get("GITHUB_REPOSITORY", "")
    if not _REPOSITORY.match(repository):
        raise errors.InvalidInputError(f"GITHUB_REPOSITORY {repository!r} is not owner/name.")
    github = GitHub(env.get("GITHUB_API_URL") or "https://api.github.com", inputs.token, repository)
    try:
        done, comment = github.upsert_comment(pr.number, MARKER, body)
    except errors.GitHubApiError as err:
        if err.status == 403:
            why = ("a pull request from a fork gets a read-only token" if pr.fork
                   else "the token lacks pull-requests: write")
            log(f"cannot comment on pull request #{pr.number} (HTTP 403: {why}); the table is in the job summary only.")
            return errors.ExitCode.OK
        log.error(str(err))
        return err.exit_code
    finally:
        github.close()
    log(f"{done} the comment on pull request #{pr.number}: {comment.get('html_url') or comment.get('id')}")
    return errors.ExitCode.OK


def run(env: Mapping[str, str], report_fn: ReportFn | None = None, log: Log | None = None) -> int:
    """The whole Action; returns the exit status (one line on any error, never a traceback)."""
    log = log or Log()
    log.secrets += [get_input(env, "token"), get_input(env, "hf-token"), env.get("GITHUB_TOKEN", "")]
    try:
        workspace = Path(env.get("GITHUB_WORKSPACE") or os.getcwd())
        inputs = read_inputs(env, workspace)
        pr = read_event(env)
        if report_fn is None:
            report_fn = default_report_fn(inputs)
        items = build_items(inputs, pr, workspace, report_fn, log)
        problems = failures(items, inputs.fail_on)
        settings = settings_line(inputs)
        end = footer(env, inputs.artifact)
        summary = log.redact(render(items, settings, SUMMARY_BUDGET, footer=end, problems=problems))
        body = log.redact(render(items, settings, COMMENT_BUDGET, header=MARKER, footer=end, problems=problems))
        data = {"hfmem_version": __version__, "pull_request": pr.number if pr else None,
                "inputs": {k: v for k, v in inputs.__dict__.items() if k not in {"token", "hf_token"}},
                "items": [item.to_dict() for item in items], "failures": problems}
        write_outputs(env, summary, json.loads(log.redact(json.dumps(data))), log.redact(html_page(items)), log)
        status = post_comment(env, inputs, pr, body, log)
        if problems:
            shown = "; ".join(problems[:5]) + (f"; and {len(problems) - 5} more" if len(problems) > 5 else "")
            failed = errors.DoesNotFitError(f"fail-on ({', '.join(inputs.fail_on)}): {shown}")
            if status == errors.ExitCode.OK:
                raise failed
            log.error(str(failed))  # still said, but a GitHub failure's code wins: the comment is missing
        return status
    except (Exception, KeyboardInterrupt) as err:  # hfmem's errors, Ctrl-C (130), and bugs: still one line
        code, message = errors.classify(err)
        if code is errors.ExitCode.INTERNAL and errors.debugging():
            raise
        log.error(message)
        return code


def default_report_fn(inputs: Inputs) -> ReportFn:
    """`build_report` with the inputs' hf-token and Plan (training settings, methods, GPUs)."""
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.memory.settings import Method, Serving, TrainingSettings
    from hfmem.reporting.plan import Plan, build_report

    hub = HubSettings.from_env(token=inputs.hf_token or None)
    methods = tuple(m for m in inputs.methods if m != SERVE) or METHODS  # serve alone: beside the default methods
    method = cast(Method, methods[0])  # read_inputs checked it
    serving = Serving(engine=inputs.engine, context=inputs.context or Serving().context)
    training = TrainingSettings(method=method, seq_len=inputs.seq_len, micro_batch_size=inputs.batch_size,
                                serving=serving)
    plan = Plan(training=training.validated(), methods=methods, gpus=resolve_gpus(inputs.gpus),
                tokens=inputs.tokens, prices=inputs.prices, serve=SERVE in inputs.methods)
    return lambda ref: build_report(ref, hub, plan, curves=True)  # the HTML page's curves
