"""A token budget and GPU prices as the user gives them (the CLI's --tokens/--epochs/--price, the Action's inputs).
"""

from __future__ import annotations

from hfmem import errors


def budget_tokens(tokens: float | None, epochs: float | None, dataset_tokens: float | None) -> float | None:
    """The token budget: --tokens, or --epochs x --dataset-tokens (one way, not both)."""
    if (epochs is None) != (dataset_tokens is None):
        raise errors.InvalidInputError("--epochs and --dataset-tokens go together (the budget is their product).")
    if epochs is not None and dataset_tokens is not None:
        if tokens is not None:
            raise errors.InvalidInputError("give --tokens or --epochs with --dataset-tokens, not both.")
        if not (0 < epochs < 1e6 and 0 < dataset_tokens < 1e16):
            raise errors.InvalidInputError("--epochs and --dataset-tokens must be positive (tokens below 1e16).")
        tokens = epochs * dataset_tokens
    if tokens is not None and not 0 < tokens < 1e16:
        raise errors.InvalidInputError(f"--tokens must be a positive number of tokens below 1e16; got {tokens!r}.")
    return tokens


def parse_prices(specs: tuple[str, ...]) -> dict[str, float]:
    """--price GPU=USD (catalogue names or aliases) as {catalogue name: USD per GPU-hour}."""
    from hfmem.hardware.gpus import find_gpu

    prices = {}
    for spec in specs:
        name, sep, usd = spec.partition("=")
        try:
            value = float(usd)
        except ValueError:
            value = -1.0
        if not sep or not 0 <= value < 1e6:
            raise errors.InvalidInputError(f"--price takes GPU=USD per GPU-hour (h100=2.5); got {spec!r}.")
        prices[find_gpu(name.strip()).name] = value
    return prices
