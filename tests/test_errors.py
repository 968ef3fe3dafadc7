"""Exit codes: one enum for every status, one classifier that the CLI, `hfmem scan` and the Action share."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from hfmem import errors
from hfmem.cli.main import run
from hfmem.errors import ExitCode, classify
from hfmem.github import action
from hfmem.hub.modelref import parse_model_ref
from hfmem.scan.runner import error_record

PACKAGE = Path(__file__).resolve().parent.parent / "hfmem"


def _error_classes(cls: type[errors.HfmemError] = errors.HfmemError) -> list[type[errors.HfmemError]]:
    return [cls] + [sub for child in cls.__subclasses__() for sub in _error_classes(child)]


def test_every_error_class_takes_its_code_from_the_enum() -> None:
    codes = {cls.exit_code for cls in _error_classes()}
    assert all(type(code) is ExitCode for code in codes)
    assert codes | {ExitCode.OK, ExitCode.INTERNAL} == set(ExitCode)  # no code without a class, bar success and bugs


def test_every_code_has_a_one_line_meaning() -> None:
    assert all(code.phrase and "\n" not in code.phrase for code in ExitCode)
    assert len({code.phrase for code in ExitCode}) == len(ExitCode)


def _literal_exit_codes(path: Path) -> list[str]:
    """`exit_code = 3`, `"exit_code": 3`, `exit_code=3` and `sys.exit(3)` with a number instead of an ExitCode."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        values = []
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "exit_code" for t in node.targets):
            values.append(node.value)
        elif isinstance(node, ast.Dict):
            values += [v for k, v in zip(node.keys, node.values)
                       if isinstance(k, ast.Constant) and k.value == "exit_code"]
        elif isinstance(node, ast.Call):
            values += [k.value for k in node.keywords if k.arg == "exit_code"]
            if getattr(node.func, "attr", None) == "exit":
                values += node.args
        found += [f"{path.name}:{v.lineno}" for v in values if isinstance(v, ast.Constant) and isinstance(v.value, int)]
    return found


def test_no_literal_exit_code_outside_the_enum() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) for hit in _literal_exit_codes(path)]
    assert not found, found


def test_literal_exit_code_finder_finds_one(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text('import sys\nexit_code = 7\nsys.exit(3)\nrecord = {"exit_code": 70}\n')
    assert _literal_exit_codes(sample) == ["sample.py:2", "sample.py:3", "sample.py:4"]


def test_classify() -> None:
    assert classify(errors.GatedRepoError("org/x is gated.")) == (ExitCode.GATED_REPO, "org/x is gated.")
    assert classify(KeyboardInterrupt()) == (ExitCode.INTERRUPTED, "interrupted.")
    code, message = classify(ValueError("bad\nvalue"))
    assert code is ExitCode.INTERNAL
    assert message == "internal error (ValueError: bad value); rerun with HFMEM_DEBUG=1 and report it."


def _broken_report(*args: object, **kwargs: object) -> dict:
    raise ZeroDivisionError("boom")


def test_cli_scan_and_action_report_a_bug_alike(monkeypatch, capsys) -> None:
    monkeypatch.delenv("HFMEM_DEBUG", raising=False)
    monkeypatch.setattr("hfmem.reporting.plan.build_report", _broken_report)
    capsys.readouterr()
    code = run(["example:gpt2"])
    cli_message = capsys.readouterr().err.removeprefix("hfmem: error: ").rstrip("\n")
    record = error_record("example:gpt2", {}, ZeroDivisionError("boom"))["error"]
    _, action_message = action.analyse(parse_model_ref("example:gpt2"), _broken_report, {})
    assert code == record["exit_code"] == ExitCode.INTERNAL
    assert cli_message == record["message"] == action_message == classify(ZeroDivisionError("boom"))[1]
    assert record["type"] == "InternalError"


def test_debug_reraises_the_bug(monkeypatch) -> None:
    monkeypatch.setenv("HFMEM_DEBUG", "1")
    monkeypatch.setattr("hfmem.reporting.plan.build_report", _broken_report)
    with pytest.raises(ZeroDivisionError):
        run(["example:gpt2"])
    with pytest.raises(ZeroDivisionError):
        action.analyse(parse_model_ref("example:gpt2"), _broken_report, {})


def test_cli_and_scan_report_an_input_error_alike(capsys) -> None:
    capsys.readouterr()
    code = run(["not a valid id"])
    message = capsys.readouterr().err.removeprefix("hfmem: error: ").rstrip("\n")
    with pytest.raises(errors.InvalidInputError) as caught:
        parse_model_ref("not a valid id")
    record = error_record("not a valid id", {}, caught.value)["error"]
    assert code == record["exit_code"] == ExitCode.INVALID_INPUT
    assert message == record["message"] and record["type"] == "InvalidInputError"
