"""MODEL arguments: Hub ids are validated before any URL is built; paths and examples resolve locally."""

import pytest

from hfmem.errors import InvalidInputError
from hfmem.hub.modelref import examples, parse_model_ref


@pytest.mark.parametrize("text, name, revision", [
    ("meta-llama/Llama-2-70b-hf", "meta-llama/Llama-2-70b-hf", None),
    ("gpt2", "gpt2", None),
    ("google/gemma-2b-it@float16", "google/gemma-2b-it", "float16"),
    ("Qwen/Qwen2.5-0.5B@refs/pr/3", "Qwen/Qwen2.5-0.5B", "refs/pr/3"),
])
def test_hub_ids(text, name, revision):
    ref = parse_model_ref(text)
    assert (ref.kind, ref.name, ref.revision) == ("hub", name, revision)


def test_pinned_commit():
    sha = "a" * 40
    assert parse_model_ref(f"org/name@{sha}").pinned
    assert not parse_model_ref("org/name@main").pinned


@pytest.mark.parametrize("text", ["../etc/passwd", "org/../x", "a/b/c", "org--x/y", "org/na me", "org/x@../..",
                                  "", "org/" + "x" * 120, "org/x@a b", "./missing", "missing.json", "-org/x"])
def test_rejected(text):
    with pytest.raises(InvalidInputError):
        parse_model_ref(text)


def test_revision_given_twice_must_agree():
    assert parse_model_ref("org/x@v1", "v1").revision == "v1"
    with pytest.raises(InvalidInputError, match="twice"):
        parse_model_ref("org/x@v1", "v2")


def test_local_directory_and_config(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    assert parse_model_ref(str(tmp_path)).kind == "local"
    assert parse_model_ref(str(tmp_path / "config.json")).kind == "config"
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInputError, match="no config.json"):
        parse_model_ref(str(empty))


def test_builtin_examples_ship_with_the_package():
    assert "Llama-2-70b-hf" in examples()
    assert parse_model_ref("example:Llama-2-70b-hf").path.joinpath("config.json").is_file()
    with pytest.raises(InvalidInputError, match="choose one of"):
        parse_model_ref("example:nope")
