"""docs/settings.md's table is generated from the settings' metadata (tests/test_readme.py checks the page)."""

from __future__ import annotations

from hfmem.cli.options import plan_flags
from hfmem.constants import DEFAULT_SEQ_LEN
from hfmem.cli.reference import table


def test_the_table_has_a_row_per_flag_with_its_spellings_default_and_values() -> None:
    rows = table().splitlines()[2:]
    assert len(rows) == len(plan_flags())
    for flag, row in zip(plan_flags(), rows):
        assert row.startswith("| " + " ".join(f"`{n}`" for n in flag.names) + " |")
    text = "\n".join(rows)
    assert "| `--batch-size` `-b` | `1` | an integer >= 1 |" in text
    assert "| `--loss-upcast/--no-loss-upcast` | on | on or off |" in text
    assert f"| `--seq-len` | {DEFAULT_SEQ_LEN}, or the model's maximum if smaller |" in text
    assert "`amp-bf16` (`amp_bf16`)" in text and "`adamw_foreach` (`adamw_torch`, `adam`, `torch_adamw`)" in text
