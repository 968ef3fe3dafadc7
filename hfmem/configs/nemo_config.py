"""A NeMo 2 recipe as YAML data: MegatronStrategy, the precision plugin, Megatron's OptimizerConfig, the data module.

The strategy and plugins sit under `trainer` (NeMo-Run's serialised recipe) or at the top level (NeMo's example
YAML configs); a value written as an OmegaConf interpolation (`${...}`) is not followed and is reported. Absent keys
take MegatronStrategy's and OptimizerConfig's defaults: TP, PP, CP 1, no sequence parallelism,
Megatron's DDP without the distributed optimizer (OptimizerConfig.use_distributed_optimizer False), gradients reduced
in fp32 (MegatronMixedPrecision's grad_reduce_in_fp32 True, nemo/lightning/pytorch/plugins/mixed_precision.py at
8cfedd7, L109).
"""

from __future__ import annotations

from typing import Any

from hfmem.configs.draft import Draft
from hfmem.configs.megatron_args import full_recompute

PRECISIONS = {"bf16-mixed": "bf16", "bf16": "bf16", "16-mixed": "fp16", "fp16-mixed": "fp16", "32": "fp32",
              "32-true": "fp32", "bf16-true": "bf16-pure"}
OPTIMIZERS = {"adam": "adamw", "sgd": "sgd_momentum"}
LAYOUT = (("tensor_model_parallel_size", "tp"), ("pipeline_model_parallel_size", "pp"),
          ("context_parallel_size", "cp"), ("expert_model_parallel_size", "ep"))
IGNORED = ("name", "callbacks", "model.llm.pretrained_model", "resume", "logger", "log", "max_time_per_run",
           "trainer.max_steps", "trainer.max_epochs", "trainer.log_every_n_steps", "trainer.val_check_interval",
           "trainer.accelerator",
           "trainer.num_sanity_val_steps", "trainer.limit_val_batches", "trainer.limit_test_batches",
           "trainer.use_distributed_sampler", "trainer.sync_batchnorm", "trainer._target_", "trainer.callbacks",
           "trainer.accumulate_grad_batches", "optim._target_", "optim.lr_scheduler", "optim.config._target_",
           "optim.config.lr", "optim.config.min_lr", "optim.config.weight_decay", "optim.config.clip_grad",
           "optim.config.adam_beta1", "optim.config.adam_beta2", "optim.config.adam_eps", "optim.config.bf16",
           "optim.config.fp16", "optim.config.optimizer", "optim.config.use_distributed_optimizer", "data",
           "model.llm._target_", "model.llm.config._target_", "model.freeze_language_model",
           "model.freeze_speech_model", "model.freeze_modality_adapter")
"""Keys that do not change training memory, or that are read below (accumulate_grad_batches must be 1 under
MegatronStrategy: the data module's global batch sets the micro-batches; the data module's other keys are its
datasets, read only for micro-batch, global batch and sequence length)."""
EXTRA_MODELS = ("model.speech_encoder", "model.modality_adapter", "model.vision_model", "model.vision_projection")
"""Encoders and adapters beside the language model (NeMo's speech and vision LMs), which hfmem does not count."""
STRATEGY_KNOWN = ("_target_", "ckpt_async_save", "ckpt_parallel_load", "ckpt_load_optimizer", "ckpt_save_optimizer",
                  "pipeline_dtype", "ddp.check_for_nan_in_grad", "ddp.overlap_grad_reduce",
                  "ddp.overlap_param_gather", "ddp.average_in_collective", "ddp.data_parallel_sharding_strategy",
                  "ddp._target_", "save_ckpt_format", "ckpt_include_optimizer")
PLUGIN_KNOWN = ("_target_", "params_dtype", "pipeline_dtype", "autocast_enabled")


def read(d: Draft) -> tuple[str, str | None]:
    """Map a NeMo 2 recipe YAML into `d`; return the framework and the model it names (none: a config class)."""
    strategy = section(d, "strategy")
    plugins = section(d, "plugins")
    gpus = devices(d)
    for key, field in LAYOUT:
        value = plain(d, f"{strategy}.{key}")
        if value is not None:
            d.set(field, d.integer(f"{strategy}.{key}"), f"{strategy}.{key}")
    virtual = plain(d, f"{strategy}.virtual_pipeline_model_parallel_size")
    if virtual is not None and (d.integer(f"{strategy}.virtual_pipeline_model_parallel_size") or 0) > 1:
        d.set("vpp", virtual, f"{strategy}.virtual_pipeline_model_parallel_size")
        d.set("pp_schedule", "interleaved", f"{strategy}.virtual_pipeline_model_parallel_size")
    if plain(d, f"{strategy}.sequence_parallel") is not None and d.boolean(f"{strategy}.sequence_parallel"):
        d.set("sequence_parallel", "megatron", f"{strategy}.sequence_parallel")
    if plain(d, f"{strategy}.gradient_as_bucket_view") is not None:
        d.set("grad_bucket_view", bool(d.boolean(f"{strategy}.gradient_as_bucket_view")),
              f"{strategy}.gradient_as_bucket_view")
    if d.raw(f"{strategy}.fsdp") is not None:
        d.unmodelled(f"{strategy}.fsdp")  # Megatron FSDP or torch FSDP2 under NeMo
    precision(d, plugins, strategy)
    optimizer(d)
    batches(d, gpus)
    peft(d)
    recompute(d)
    d.unmodelled_if_active(*EXTRA_MODELS)
    d.know(*IGNORED, *(f"{strategy}.{k}" for k in STRATEGY_KNOWN), *(f"{plugins}.{k}" for k in PLUGIN_KNOWN))
    return "nemo", model(d)


def model(d: Draft) -> str | None:
    """The Hugging Face model the recipe starts from: model.llm.pretrained_model, or resume.restore_config.path
    spelled nemo:// or hf:// (NeMo's import URIs)."""
    named = d.raw("model.llm.pretrained_model")
    if isinstance(named, str) and "${" not in named:
        return named
    path = d.raw("resume.restore_config.path")
    if isinstance(path, str) and path.startswith(("nemo://", "hf://")):
        return path.split("://", 1)[1]
    return None


def section(d: Draft, name: str) -> str:
    """Where the strategy or the plugins are: under `trainer`, else at the top level."""
    return f"trainer.{name}" if isinstance(d.raw(f"trainer.{name}"), dict) else name


def plain(d: Draft, path: str) -> Any:
    """The value at `path`; None when absent or an interpolation (`${...}`), which is reported."""
    value = d.raw(path)
    if isinstance(value, str) and "${" in value:
        d.unresolved_value(path, f"{value} is an OmegaConf interpolation, not followed")
        return None
    return value


def devices(d: Draft) -> int | None:
    """trainer.devices x trainer.num_nodes, where devices is a count (not -1, "auto" or a list)."""
    per_node = plain(d, "trainer.devices")
    nodes = plain(d, "trainer.num_nodes")
    if not isinstance(per_node, int) or isinstance(per_node, bool) or per_node < 1:
        d.know("trainer.devices", "trainer.num_nodes")
        return None
    nodes = nodes if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes > 0 else 1
    d.set("gpus_per_node", per_node, "trainer.devices")
    d.set("num_gpus", per_node * nodes, "trainer.devices x trainer.num_nodes")
    return per_node * nodes


def precision(d: Draft, plugins: str, strategy: str) -> None:
    """The plugin's precision, and grad_reduce_in_fp32 (the plugin's or the DDP config's)."""
    value = plain(d, f"{plugins}.precision")
    if value is not None:
        name = str(value).strip().lower()
        if name not in PRECISIONS:
            raise d.fail(f"{plugins}.precision", f"one of {', '.join(PRECISIONS)}", value)
        d.set("dtype", PRECISIONS[name], f"{plugins}.precision")
        d.default("grad_dtype", "fp32", f"{plugins}.grad_reduce_in_fp32")  # MegatronMixedPrecision's default: True
    for path in (f"{strategy}.ddp.grad_reduce_in_fp32", f"{plugins}.grad_reduce_in_fp32"):
        if plain(d, path) is not None:
            d.set("grad_dtype", "fp32" if d.boolean(path) else "param", path)
    low_precision(d, plugins)


FP8_RECIPES = {"delayed": "fp8-te", "tensorwise": "fp8-te-current", "mxfp8": "mxfp8"}
"""MegatronMixedPrecision's fp8 with its fp8_recipe (default delayed; nemo/lightning/pytorch/plugins/mixed_precision.py
at 8cfedd72, L69-L83, handed to Megatron's TransformerConfig, which builds TE's recipe) as hfmem's dtype; fp4 with
fp4_recipe nvfp4 is NVFP4."""
NEMO_AMAX_HISTORY = 1
"""MegatronMixedPrecision's fp8_amax_history_len default (L77)."""


def low_precision(d: Draft, plugins: str) -> None:
    """The plugin's fp8/fp4 over a bf16 precision: hfmem's low-precision dtype; FP8 parameters are unmodelled."""
    d.know(*(f"{plugins}.{k}" for k in ("fp8", "fp8_recipe", "fp4", "fp4_recipe", "fp8_amax_history_len", "fp8_margin",
                                         "fp8_amax_compute_algo", "fp8_wgrad")))
    d.unmodelled_if_active(f"{plugins}.fp8_params", f"{plugins}.fp8_param_gather", f"{plugins}.fp8_param")
    fp4, fp8 = plain(d, f"{plugins}.fp4"), plain(d, f"{plugins}.fp8")
    if fp4 is None and fp8 is None:
        return
    recipe = str(plain(d, f"{plugins}.fp4_recipe") or "nvfp4") if fp4 is not None else str(
        plain(d, f"{plugins}.fp8_recipe") or "delayed")
    dtype = ("nvfp4" if recipe == "nvfp4" else None) if fp4 is not None else FP8_RECIPES.get(recipe)
    if dtype is None or d.values.get("dtype") not in {"bf16", "bf16-pure"}:
        d.unmodelled(f"{plugins}.fp4_recipe" if fp4 is not None else f"{plugins}.fp8_recipe")
        return
    d.set("dtype", dtype, f"{plugins}.fp4" if fp4 is not None else f"{plugins}.fp8_recipe")
    if dtype == "fp8-te":
        history = plain(d, f"{plugins}.fp8_amax_history_len")
        d.given_or("fp8_amax_history_len", None if history is None else d.integer(f"{plugins}.fp8_amax_history_len"),
                   NEMO_AMAX_HISTORY, f"{plugins}.fp8_amax_history_len")


def optimizer(d: Draft) -> None:
    """Megatron's OptimizerConfig: adam (FusedAdam) or sgd, and the distributed optimizer (ZeRO-1)."""
    name = plain(d, "optim.config.optimizer")
    if name is not None:
        if str(name) in OPTIMIZERS:
            d.set("optimizer", OPTIMIZERS[str(name)], "optim.config.optimizer")
        else:
            d.unmodelled("optim.config.optimizer")
    distributed = plain(d, "optim.config.use_distributed_optimizer")
    if distributed is not None:
        d.set("sharding", "zero1" if d.boolean("optim.config.use_distributed_optimizer") else "ddp",
              "optim.config.use_distributed_optimizer")
    elif d.raw("optim.config") is not None:
        d.set("sharding", "ddp", "optim.config.use_distributed_optimizer (default)")
    d.unmodelled_if_active("optim.config.optimizer_cpu_offload", "optim.config.use_precision_aware_optimizer")


def batches(d: Draft, gpus: int | None) -> None:
    """The data module's micro-batch, sequence and global batch (NeMo's recipes: data.*; its example configs:
    data.common.*); the global batch over micro-batch x DP gives the micro-batches per step."""
    base = "data.common" if isinstance(d.raw("data.common"), dict) else "data"
    micro = plain(d, f"{base}.micro_batch_size")
    if micro is not None:
        d.set("micro_batch_size", d.integer(f"{base}.micro_batch_size"), f"{base}.micro_batch_size")
    for key in ("seq_length", "max_seq_length"):
        if plain(d, f"{base}.{key}") is not None:
            d.set("seq_len", d.integer(f"{base}.{key}"), f"{base}.{key}")
    total = plain(d, f"{base}.global_batch_size")
    if total is None or gpus is None:
        d.know(f"{base}.global_batch_size")
        return
    v = d.values
    dp = max(1, gpus // max(1, v.get("tp", 1) * v.get("pp", 1) * v.get("cp", 1)))
    steps, rest = divmod(d.integer(f"{base}.global_batch_size") or 0, v.get("micro_batch_size", 1) * dp)
    if rest or not steps:
        raise d.fail(f"{base}.global_batch_size", "a multiple of micro_batch_size x data parallel", total)
    d.set("gradient_accumulation_steps", steps, f"{base}.global_batch_size")


def peft(d: Draft) -> None:
    """model.peft or peft: NeMo's LoRA (dim 32 by default) makes the method LoRA; another PEFT is not modelled."""
    path = "model.peft" if isinstance(d.raw("model.peft"), dict) else "peft"
    target = plain(d, f"{path}._target_")
    if target is None:
        return
    if str(target).rsplit(".", 1)[-1] in {"LoRA", "CanonicalLoRA"}:
        d.set("method", "lora", f"{path}._target_")
        rank = plain(d, f"{path}.dim")
        d.given_or("lora_rank", d.integer(f"{path}.dim") if rank is not None else None, 32, f"{path}.dim")
        dropout = plain(d, f"{path}.dropout")
        if dropout is not None:
            d.set("lora_dropout", d.number(f"{path}.dropout"), f"{path}.dropout")
        if d.raw(f"{path}.target_modules") is not None:
            d.unmodelled(f"{path}.target_modules")  # Megatron's fused module names, not Hugging Face's
        d.know(f"{path}.alpha")
    else:
        d.unmodelled(f"{path}._target_")


def recompute(d: Draft) -> None:
    """model.config.recompute_granularity: full (Megatron-core's recompute_method and recompute_num_layers, read as
    Megatron-LM's flags are) or selective."""
    granularity = plain(d, "model.config.recompute_granularity")
    if granularity is None:
        d.know("model.config.recompute_method", "model.config.recompute_num_layers")
        return
    method, layers = plain(d, "model.config.recompute_method"), plain(d, "model.config.recompute_num_layers")
    if granularity == "selective":
        d.set("gradient_checkpointing", "selective", "model.config.recompute_granularity")
    elif granularity == "full":
        full_recompute(d, method, layers, "model.config.recompute_method", "model.config.recompute_num_layers")
    else:
        d.unmodelled("model.config.recompute_granularity")
