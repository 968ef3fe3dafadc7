"""Build a model on the meta device and take its exact inventory: parameters per component and linear layers.

torch and transformers are imported here only, and only when a build is asked for, so commands that
hit the cache never pay for them. Remote code is never run: only classes shipped in transformers.
"""

from __future__ import annotations

import re
import threading
from typing import Any

from hfmem.errors import MalformedConfigError, UnsupportedArchitectureError
from hfmem.model.inventory import COMPONENTS, Inventory, LinearGroup

# transformers resolves its names lazily, on first attribute access; a thread that reads one while another is
# still importing the package can find it missing, so the import and that first read happen under one lock.
_IMPORT_LOCK = threading.Lock()
_VISION = re.compile(r"(^|\.)(vision_tower|vision_model|visual|vision_encoder|image_encoder|audio_tower"
                     r"|encoder_vision)(\.|$)")
_PROJECTOR = re.compile(r"(^|\.)(multi_modal_projector|mm_projector|connector|image_newline)(\.|$)")
_MOE_BLOCK = re.compile(r"SparseMoe|Mo[Ee](Block|Layer)?$")
"""A mixture-of-experts block's class (MixtralSparseMoeBlock, DeepseekV3MoE, Llama4TextMoe, GraniteMoeMoE), not a class
whose model name holds "Moe" (Qwen3MoeAttention, Qwen2MoeMLP: attention, and the shared expert's MLP)."""


def _component(name: str, chain: list[str], is_output: bool, is_embedding: bool) -> str:
    """Classify a parameter by its module path and the class names of the modules holding it."""
    if _VISION.search(name):
        return "vision"
    if _PROJECTOR.search(name):
        return "projector"
    if is_embedding:  # first, so a tied input/output matrix counts as embeddings, once
        return "embeddings"
    if is_output:
        return "head"
    inner = chain[-1]
    if "Norm" in inner or re.search(r"(^|\.)(ln_\w+|\w*norm\w*)\.(weight|bias)$", name, re.I):
        return "norms"
    if re.search(r"(^|\.)experts\.", name):  # a routed expert kept as a module of its own (a ModuleList of MLPs)
        return "experts"
    for cls in reversed(chain):
        if "Router" in cls or (cls[-4:] == "Gate" and "Moe" in cls):
            return "router"
        if "Experts" in cls or "Expert" in cls:
            return "experts"
        if _MOE_BLOCK.search(cls):
            return "router" if re.search(r"\.(gate|router)\.", name + ".") else "experts"
        if "Mamba" in cls:
            return "ssm"
        if "Attention" in cls:
            return "attention"
        if re.search(r"MLP|FeedForward|FFN|Dense(ReluDense|ActDense|GatedActDense)|Intermediate|Output$", cls):
            return "mlp"
    if re.search(r"(^|\.)(attn|attention|self_attn|mixer)\.", name):
        return "attention"
    if re.search(r"(^|\.)(mlp|ffn|feed_forward|fc1|fc2|fc_in|fc_out|c_fc|dense_h_to_4h|dense_4h_to_h)\.", name):
        return "mlp"
    return "other"


def _model_class(config: Any, transformers: Any) -> Any:
    """The transformers class named by `architectures`, else the Auto mapping for the model type."""
    for name in getattr(config, "architectures", None) or []:
        cls = getattr(transformers, name, None)
        if cls is not None:
            return cls
    for auto in ("AutoModelForCausalLM", "AutoModelForSeq2SeqLM", "AutoModelForImageTextToText", "AutoModel"):
        mapping = getattr(transformers, auto)._model_mapping
        if type(config) in mapping:
            return mapping[type(config)]
    raise UnsupportedArchitectureError(f"transformers has no model class for `{config.model_type}`.")


def _config_errors() -> tuple[type[Exception], ...]:
    """What transformers raises on configs it cannot make sense of (hfmem reports them as MalformedConfigError).

    A function, so that importing this module does not import huggingface_hub (whose error this includes).
    """
    from huggingface_hub.errors import StrictDataclassError

    return TypeError, ValueError, KeyError, AttributeError, IndexError, ArithmeticError, StrictDataclassError


def load_transformers() -> Any:
    """transformers, with accelerate and the mapping the build reads first, imported by one thread at a time."""
    with _IMPORT_LOCK:
        import accelerate  # noqa: F401 -- imported under the lock, before transformers looks for it
        import transformers

        transformers.CONFIG_MAPPING  # noqa: B018 -- resolves the lazy auto-mapping submodule under the lock
        return transformers


def make_config(config_dict: dict[str, Any]) -> Any:
    """A transformers config object for the dict; unknown model types raise UnsupportedArchitectureError."""
    transformers = load_transformers()
    if transformers.logging.get_verbosity() != transformers.logging.ERROR:  # setting it clears every logger's cache
        transformers.logging.set_verbosity_error()  # config-upgrade chatter is not for hfmem's users
    model_type = config_dict.get("model_type")
    if model_type not in transformers.CONFIG_MAPPING:
        raise UnsupportedArchitectureError(
            f"model_type `{model_type}` is not in transformers {transformers.__version__} "
            "(remote code is never run)."
        )
    rest = {k: v for k, v in config_dict.items() if k not in {"model_type", "auto_map"}}
    try:
        config = transformers.AutoConfig.for_model(model_type, **rest)
    except _config_errors() as err:
        reason = " ".join(str(err.__cause__ or err).split())
        raise MalformedConfigError(f"config.json is not a valid `{model_type}` config: {reason}") from None
    config._attn_implementation = "eager"  # never probe for optional kernels during a meta build
    return config


def normalised_config(config: Any) -> dict[str, Any]:
    """A config object (from make_config) with transformers' defaults filled in, nested parts too, as plain JSON."""
    import json

    try:
        return json.loads(config.to_json_string(use_diff=False))
    except _config_errors() as err:
        raise MalformedConfigError(f"config.json is not a valid config: {' '.join(str(err).split())}") from None


def build_inventory(config: dict[str, Any] | Any) -> Inventory:
    """Instantiate the model on the meta device (no memory for weights or buffers) and count it.

    `config` is a config.json dict, or a config object make_config already built (not built twice).
    """
    transformers = load_transformers()
    import torch
    from accelerate import init_empty_weights

    config = make_config(config) if isinstance(config, dict) else config
    cls = _model_class(config, transformers)
    try:
        with init_empty_weights(include_buffers=True):
            model = cls._from_config(config)
    except (ValueError, TypeError, AttributeError, KeyError, RuntimeError, ArithmeticError, IndexError) as err:
        raise MalformedConfigError(f"could not build {cls.__name__} from config.json: {err}") from None
    return _inventory(model, torch)


def _inventory(model: Any, torch: Any) -> Inventory:
    output = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    output_weight = getattr(output, "weight", None)
    classes = {name: type(module).__name__ for name, module in model.named_modules()}

    by_component = dict.fromkeys(COMPONENTS, 0)
    seen: dict[int, str] = {}
    tied: list[tuple[str, str]] = []
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in seen:
            tied.append((name, seen[id(param)]))
            continue
        seen[id(param)] = name
        module_path = name.rsplit(".", 1)[0] if "." in name else ""
        chain = [classes.get(".".join(module_path.split(".")[:i]), "") for i in range(module_path.count(".") + 2)]
        module = model.get_submodule(module_path) if module_path else model
        component = _component(
            name,
            chain,
            is_output=param is output_weight or (output is not None and module is output),
            is_embedding=isinstance(module, torch.nn.Embedding),
        )
        by_component[component] += param.numel()

    groups: dict[tuple, int] = {}
    for path, module in model.named_modules():
        leaf = path.rsplit(".", 1)[-1]
        chain = [classes.get(path, ""), *[classes.get(p, "") for p in _parents(path)][::-1]]
        component = _component(path + ".weight", chain, is_output=module is output, is_embedding=False)
        if isinstance(module, torch.nn.Linear):
            key = (leaf, component, module.in_features, module.out_features, "linear", module.bias is not None)
            groups[key] = groups.get(key, 0) + 1
        elif type(module).__name__ == "Conv1D":
            out_f, in_f = module.weight.shape[1], module.weight.shape[0]
            key = (leaf, component, in_f, out_f, "conv1d", module.bias is not None)
            groups[key] = groups.get(key, 0) + 1
        elif "Expert" in type(module).__name__:
            for pname, param in module.named_parameters(recurse=False):
                if param.dim() == 3:
                    experts, out_f, in_f = param.shape
                    key = (f"{leaf}.{pname}", "experts", int(in_f), int(out_f), "experts", False)
                    groups[key] = groups.get(key, 0) + int(experts)
    linears = tuple(
        LinearGroup(name=k[0], component=k[1], in_features=k[2], out_features=k[3], count=n, kind=k[4], has_bias=k[5])
        for k, n in groups.items()
    )
    return Inventory(
        model_class=type(model).__name__,
        total=sum(by_component.values()),
        by_component={k: v for k, v in by_component.items() if v},
        linears=linears,
        tied=tuple(tied),
        buffers=_buffers(model),
    )


def _buffers(model: Any) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name, buffer in model.named_buffers():
        leaf = name.rsplit(".", 1)[-1]
        counts[leaf] = counts.get(leaf, 0) + buffer.numel()
    return counts


def _parents(path: str) -> list[str]:
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, -1, -1)]
