"""The estimate flags shared by `hfmem MODEL` and `hfmem scan`, built from TrainingSettings' fields, and the Plan.

Every settings field is a flag (its spelling, check and default from its `setting(...)` metadata, its help from
its docstring; a Group's fields are flags of their own); --gpu, --framework and --config are the plan's own. A
setting's value comes from the highest of four layers: its default, the --framework profile (or the framework the
config file implies), the --config file, an explicit flag; the plan records which layer set each one.
Import-light: no torch, transformers or huggingface_hub until a Plan is made.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Annotated, Any

import typer

from hfmem.errors import InvalidInputError
from hfmem.memory.fields import (
    MODEL_PANEL,
    PANELS,
    SHARDING_PANEL,
    TIME_PANEL,
    Boolean,
    Code,
    Group,
    OrNone,
    Setting,
    field_docs,
    setting_of,
)
from hfmem.memory.settings import ALL_METHODS, METHOD_ALIASES, METHODS, SERVE, TrainingSettings
from hfmem.reporting.budget import budget_tokens, parse_prices


@dataclass(frozen=True)
class Flag:
    """One estimate flag: the parameter it fills, its spellings, CLI type and default, its --help panel and its
    documentation."""

    param: str
    names: tuple[str, ...]
    kind: Any
    default: Any
    panel: str
    """The PANELS group --help lists it under."""
    doc: str
    describe: Callable[[Code], str]
    """What it accepts, in words (a Code writes the literals)."""
    shown: str | None = None
    """The default in words, where the value does not say it."""

    @property
    def help(self) -> str:
        """The --help text: the docstring, and what a non-switch flag accepts."""
        return self.doc if self.kind is bool else f"{self.doc} Accepts: {self.describe(str)}."

    def parameter(self) -> inspect.Parameter:
        """The flag as a keyword parameter that typer reads: None when not given, so a lower layer can set it."""
        shown = self.shown or (None if self.default is None else str(self.default).lower()
                               if isinstance(self.default, bool) else str(self.default))
        option = typer.Option(*self.names, help=self.help, show_default=shown or False, rich_help_panel=self.panel)
        return inspect.Parameter(self.param, inspect.Parameter.KEYWORD_ONLY, default=None,
                                 annotation=Annotated[self.kind | None, option])


def _gpu_examples(code: Code) -> str:
    examples = ", ".join(map(code, ("h100", "rtx4090", "a100-40gb")))
    return f"catalogue names or aliases ({examples}...) or {code('name=GiB')}"


GPU_FLAG = Flag("gpu", ("--gpu", "-g"), list[str], None, SHARDING_PANEL,
                "GPUs to fit against (repeatable or comma-separated).", _gpu_examples, shown="the whole catalogue")


TOKENS_FLAG = Flag("tokens", ("--tokens",), float, None, TIME_PANEL,
                   "Training tokens to time and price each fitting setup for (e.g. 2e9): wall hours, GPU-hours and, "
                   "with --price, the cost.", lambda code: "a positive number", shown="none: step time only")
EPOCHS_FLAG = Flag("epochs", ("--epochs",), float, None, TIME_PANEL,
                   "Epochs over --dataset-tokens: the token budget is their product (instead of --tokens).",
                   lambda code: "a positive number", shown="none")
DATASET_TOKENS_FLAG = Flag("dataset_tokens", ("--dataset-tokens",), float, None, TIME_PANEL,
                           "Tokens in one pass over the training data (with --epochs).",
                           lambda code: "a positive number", shown="none")
RANKINGS = ("cost", "time", "gpus")
RANK_FLAG = Flag("rank", ("--rank",), str, None, TIME_PANEL,
                 "Order the timed setups (fitting cells and the suggested GPU counts) by cost, time or GPU count, "
                 "best first (fit_ranking in the JSON, the first few under the table).",
                 lambda code: ", ".join(map(code, RANKINGS)), shown="none")
PRICE_FLAG = Flag("price", ("--price",), list[str], None, TIME_PANEL,
                  "USD per GPU-hour of a catalogue GPU, GPU=USD (repeatable): replaces its dated default price "
                  "(`hfmem gpus` lists them with their sources).",
                  lambda code: f"{code('h100=2.5')}, {code('a100-80gb=1.6')}...", shown="the default table")


def _frameworks(code: Code) -> str:
    from hfmem.frameworks import PROFILES

    return ", ".join(map(code, PROFILES))


FRAMEWORK_FLAG = Flag("framework", ("--framework",), str, None, MODEL_PANEL,
                      "Assume this training framework's own defaults (each cited in the JSON); a --config value or a "
                      "flag wins.", _frameworks, shown="the config file's framework, else hfmem's defaults")
CONFIG_FLAG = Flag("config", ("--config",), str, None, MODEL_PANEL,
                   "A training config file to read the settings (and the model, when MODEL is not given) from; a "
                   "flag wins over it.", lambda code: "a torchtune, Axolotl or LLaMA-Factory YAML, a DeepSpeed JSON, "
                   "an accelerate config YAML, TrainingArguments/TRL JSON or YAML", shown="none")


def setting_flag(name: str, default: Any, setting: Setting, doc: str) -> Flag:
    """The flag of one settings field: --field-name (a switch: --field-name/--no-field-name) unless it names its own."""
    dashed = name.replace("_", "-")
    check = setting.check.inner if isinstance(setting.check, OrNone) else setting.check
    switch = isinstance(check, Boolean)
    names = setting.flags or ((f"--{dashed}/--no-{dashed}",) if switch else (f"--{dashed}",))
    kind = list[str] if setting.many else setting.check.cli_type
    cli_default = None if setting.many else setting.check.cli_value(default)
    return Flag(name, names, kind, cli_default, setting.panel, doc, setting.check.describe, setting.shown)


def settings_flags(cls: type) -> list[Flag]:
    """A flag per field of a settings dataclass, in field order; a Group's fields in its place."""
    docs = field_docs(cls)
    flags: list[Flag] = []
    for f in fields(cls):
        setting = setting_of(f)
        if isinstance(setting.check, Group):
            flags += settings_flags(setting.check.cls)
        else:
            flags.append(setting_flag(f.name, f.default, setting, docs[f.name]))
    return flags


@functools.cache
def plan_flags() -> tuple[Flag, ...]:
    """Every estimate flag, in --help order: the framework and config file, the settings', --gpu, the budget."""
    return (FRAMEWORK_FLAG, CONFIG_FLAG, *settings_flags(TrainingSettings), GPU_FLAG, TOKENS_FLAG, EPOCHS_FLAG,
            DATASET_TOKENS_FLAG, PRICE_FLAG, RANK_FLAG)


def with_plan_flags(command: Callable[..., None]) -> Callable[..., None]:
    """Give a typer command every estimate flag; it receives them validated, as one `plan` argument.

    One definition serves `hfmem MODEL` and `hfmem scan`, so the two can never drift apart. --help lists the
    options panel by panel in PANELS order (those without one first), in declaration order within a panel.
    """
    own = [p for p in inspect.signature(command, eval_str=True).parameters.values() if p.name != "plan"]
    flags = plan_flags()

    @functools.wraps(command)
    def wrapper(**kwargs: Any) -> None:
        values = {flag.param: kwargs.pop(flag.param) for flag in flags}
        command(plan=make_plan(**values), **kwargs)

    own = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own]  # typer passes every value by name
    parameters = sorted(own + [flag.parameter() for flag in flags], key=_panel_rank)
    wrapper.__signature__ = inspect.Signature(parameters)  # type: ignore[attr-defined]  # what typer reads
    wrapper.__annotations__ = {p.name: p.annotation for p in parameters}
    return wrapper


def _panel_rank(parameter: inspect.Parameter) -> int:
    """Where a parameter's panel comes in PANELS (-1: none, the MODEL argument and --version)."""
    panel = next((getattr(info, "rich_help_panel", None) for info in getattr(parameter.annotation, "__metadata__", ())),
                 None)
    return PANELS.index(panel) if panel else -1


def split_list(values: list[str] | None) -> tuple[str, ...]:
    """Repeatable options that also accept comma-separated values."""
    return tuple(v.strip() for value in values or [] for v in value.split(",") if v.strip())


def build_settings(cls: type, values: dict[str, Any]) -> Any:
    """A settings dataclass from values named like its fields (a Group's fields flattened in); a missing one keeps
    its default."""
    kwargs = {}
    for f in fields(cls):
        check = setting_of(f).check
        if isinstance(check, Group):
            kwargs[f.name] = build_settings(check.cls, values)
        elif f.name in values:
            kwargs[f.name] = values[f.name]
    return cls(**kwargs)


def make_plan(method: list[str] | None = None, gpu: list[str] | None = None, framework: str | None = None,
              config: str | None = None, tokens: float | None = None, epochs: float | None = None,
              dataset_tokens: float | None = None, price: list[str] | None = None, rank: str | None = None,
              **values: Any):
    """Validate the layers into a Plan; every bad value is an InvalidInputError naming the flag's value.

    `values`: every other flag, by the name of the settings field it sets; None where the flag was not given.
    """
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.reporting.plan import Plan

    layers = Layers.of(framework, config)
    given = {name: value for name, value in values.items() if value is not None}
    named = tuple(METHOD_ALIASES.get(m.lower(), m.lower()) for m in split_list(method))
    serve = SERVE in named
    named = tuple(m for m in named if m != SERVE)  # serve alone: the serving column beside the default methods
    chosen = named or layers.methods or METHODS
    unknown = [m for m in chosen if m not in ALL_METHODS]
    if unknown:
        raise InvalidInputError(f"--method must be one of {', '.join(ALL_METHODS)} or {SERVE}; got {unknown[0]!r}.")
    merged, sources = layers.merged(given)
    training = build_settings(TrainingSettings, merged | {"method": chosen[0]}).validated()
    notes = layers.notes
    unset = "num_gpus" not in sources and training.model_parallel == 1  # a layout's product is its GPU count
    if training.resolved_sharding not in {"none", "ddp"} and unset:
        notes += (f"sharding {training.resolved_sharding} ({sources.get('sharding', 'flag')}) over 1 GPU: the GPU "
                  "count is not set; give --num-gpus",)
    return Plan(training=training, methods=tuple(dict.fromkeys(chosen)), gpus=resolve_gpus(split_list(gpu)),
                method_settings=layers.method_defaults(given), sources=sources, framework=layers.framework_dict(),
                config=layers.config_dict(), notes=notes, model=layers.model,
                tokens=budget_tokens(tokens, epochs, dataset_tokens),
                rank=_ranking(rank),
                prices=parse_prices(split_list(price)), serve=serve)


def _ranking(rank: str | None) -> str | None:
    if rank is not None and rank.lower() not in RANKINGS:
        raise InvalidInputError(f"--rank must be one of {', '.join(RANKINGS)}; got {rank!r}.")
    return rank and rank.lower()


@dataclass(frozen=True)
class Layers:
    """The framework profile and the config file under the explicit flags, lowest first."""

    profile: Any = None
    """A hfmem.frameworks Profile, or None."""
    file: Any = None
    """A hfmem.configs ConfigFile, or None."""

    @classmethod
    def of(cls, framework: str | None, config: str | None) -> Layers:
        """Read the config file and look up the profile (--framework, else the framework the file implies)."""
        file = None
        if config is not None:
            from hfmem.configs import read_config

            file = read_config(config)
        name = framework or (file.framework if file else None)
        if name is None:
            return cls(None, file)
        from hfmem.frameworks import profile

        return cls(profile(name), file)

    @property
    def methods(self) -> tuple[str, ...]:
        """The method the config file trains with, if it says."""
        method = self.file.values.get("method") if self.file else None
        return (str(method).lower(),) if method else ()

    @property
    def model(self) -> str | None:
        return self.file.model if self.file else None

    @property
    def notes(self) -> tuple[str, ...]:
        """What the config file holds that hfmem does not read or cannot model, one warning each."""
        if not self.file:
            return ()
        out = []
        if self.file.unknown:
            out.append(f"{self.file.path}: keys not read (unknown to hfmem): {', '.join(self.file.unknown)}")
        out += [f"{self.file.path}: {key} changes memory but hfmem does not model it" for key in self.file.unmodelled]
        out += [f"{self.file.path}: {key} is not taken from the file: {why}"
                for key, why in self.file.unresolved.items()]
        return tuple(out)

    def merged(self, given: dict[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
        """The values set above the defaults and, for each, the layer that set it."""
        merged: dict[str, Any] = {}
        sources: dict[str, str] = {}
        if self.profile:
            for default in self.profile.defaults:
                merged[default.field], sources[default.field] = default.value, f"framework {self.profile.name}"
        if self.file:
            for name, value in self.file.values.items():
                if name != "method":
                    where = self.file.sources.get(name, name)
                    merged[name], sources[name] = value, f"config {self.file.path} ({where})"
        for name, value in given.items():
            merged[name], sources[name] = value, "flag"
        return merged, sources

    def method_defaults(self, given: dict[str, Any]) -> dict[str, dict[str, Any]]:
        """The profile's defaults for one method only, where neither the file nor a flag set that field."""
        if not self.profile:
            return {}
        taken = set(given) | set(self.file.values if self.file else ())
        found = {m: {d.field: d.value for d in ds if d.field not in taken}
                 for m, ds in self.profile.method_defaults.items()}
        return {m: over for m, over in found.items() if over}

    def framework_dict(self) -> dict[str, Any] | None:
        """The profile as the JSON shows it: name, title, versions and every default with its source."""
        if not self.profile:
            return None
        p = self.profile
        defaults = [{"field": d.field, "value": d.value, "source": d.source, "why": d.why, "method": method}
                    for method, ds in (("all", p.defaults), *p.method_defaults.items()) for d in ds]
        return {"name": p.name, "title": p.title, "versions": p.versions, "defaults": defaults}

    def config_dict(self) -> dict[str, Any] | None:
        if not self.file:
            return None
        f = self.file
        return {"path": f.path, "format": f.format, "framework": f.framework, "model": f.model,
                "values": f.values, "sources": f.sources, "unknown": list(f.unknown), "unmodelled": list(f.unmodelled),
                "unresolved": f.unresolved, "architecture": f.architecture}
