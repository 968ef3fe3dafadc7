"""The GitHub Action end to end: action.yml's run step as the runner executes it (a subprocess with the
runner's environment), against the local GitHub API server and the test Hub, on a real git repository."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from action_reports import qlora_on_4090
from github_server import Fault, GitHubServer, GitHubState
from hfmem import __version__
from hfmem.github import action
from hfmem.hub.client import HubSettings
from hfmem.hub.modelref import ModelRef, parse_model_ref
from hfmem.reporting.plan import build_report
from tiny_models import tiny_config

ROOT = Path(__file__).resolve().parent.parent
TOKEN = "ghs_ACTIONsecret_0123456789abcdef"
READ_ONLY = "ghs_FORKreadonly_0123456789abcdef"
HF_TOKEN = "hf_test_granted"
HOSTILE_DIR = "x](http:"
HOSTILE_FILE = "evil)<img src=x onerror=alert(1)> @everyone.json"
HOSTILE = f"configs/{HOSTILE_DIR}/{HOSTILE_FILE}"
LAYERS = (1, 2, 3, 4, 6)  # the tiny Llama configs these tests write
RUN_LINK = ("Charts: the HTML report, artifact `hfmem-report` of "
            "[this run](https://github.com/acme/models/actions/runs/4242)")
OUTSIDE = re.compile(r"""\b(?:src|href|action|data|poster)\s*=\s*["']?\s*(?:https?:)?//"""
                     r"""|url\(\s*["']?\s*(?:https?:)?//""", re.I)
"""A reference a browser would fetch from outside the file."""


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false",
                           *args], cwd=repo, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def write_config(repo: Path, rel: str, layers: int) -> None:
    path = repo / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(tiny_config("meta-llama/Meta-Llama-3-8B", layers), indent=1))


@pytest.fixture(scope="module")
def warm_cache(hub_server, tmp_path_factory) -> Path:
    """hfmem's cache holding the meta-model inventories of every config used here, built once for real, so
    each run of the step takes about a second instead of importing transformers' model code again."""
    root = tmp_path_factory.mktemp("warm")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("HFMEM_CACHE_DIR", str(root / "hfmem"))
        build_report(parse_model_ref("hfmem-test/tiny-llama"),
                     HubSettings(endpoint=hub_server.url, token=None, cache_dir=str(root / "hf"), offline=False))
        for layers in LAYERS:
            write_config(root, f"{layers}/config.json", layers)
            build_report(ModelRef("config", "warm", path=root / f"{layers}/config.json"), HubSettings.from_env())
    for entry in (root / "hfmem" / "repos").glob("*"):
        entry.unlink()  # the runs still fetch config.json and headers from the test Hub
    return root / "hfmem"


@pytest.fixture
def hub_env(hub, warm_cache, monkeypatch):
    """The test Hub's environment (see conftest.hub), with the warm inventory cache."""
    monkeypatch.setenv("HFMEM_CACHE_DIR", str(warm_cache))
    return hub


@pytest.fixture
def pr_repo(tmp_path: Path) -> tuple[Path, str]:
    """A repository whose pull request changes one config, adds two (one hostile-named) and keeps one."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q")
    write_config(repo, "configs/llama/config.json", 2)
    write_config(repo, "configs/same/config.json", 3)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD")
    write_config(repo, "configs/llama/config.json", 4)
    write_config(repo, "configs/new/config.json", 1)
    write_config(repo, HOSTILE, 1)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "head")
    return repo, base


@pytest.fixture
def github():
    state = GitHubState(repository="acme/models", token=TOKEN, read_only_tokens={READ_ONLY})
    with GitHubServer(state) as url:
        yield state, url


def make_env(tmp_path: Path, repo: Path, api_url: str, base: str | None, *, token: str = TOKEN,
             fork: bool = False) -> dict[str, str]:
    """The environment the runner gives a step of a pull_request workflow (without the INPUT_s)."""
    event = {"pull_request": {"number": 7, "base": {"sha": base, "repo": {"full_name": "acme/models"}},
                              "head": {"repo": {"full_name": "mallory/models" if fork else "acme/models"}}}}
    (tmp_path / "event.json").write_text(json.dumps(event))
    (tmp_path / "runner").mkdir(exist_ok=True)
    return {
        **os.environ, "GITHUB_ACTIONS": "true", "GITHUB_API_URL": api_url, "GITHUB_TOKEN": token,
        "GITHUB_REPOSITORY": "acme/models", "GITHUB_EVENT_NAME": "pull_request",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"), "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output"), "GITHUB_WORKSPACE": str(repo), "RUNNER_TEMP": str(tmp_path / "runner"),
        "GITHUB_SHA": "0123456789abcdef0123456789abcdef01234567", "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_RUN_ID": "4242",
    }


def run_step(env: dict[str, str], inputs: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run action.yml's `hfmem` step as the runner would: inputs (with defaults) expanded into its env, bash."""
    spec = yaml.safe_load((ROOT / "action.yml").read_text())
    assert set(inputs) <= set(spec["inputs"]), "unknown input"

    def expand(text: str, values: dict[str, str]) -> str:
        text = re.sub(r"\$\{\{\s*inputs\.([\w-]+)\s*\}\}", lambda m: values[m[1]], str(text))
        text = text.replace("${{ github.token }}", env["GITHUB_TOKEN"])
        text = text.replace("${{ steps.install.outputs.python }}", sys.executable)
        assert "${{" not in text, text
        return text

    values = {name: expand(inputs.get(name, meta.get("default", "")), {}) for name, meta in spec["inputs"].items()}
    step = next(s for s in spec["runs"]["steps"] if s.get("id") == "hfmem")
    assert step["shell"] == "bash"
    step_env = {name: expand(value, values) for name, value in step["env"].items()}
    return subprocess.run(["bash", "-c", step["run"]], env={**env, **step_env}, cwd=env["GITHUB_WORKSPACE"],
                          capture_output=True, text=True, timeout=180)


def sticky(state: GitHubState) -> list[dict]:
    return [c for c in state.comments.get(7, []) if c["body"].startswith(action.MARKER)]


def test_two_runs_leave_one_updated_comment(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    for i in range(105):  # the sticky comment lands on page 2 of the listing
        state.add_comment(7, f"review comment {i}", {"login": "alice", "type": "User"})
    env = make_env(tmp_path, repo, url, base)
    inputs = {"models": "hfmem-test/tiny-llama\n# a comment line\n", "config-paths": "configs/**/*.json",
              "hf-token": HF_TOKEN, "fail-on": "none"}

    first = run_step(env, inputs)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "created the comment on pull request #7" in first.stdout
    [comment] = sticky(state)
    body = comment["body"]
    assert "### Config changes in this pull request (3)" in body
    assert "#### configs/llama/config.json (changed)" in body and "#### configs/new/config.json (new file)" in body
    assert "| layers | 2 | 4 | +2 (+100.0%) |" in body
    assert "configs/same/config.json" not in body  # unchanged in the PR
    assert "| hfmem\\-test/tiny\\-llama |" in body
    assert "| model | parameters | method | peak memory / GPU | T4 | RTX 4090 | A100 40GB | H100 80GB | H200 141GB |" in body
    assert re.search(r"\| memory, qlora \| [\d.]+ GiB \| [\d.]+ GiB \| \+[\d.]+ GiB", body)
    assert "| fit |  |  | unchanged on every GPU |" in body
    assert "<sub>hfmem" in body and "for commit 0123456" in body
    assert RUN_LINK in body  # the run page, which lists the artifact the next step uploads

    write_config(repo, "configs/llama/config.json", 6)  # a new push to the PR
    git(repo, "commit", "-qam", "more layers")
    second = run_step(env, inputs)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "updated the comment on pull request #7" in second.stdout
    [updated] = sticky(state)
    assert updated["id"] == comment["id"] and "| layers | 2 | 6 | +4 (+200.0%) |" in updated["body"]
    assert len(state.comments[7]) == 106
    posts = [p for m, p, _ in state.requests if m == "POST"]
    assert len(posts) == 1

    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert Path(outputs["markdown"]).read_text().startswith("## hfmem: will it train?")
    data = json.loads(Path(outputs["json"]).read_text())
    assert [i["label"] for i in data["items"]][0] == "hfmem-test/tiny-llama" and data["pull_request"] == 7
    summary = (tmp_path / "summary.md").read_text()
    assert summary.count("## hfmem: will it train?") == 2
    page = Path(outputs["html"]).read_text(encoding="utf-8")
    assert outputs["html"] == str(tmp_path / "runner" / "hfmem" / "report.html") and page.startswith("<!DOCTYPE html>")
    assert not OUTSIDE.search(page)  # self-contained: nothing to fetch
    labels = [i["label"] for i in data["items"]]
    links = [f'<a href="#r{n}">{html.escape(label)}</a>' for n, label in enumerate(labels, 1)]
    assert [link in page for link in links] == [True] * len(labels)
    assert page.count("<article ") == len(labels) and page.count('<svg id="r1-chart-') == 4  # curves included
    assert len(set(re.findall(r' id="([^"]+)"', page))) == len(re.findall(r' id="([^"]+)"', page))  # ids unique
    everything = first.stdout + first.stderr + second.stdout + second.stderr + summary + json.dumps(state.comments)
    everything += Path(outputs["json"]).read_text() + page
    assert TOKEN not in everything and HF_TOKEN not in everything
    assert all(auth == f"Bearer {TOKEN}" for _, _, auth in state.requests)


def test_hostile_names_cannot_inject(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    (repo / "configs" / HOSTILE_DIR / "broken @here.json").write_text("{ not json <script>")
    env = make_env(tmp_path, repo, url, base)
    lines: list[str] = []
    status = action.run({**env, "INPUT_CONFIG-PATHS": "configs/**/*.json", "INPUT_FAIL-ON": "none"},
                        log=action.Log(write=lines.append))
    assert status == 0, lines
    body = sticky(state)[0]["body"]
    visible = body.replace(action.MARKER, "")
    for bad in ("<img", "<script", "](http", "@everyone", "@here", "onerror=alert(1)>"):
        assert bad not in visible, bad
    assert "evil\\)&lt;img src=x onerror=alert\\(1\\)&gt; @&#8203;everyone.json" in visible
    assert "is not valid JSON" in visible and str(repo) not in visible  # errors name the file as in the repo
    assert set(re.findall(r"</?(\w+)", visible)) <= {"details", "summary", "sub"}
    page = (tmp_path / "runner" / "hfmem" / "report.html").read_text(encoding="utf-8")
    for bad in ("<img", "<script", "onerror=alert(1)>", "\u202e"):
        assert bad not in page, bad
    assert "evil)&lt;img src=x onerror=alert(1)&gt; @everyone.json" in page and "is not valid JSON" in page


def test_fork_gets_summary_only(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    env = make_env(tmp_path, repo, url, base, token=READ_ONLY, fork=True)
    lines: list[str] = []
    status = action.run({**env, "INPUT_CONFIG_PATHS": "configs/llama/config.json"}, log=action.Log(write=lines.append))
    assert status == 0
    assert any("cannot comment on pull request #7 (HTTP 403: a pull request from a fork gets a read-only token); "
               "the table is in the job summary only." in line for line in lines), lines
    assert state.comments.get(7) is None
    assert "configs/llama/config.json (changed)" in (tmp_path / "summary.md").read_text()
    assert READ_ONLY not in "\n".join(lines)


def test_push_event_is_summary_only_without_diff(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, _ = pr_repo
    env = make_env(tmp_path, repo, url, None)
    (tmp_path / "event.json").write_text(json.dumps({"ref": "refs/heads/main", "after": "0" * 40}))
    lines: list[str] = []
    status = action.run({**env, "GITHUB_EVENT_NAME": "push", "INPUT_CONFIG_PATHS": "configs/*/config.json"},
                        log=action.Log(write=lines.append))
    assert status == 0 and not state.requests
    assert "hfmem: not a pull request event (push): the table is in the job summary only." in lines
    summary = (tmp_path / "summary.md").read_text()
    assert "Config changes" not in summary and "configs/same/config.json" in summary


def test_shallow_clone_shows_configs_without_diff(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, _ = pr_repo
    env = make_env(tmp_path, repo, url, "f" * 40)  # a base commit the clone does not have
    lines: list[str] = []
    assert action.run({**env, "INPUT_CONFIG_PATHS": "configs/llama/*.json"}, log=action.Log(write=lines.append)) == 0
    assert any("check out with `fetch-depth: 0`" in line for line in lines)
    assert "configs/llama/config.json" in sticky(state)[0]["body"]


def test_symlink_out_of_the_workspace_is_not_read(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    secret = tmp_path / "secret.json"
    secret.write_text(json.dumps({"model_type": "llama", "api_key": "SECRET-VALUE"}))
    (repo / "configs" / "link.json").symlink_to(secret)
    env = make_env(tmp_path, repo, url, base)
    lines: list[str] = []
    assert action.run({**env, "INPUT_CONFIG_PATHS": "configs/*.json", "INPUT_FAIL_ON": "error"},
                      log=action.Log(write=lines.append)) == 12
    assert "| configs/link.json | resolves outside the workspace; not read. |" in sticky(state)[0]["body"]
    assert lines[-1].startswith("::error::hfmem: fail-on (error): configs/link.json: resolves outside")


def test_github_faults(hub_env, github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    env = {**make_env(tmp_path, repo, url, base), "INPUT_CONFIG_PATHS": "configs/llama/config.json"}
    state.faults.append(Fault(r"^GET ", 500, times=1, headers={"Retry-After": "0"}))
    lines: list[str] = []
    assert action.run(env, log=action.Log(write=lines.append)) == 0  # retried
    assert len(sticky(state)) == 1
    state.faults.append(Fault(r"^PATCH ", 422, times=1, body={"message": "Validation Failed",
                                                             "errors": [{"message": "body is invalid"}]}))
    assert action.run(env, log=action.Log(write=lines.append)) == 13
    assert lines[-1] == ("::error::hfmem: GitHub API: PATCH /repos/acme/models/issues/comments/"
                         f"{sticky(state)[0]['id']} answered HTTP 422: Validation Failed (body is invalid)")
    state.faults.append(Fault(r"^GET ", 503, times=10, headers={"Retry-After": "0"}))
    assert action.run(env, log=action.Log(write=lines.append)) == 13
    assert "answered HTTP 503 after retries" in lines[-1]
    assert TOKEN not in "\n".join(lines)


@pytest.mark.parametrize("inputs, message", [
    ({}, "give at least one of the inputs models, models-file or config-paths."),
    ({"INPUT_MODELS": "org/../x"}, "'org/../x' is not a valid Hub model id"),
    ({"INPUT_MODELS": "./local"}, "./local: no such file or directory."),
    ({"INPUT_MODELS": "a/b", "INPUT_SEQ_LEN": "2k"}, "input seq-len: expected a positive integer, got '2k'."),
    ({"INPUT_MODELS": "a/b", "INPUT_FAIL_ON": "sometimes"}, "input fail-on: 'sometimes'"),
    ({"INPUT_MODELS": "a/b", "INPUT_FAIL_ON": "qlora:tpu9"}, "input fail-on: unknown GPU 'tpu9'; known: T4,"),
    ({"INPUT_MODELS": "a/b", "INPUT_FAIL_ON": "dpo:a100"}, "method must be one of full, lora, qlora"),
    ({"INPUT_MODELS": "a/b", "INPUT_GPUS": "a100, nope"}, "input gpus: unknown GPU 'nope'"),
    ({"INPUT_MODELS": "a/b", "INPUT_METHODS": "full, rlhf"},
     "input methods: 'rlhf'; choose from full, lora, qlora, dora, lora-fa, vera, ia3, oft, boft, prompt-tuning, "
     "prefix-tuning or serve."),
    ({"INPUT_MODELS": "a/b", "INPUT_METHODS": "serve", "INPUT_ENGINE": "tgi"},
     "input engine: 'tgi'; choose from vllm, sglang, llama.cpp, transformers."),
    ({"INPUT_MODELS_FILE": "missing.txt"}, "cannot read model list"),
    ({"INPUT_CONFIG_PATHS": "../*.json"}, "use a glob relative to the workspace"),
    ({"INPUT_MODELS": "a/b", "INPUT_TOKENS": "lots"}, "input tokens: expected a positive number of tokens"),
    ({"INPUT_MODELS": "a/b", "INPUT_TOKENS": "-1"}, "input tokens: expected a positive number of tokens"),
    ({"INPUT_MODELS": "a/b", "INPUT_PRICES": "h100"}, "input prices: --price takes GPU=USD per GPU-hour"),
    ({"INPUT_MODELS": "a/b", "INPUT_PRICES": "tpu9=2"}, "input prices: unknown GPU 'tpu9'"),
    ({"INPUT_MODELS": "a/b", "INPUT_ARTIFACT_NAME": "a/b"}, "input artifact-name: 'a/b'; use letters, digits"),
])
def test_bad_input_is_one_line_exit_2(tmp_path, inputs, message):
    lines: list[str] = []
    env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path), **inputs}
    assert action.run(env, report_fn=lambda ref: pytest.fail("no analysis on bad input"),
                      log=action.Log(write=lines.append)) == 2
    assert len(lines) == 1 and lines[0].startswith("::error::hfmem: ") and message in lines[0]


def fake_report_fn(ref) -> dict:
    """Reports without a build per model: a real report renamed, fitting an RTX 4090 up to 3 layers and not above
    (configs; models have 2), with those layers and 1,000 parameters per layer."""
    layers = json.loads(ref.path.read_text())["num_hidden_layers"] if ref.path else 2
    report = qlora_on_4090("Meta-Llama-3-8B" if layers <= 3 else "Llama-2-70b-hf", ref.name)
    report["architecture"]["num_layers"] = layers
    report["parameters"]["total"] = 1000 * layers
    return report


def test_fail_on_regression_and_method_gpu(github, pr_repo, tmp_path):
    state, url = github
    repo, base = pr_repo
    env = {**make_env(tmp_path, repo, url, base), "INPUT_CONFIG_PATHS": "configs/llama/config.json",
           "INPUT_MODELS": "org/fits"}
    lines: list[str] = []
    assert action.run({**env, "INPUT_FAIL_ON": "regression"}, fake_report_fn, action.Log(write=lines.append)) == 12
    assert lines[-1] == "::error::hfmem: fail-on (regression): configs/llama/config.json: qlora no longer fits RTX 4090"
    assert "| qlora on RTX 4090 | ✅ | ❌ 3×ZeRO\\-3\\+ckpt | **no longer fits** |" in sticky(state)[0]["body"]
    assert action.run({**env, "INPUT_FAIL_ON": "QLoRA:RTX4090"}, fake_report_fn, action.Log(write=lines.append)) == 12
    assert lines[-1].endswith("fail-on (qlora:RTX 4090): configs/llama/config.json: does not fit RTX 4090 with qlora")
    assert action.run({**env, "INPUT_FAIL_ON": "full:rtx4090"}, fake_report_fn, action.Log(write=lines.append)) == 12
    assert "org/fits: no estimate for RTX 4090 with full" in lines[-1]
    assert action.run({**env, "INPUT_FAIL_ON": "none"}, fake_report_fn, action.Log(write=lines.append)) == 0
    assert len(sticky(state)) == 1


def test_many_models_comment_stays_under_the_limit(github, tmp_path):
    state, url = github
    env = make_env(tmp_path, tmp_path, url, None)
    models = "\n".join(f"org/model-{i}" for i in range(2500))
    lines: list[str] = []
    env |= {"INPUT_MODELS": models, "INPUT_ARTIFACT_NAME": "hfmem-report"}
    assert action.run(env, fake_report_fn, action.Log(write=lines.append)) == 0, lines
    body = sticky(state)[0]["body"]
    assert len(body) < 65_536 and "<details><summary>" in body and "more entries left out" in body
    assert body.endswith(f"{RUN_LINK}\n\n<sub>hfmem {__version__} for commit 0123456</sub>\n")  # kept in the budget
    summary = (tmp_path / "summary.md").read_text()
    assert "org/model\\-2499" in summary and "left out" not in summary and RUN_LINK in summary
    page = (tmp_path / "runner" / "hfmem" / "report.html").read_text(encoding="utf-8")
    assert page.count("<article ") == action.HTML_REPORTS and "org/model-2499: not drawn: the page draws" in page


def test_action_yml_and_example_agree_with_the_entry_point():
    spec = yaml.safe_load((ROOT / "action.yml").read_text())
    assert spec["runs"]["using"] == "composite"
    step = next(s for s in spec["runs"]["steps"] if s.get("id") == "hfmem")
    for name in set(spec["inputs"]) - {"python-version", "torch-index-url"}:  # those two are for the install step
        assert step["env"]["INPUT_" + name.upper().replace("-", "_")] == f"${{{{ inputs.{name} }}}}"
    assert set(spec["outputs"]) == {"markdown", "json", "html"}
    example = yaml.safe_load((ROOT / "examples" / "workflow.yml").read_text())
    uses = next(s for s in example["jobs"]["fit"]["steps"] if s.get("id") == "hfmem")
    assert set(uses["with"]) <= set(spec["inputs"])
    env = {"INPUT_" + k.upper().replace("-", "_"): v for k, v in uses["with"].items() if k != "models-file"}
    inputs = action.read_inputs(env | {"INPUT_MODELS": "org/model"}, ROOT)  # the example's values are valid
    assert inputs.gpus == ["RTX 4090", "A100 80GB", "H100 80GB"] and inputs.fail_on[-1] == "qlora:RTX 4090"
    assert example["permissions"]["pull-requests"] == "write"
    assert not (ROOT / ".github" / "workflows" / "workflow.yml").exists()


def test_the_upload_step_is_pinned_and_uploads_the_html_output():
    spec = yaml.safe_load((ROOT / "action.yml").read_text())
    steps = spec["runs"]["steps"]
    (upload,) = [s for s in steps if s.get("uses", "").startswith("actions/upload-artifact@")]
    assert re.fullmatch(r"actions/upload-artifact@[0-9a-f]{40}", upload["uses"])
    line = next(x for x in (ROOT / "action.yml").read_text().splitlines() if "actions/upload-artifact@" in x)
    assert int(re.search(r"  # v(\d+)\.\d+\.\d+$", line)[1]) >= 4  # artifact-url and immutable artifacts: v4+
    assert upload["with"]["path"] == spec["outputs"]["html"]["value"] == "${{ steps.hfmem.outputs.html }}"
    assert upload["with"]["name"] == "${{ inputs.artifact-name }}" and spec["inputs"]["artifact-name"]["default"]
    assert steps.index(upload) > steps.index(next(s for s in steps if s.get("id") == "hfmem"))
    assert "!cancelled()" in upload["if"] and "steps.hfmem.outputs.html" in upload["if"]  # after a fail-on too


def test_gpus_methods_and_fail_on_resolve_to_catalogue_names(tmp_path):
    env = {"INPUT_MODELS": "a/b", "INPUT_GPUS": "4090, a100-80gb\nmycard=40", "INPUT_METHODS": "QLoRA",
           "INPUT_FAIL_ON": "error, full:h100, lora:MyCard", "INPUT_SEQ_LEN": "4096"}
    inputs = action.read_inputs(env, tmp_path)
    assert inputs.gpus == ["RTX 4090", "A100 80GB", "mycard=40", "H100 80GB"]
    assert inputs.methods == ["qlora", "full", "lora"]
    assert inputs.fail_on == ["error", "full:H100 80GB", "lora:mycard=40"]
    assert inputs.seq_len == 4096 and inputs.batch_size == 1
    defaults = action.read_inputs({"INPUT_MODELS": "a/b"}, tmp_path)
    assert defaults.gpus == list(action.DEFAULT_GPUS) and defaults.methods == ["full", "lora", "qlora"]
    assert defaults.fail_on == ["error"]
    served = action.read_inputs({"INPUT_MODELS": "a/b", "INPUT_METHODS": "serve", "INPUT_FAIL_ON": "serve:l4",
                                 "INPUT_ENGINE": "SGLang", "INPUT_CONTEXT": "16000"}, tmp_path)
    assert served.methods == ["serve"] and served.fail_on == ["serve:L4"] and "L4" in served.gpus
    assert (served.engine, served.context) == ("sglang", 16000)
    assert "serve\\: sglang, context 16,000" in action.settings_line(served)


def test_unwritable_summary_is_one_line(tmp_path):
    lines: list[str] = []
    env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path), "INPUT_MODELS": "org/a",
           "GITHUB_STEP_SUMMARY": str(tmp_path / "no" / "summary.md")}
    (tmp_path / "no").write_text("a file, not a folder")
    assert action.run(env, fake_report_fn, action.Log(write=lines.append)) == 14
    assert len(lines) == 1 and lines[0].startswith("::error::hfmem: cannot write ")


def test_log_lines_cannot_inject_workflow_commands():
    lines: list[str] = []
    log = action.Log(secrets=["s3cret"], write=lines.append)
    log("bad name\n::add-mask::x\r\n::error::y s3cret")
    log.error("100% broken\n::warning::z")
    assert lines == ["hfmem: bad name ::add-mask::x ::error::y ***", "::error::hfmem: 100%25 broken ::warning::z"]


@pytest.mark.parametrize("pull_request, message", [
    ({"number": True}, "pull_request.number must be a positive integer, got True"),
    ({"number": "7"}, "pull_request.number must be a positive integer"),
    ({"number": 7, "base": "main"}, "pull_request.base must be an object, got str"),
    ({"number": 7, "base": {"sha": 1234}}, "pull_request.base.sha must be a string, got 1234"),
    ({"number": 7, "base": {"sha": "a" * 40, "repo": ["acme/models"]}}, "pull_request.base.repo must be an object"),
    ({"number": 7, "base": {"sha": "a" * 40}, "head": {"repo": "x"}}, "pull_request.head.repo must be an object"),
    ("a string", "pull_request must be an object, got str"),
])
def test_malformed_event_is_one_line_exit_2(github, tmp_path, pull_request, message):
    """`"number": true` used to post to /issues/True/comments; a string `base` ended in an internal error."""
    state, url = github
    (tmp_path / "event.json").write_text(json.dumps({"pull_request": pull_request}))
    env = {"GITHUB_WORKSPACE": str(tmp_path), "RUNNER_TEMP": str(tmp_path), "INPUT_MODELS": "org/fits",
           "GITHUB_EVENT_PATH": str(tmp_path / "event.json"), "GITHUB_API_URL": url, "INPUT_TOKEN": TOKEN,
           "GITHUB_REPOSITORY": "acme/models"}
    lines: list[str] = []
    assert action.run(env, fake_report_fn, action.Log(write=lines.append)) == 2
    assert len(lines) == 1 and message in lines[0]
    assert not state.requests


def test_github_failure_is_not_hidden_by_fail_on(github, pr_repo, tmp_path):
    """Both problems are said; the exit code is the GitHub failure's (13), since the comment is missing."""
    state, url = github
    repo, base = pr_repo
    env = {**make_env(tmp_path, repo, url, base), "INPUT_CONFIG_PATHS": "configs/llama/config.json",
           "INPUT_FAIL_ON": "regression"}
    state.faults.append(Fault(r"^POST ", 500, times=10, headers={"Retry-After": "0"}))
    lines: list[str] = []
    assert action.run(env, fake_report_fn, action.Log(write=lines.append)) == 13
    assert "answered HTTP 500 after retries" in lines[-2] and "fail-on (regression)" in lines[-1]


def test_a_token_budget_and_prices_time_each_model_as_the_cli_does(github, pr_repo, tmp_path, capsys):
    """With tokens and prices, the comment names each model's fastest and cheapest fitting setup: the CLI's line."""
    from hfmem.cli.main import run as cli
    from hfmem.memory.record import cells
    from hfmem.render.common import time_cell, time_line
    from hfmem.render.diff import cell

    state, url = github
    repo, base = pr_repo
    inputs = {"models": "example:Meta-Llama-3-8B", "tokens": "1e9", "prices": "h100=2.5, a100-40gb=1.2",
              "fail-on": "none"}
    done = run_step(make_env(tmp_path, repo, url, base), inputs)
    assert done.returncode == 0, done.stdout + done.stderr
    [comment] = sticky(state)
    capsys.readouterr()
    assert cli(["example:Meta-Llama-3-8B", "-f", "json", "--tokens", "1e9", "--price", "h100=2.5", "--price",
                "a100-40gb=1.2", *(a for g in action.DEFAULT_GPUS for a in ("-g", g))]) == 0
    report = json.loads(capsys.readouterr().out)
    line = time_line(report)
    assert "fastest:" in line and "cheapest:" in line and "$" in line
    body = comment["body"]
    assert "### Time and cost" in body
    assert f"- **{cell('example:Meta-Llama-3-8B')}**: {cell(line)}" in body
    assert cell("timed for 1e+09 tokens · USD/GPU-h: A100 40GB 1.2, H100 80GB 2.5 (prices input)") in body
    if report["prices"]["sources"]:  # a GPU the inputs give no price keeps the default table's
        assert cell(f"(default table of {report['prices']['default_as_of']}:") in body
    section = body.split("### Time and cost", 1)[1]
    rows = [r for r in section.splitlines() if r.startswith("| ")]
    header = [c.strip() for c in rows[0].strip("|").split("|")]
    timed = {(c["method"], c["gpu"]["name"]): c for c in cells(report)}
    seen = 0
    for row in rows[2:]:  # per method, each GPU's tokens/s, hours and cost: the CLI's time table cells
        values = [c.strip() for c in row.strip("|").split("|")]
        for gpu, value in zip(header[2:], values[2:]):
            entry = timed[(values[1], gpu)]
            assert value == (cell(time_cell(entry)) if time_cell(entry) else "—")
            seen += "tok/s" in value and "$" in value
    assert seen and len(body) < 65_536
