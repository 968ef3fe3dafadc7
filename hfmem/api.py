"""hfmem as a library: the same analysis and objects the CLI renders, for notebooks and scripts.

    import hfmem
    est = hfmem.estimate("meta-llama/Llama-2-7b-hf", method="lora", seq_len=4096, micro_batch_size=2)
    est.per_gpu_bytes.total, est.assumptions["attention_kernel_used"]
    fits = hfmem.fit("example:Mixtral-8x7B-v0.1", gpus=["h100", "a100-40gb"], method="qlora")
    cells = hfmem.serve("example:Meta-Llama-3-8B", gpus=["l4"], engine="vllm", context=16000)  # the serving column
    report = hfmem.report("example:gpt2")  # the dict `hfmem MODEL --format json` prints

Settings are TrainingSettings' fields by name (`seq_len`, `micro_batch_size`, `gradient_checkpointing`,
`lora_rank`...); the model is anything `hfmem MODEL` takes. Bad values raise `hfmem.errors.HfmemError`
subclasses with the CLI's one-line messages. Each call reads the model once (hfmem's cache makes repeats cheap).
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any, cast

from hfmem.constants import HUB_TIMEOUT_S

if TYPE_CHECKING:
    from hfmem.memory.estimate import Estimate
    from hfmem.memory.fit import Fit
    from hfmem.memory.settings import Method
    from hfmem.model.load import ModelReport
    from hfmem.serving.report import ServingFit


def analyse_model(model: str, revision: str | None = None, token: str | None = None,
                  timeout: float = HUB_TIMEOUT_S) -> ModelReport:
    """Architecture, exact parameter inventory and cross-check of a model (what every answer starts from)."""
    from hfmem.hub.hub_settings import HubSettings
    from hfmem.hub.modelref import parse_model_ref
    from hfmem.model.load import analyse

    return analyse(parse_model_ref(model, revision), partial(HubSettings.from_env, token=token, timeout=timeout))


def estimate(model: str, method: Method = "full", *, revision: str | None = None, token: str | None = None,
             **settings: Any) -> Estimate:
    """Training memory per GPU for one method, with every term and assumption (`hfmem MODEL --details`)."""
    from hfmem.memory.estimate import estimate as estimate_memory
    from hfmem.memory.settings import TrainingSettings

    analysed = analyse_model(model, revision, token)
    training = TrainingSettings(method=method, **settings).validated()
    return estimate_memory(analysed.architecture, analysed.inventory, training)


def fit(model: str, method: Method | list[Method] | tuple[Method, ...] = ("full", "lora", "qlora"), *,
        gpus: list[str] | tuple[str, ...] | None = None, revision: str | None = None, token: str | None = None,
        **settings: Any) -> list[Fit]:
    """The fit matrix (methods outer, GPUs inner) for the settings: the cells of `hfmem MODEL`'s table, each GPU's at
    its machine's host RAM."""
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.memory.gpu_defaults import matrix_gpus
    from hfmem.memory.settings import TrainingSettings
    from hfmem.reporting.plan import Plan, node_fits

    methods = (method,) if isinstance(method, str) else tuple(method)
    analysed = analyse_model(model, revision, token)
    training = TrainingSettings(method=methods[0], **settings).validated()
    plan = Plan(training=training, methods=methods, sources=dict.fromkeys(settings, "argument"))
    asked = resolve_gpus(gpus) if gpus else ()
    return node_fits(analysed.architecture, analysed.inventory, plan, matrix_gpus(training, asked), {})


def serve(model: str, *, gpus: list[str] | tuple[str, ...] | None = None, revision: str | None = None,
          token: str | None = None, **deployment: Any) -> list[ServingFit]:
    """The serving column per GPU (`hfmem MODEL --method serve`, `hfmem serve`'s verdicts): each a ServingFit with
    its verdict, advice and the engine's estimate; `deployment` is hfmem.serving.capacity.ServingSettings' fields
    (engine, context, concurrency, tp, kv_cache_dtype, quantization...)."""
    from hfmem.hardware.gpus import catalogue, resolve_gpus
    from hfmem.serving.capacity import ServingSettings
    from hfmem.serving.report import serving_fit

    settings = ServingSettings(**deployment)
    analysed = analyse_model(model, revision, token)
    return [serving_fit(analysed, gpu, settings) for gpu in resolve_gpus(gpus) or catalogue()]


def report(model: str, *, methods: tuple[str, ...] | None = None, gpus: list[str] | None = None,
           revision: str | None = None, token: str | None = None, **settings: Any) -> dict[str, Any]:
    """The whole report as `hfmem MODEL --format json` prints it (the scan's and the Action's unit too); "serve"
    among the methods adds the serving column (its deployment: settings' `serving`, a Serving)."""
    from hfmem.hardware.gpus import resolve_gpus
    from hfmem.memory.settings import METHODS, SERVE, TrainingSettings
    from hfmem.reporting.plan import Plan, with_estimates

    asked = tuple(methods or METHODS)
    chosen = tuple(m for m in asked if m != SERVE) or METHODS
    training = TrainingSettings(method=cast("Method", chosen[0]), **settings).validated()  # validated() checks it
    plan = Plan(training=training, methods=chosen, gpus=resolve_gpus(gpus), sources=dict.fromkeys(settings, "argument"),
                serve=SERVE in asked)
    return with_estimates(analyse_model(model, revision, token), plan)
