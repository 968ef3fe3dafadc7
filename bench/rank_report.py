"""How the sharded-run benches print one case: hfmem's terms, then each rank's measured peak and what was alive."""

from __future__ import annotations

from typing import Any


def print_case(title: str, terms: dict[str, int], shown: tuple[str, ...], ranks: list[dict[str, Any]],
               top: int = 12) -> None:
    """The case's predicted terms, and per rank its peak, the op it happened at, the error and the largest entries."""
    print(f"== {title}")
    print("   predicted: " + ", ".join(f"{k} {terms[k]:,}" for k in shown))
    for rank, result in enumerate(ranks):
        error = terms["allocated_peak"] / result["peak"] - 1
        print(f"   rank {rank}: measured {result['peak']:,} at {result['when']}, predicted "
              f"{terms['allocated_peak']:,}, error {error:+.1%}")
        for name, n in result["breakdown"][:top]:
            print(f"      {n:>12,}  {name.replace('base_model.model.', '')}")
