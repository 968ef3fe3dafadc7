"""A command line's flags as a mapping: a plain argument file, or a shell script that runs pretrain_gpt.py.

The script is read, never run: backslash continuations are joined, comments dropped, each line split as the shell
quotes it, and `$NAME`, `${NAME}` and `${NAME:-default}` replaced where NAME was assigned a literal earlier in the
file (or, for a positional `${1:-x}`, by its default). Conditionals are not evaluated: every flag the file names
is read, the last spelling of a flag winning as argparse's does. Each `--flag` maps to the value tokens that
follow it on its line up to the next flag or a script name (`pretrain_gpt.py`, which ends torchrun's flags): an int
or float where they spell one, a list when several, True when none; a
value still holding an unresolved `$` is kept as written, for the reader to refuse as not literal.
"""

from __future__ import annotations

import re
import shlex
from typing import Any

from hfmem.errors import InvalidInputError

ASSIGNMENT = re.compile(r"^(?:export\s+|local\s+|readonly\s+)?([A-Za-z_][A-Za-z0-9_]*)\+?=(.*)$")
REFERENCE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*|[0-9]+)(?::?-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")
INTEGER = re.compile(r"^[+-]?\d+$")
FLOAT = re.compile(r"^[+-]?(\d+\.\d*|\.\d+|\d+)([eE][+-]?\d+)?$")
SEPARATORS = frozenset({"(", ")", "\\", ";", "&&", "||", "|"})
MAX_FLAGS = 5_000
"""No launch script names more; a file past this is not one."""


def parse(text: str, label: str) -> dict[str, Any]:
    """`--flag` -> value for every flag in the argument list or script `text`; InvalidInputError when it has none."""
    variables: dict[str, str] = {}
    flags: dict[str, Any] = {}
    for line in logical_lines(text):
        try:
            tokens = shlex.split(line, comments=True)
        except ValueError:  # an unbalanced quote: a line of shell this reader does not follow
            continue
        if not tokens:
            continue
        assigned = ASSIGNMENT.match(" ".join(tokens[:2]) if tokens[0] in {"export", "local", "readonly"}
                                    else tokens[0])
        if assigned and not assigned.group(2).startswith("("):
            value = substitute(assigned.group(2), variables)
            if "$" not in value and "`" not in value:
                variables[assigned.group(1)] = value
            else:
                variables.pop(assigned.group(1), None)
            continue
        read_flags([substitute(t, variables) for t in tokens], flags)
        if len(flags) > MAX_FLAGS:
            raise InvalidInputError(f"{label} names more than {MAX_FLAGS:,} flags; no launch script does.")
    if not flags:
        raise InvalidInputError(f"{label} holds no --flags; expected a Megatron-LM argument list or launch script, "
                                "or a .yaml, .json or .toml training config.")
    return flags


def logical_lines(text: str) -> list[str]:
    """The text's lines with backslash-newline continuations joined."""
    return re.sub(r"\\\r?\n", " ", text).splitlines()


def substitute(token: str, variables: dict[str, str]) -> str:
    """`token` with each reference to a literal variable replaced; a positional one takes its default."""
    def replace(match: re.Match[str]) -> str:
        name = match.group(1) or match.group(3)
        if name in variables:
            return variables[name]
        if match.group(2) is not None and (name.isdigit() or name not in variables):
            return match.group(2).strip("\"'")
        return match.group(0)

    return REFERENCE.sub(replace, token)


def read_flags(tokens: list[str], flags: dict[str, Any]) -> None:
    """Each `--flag` of one line with the value tokens after it (a quoted "--flag value" is split apart)."""
    words: list[str] = []
    for token in tokens:
        if token.startswith("--") and " " in token:
            words += token.split()
        elif token.endswith(("=(", ".py")) or token in SEPARATORS:  # a script name ends the launcher's flags
            words.append(")")
        else:
            words.append(token)
    flag: str | None = None
    values: list[Any] = []
    for word in [*words, ")"]:
        if word.startswith("--") or word in SEPARATORS:
            if flag is not None:
                flags[flag] = True if not values else values[0] if len(values) == 1 else values
            flag, values = (word.split("=", 1)[0], []) if word.startswith("--") and len(word) > 2 else (None, [])
            if flag is not None and "=" in word:
                values.append(scalar(word.split("=", 1)[1]))
        elif flag is not None:
            values.append(scalar(word))


def scalar(word: str) -> Any:
    """An int or float where the word spells one, else the word."""
    if INTEGER.match(word):
        return int(word)
    if FLOAT.match(word):
        return float(word)
    return word
