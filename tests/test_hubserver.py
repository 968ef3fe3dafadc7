"""The fake Hub works with the real ``huggingface_hub`` client, and its fixture repos are right.

Client calls pass ``endpoint=hub.url`` explicitly (``huggingface_hub`` reads ``HF_ENDPOINT`` at
import time) and ``token=False`` or a token, so no locally stored token can leak in.
"""

from __future__ import annotations

import json
import math
import struct
import time
from pathlib import Path

import httpx2
import pytest
from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
    SafetensorsParsingError,
)

from hubserver import GRANTED_TOKEN, HubServer, safetensors_header, sha_of

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"
HUB = FIXTURES / "hub"
DTYPE_BYTES = {"F64": 8, "I64": 8, "F32": 4, "I32": 4, "BF16": 2, "F16": 2, "F8_E4M3": 1, "U8": 1, "I8": 1, "BOOL": 1}


def api(hub: HubServer, token: str | bool = False) -> HfApi:
    return HfApi(endpoint=hub.url, token=token)


def read_header(path: Path) -> dict:
    """Parse a header-only safetensors file independently of the server."""
    raw = path.read_bytes()
    (length,) = struct.unpack("<Q", raw[:8])
    assert len(raw) == 8 + length, f"{path} holds more than its header"
    header = json.loads(raw[8:])
    header.pop("__metadata__", None)
    return header


def checkpoint_files(repo_dir: Path) -> list[Path]:
    index = repo_dir / "model.safetensors.index.json"
    if index.exists():
        return [repo_dir / f for f in sorted(set(json.loads(index.read_text())["weight_map"].values()))]
    return [repo_dir / "model.safetensors"]


def element_counts(repo_dir: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for path in checkpoint_files(repo_dir):
        for tensor in read_header(path).values():
            counts[tensor["dtype"]] = counts.get(tensor["dtype"], 0) + math.prod(tensor["shape"])
    return counts


def stored_bytes(repo_dir: Path) -> int:
    return sum(t["data_offsets"][1] - t["data_offsets"][0] for p in checkpoint_files(repo_dir) for t in read_header(p).values())


# ------------------------------------------------------------------ the real client against it


def test_model_info(hub):
    info = api(hub).model_info("openai-community/gpt2")
    assert info.id == "openai-community/gpt2"
    assert info.sha == sha_of("openai-community/gpt2") and len(info.sha) == 40
    assert sorted(s.rfilename for s in info.siblings) == ["config.json", "model.safetensors"]
    assert info.safetensors.parameters == {"F32": 124_439_808} and info.safetensors.total == 124_439_808
    assert info.config["model_type"] == "gpt2" and info.gated is False and info.private is False


def test_model_info_of_a_gated_repo_needs_no_token(hub):
    info = api(hub).model_info("meta-llama/Llama-2-7b-hf", files_metadata=True)
    assert info.gated == "manual"
    shard = next(s for s in info.siblings if s.rfilename == "model-00001-of-00002.safetensors")
    assert shard.lfs is not None and shard.size == shard.lfs.size > 9 * 10**9


def test_model_info_expand(hub):
    info = api(hub).model_info("Qwen/Qwen2.5-0.5B", expand=["safetensors"])
    assert info.safetensors.total == 494_032_768 and info.siblings is None and info.sha is None


def test_hf_hub_download_then_from_cache(hub, tmp_path):
    path = hf_hub_download("openai-community/gpt2", "config.json", endpoint=hub.url, token=False, cache_dir=tmp_path)
    assert Path(path).read_bytes() == (HUB / "openai-community/gpt2/config.json").read_bytes()
    assert [(e.method, e.status) for e in hub.log] == [("HEAD", 200), ("GET", 200)]
    hub.reset_log()
    again = hf_hub_download("openai-community/gpt2", "config.json", endpoint=hub.url, token=False, cache_dir=tmp_path)
    assert again == path and [e.method for e in hub.log] == ["HEAD"]  # etag unchanged: no second GET
    hub.reset_log()
    hf_hub_download("openai-community/gpt2", "config.json", cache_dir=tmp_path, local_files_only=True)
    assert hub.log == []


def test_safetensors_metadata_single_file(hub):
    meta = api(hub).get_safetensors_metadata("openai-community/gpt2")
    assert not meta.sharded and meta.parameter_count == {"F32": 124_439_808}
    assert hub.weight_downloads() == []


def test_safetensors_metadata_sharded_llama_2_70b(hub):
    meta = api(hub, GRANTED_TOKEN).get_safetensors_metadata("meta-llama/Llama-2-70b-hf")
    assert meta.sharded and len(meta.files_metadata) == 15
    assert meta.parameter_count == {"F16": 68_976_648_192}
    assert meta.metadata == {"total_size": 2 * 68_976_648_192}
    assert {e.host for e in hub.requests("*.safetensors")} == {"hub", "cdn"}  # via the CDN redirect
    assert hub.weight_downloads() == []


def test_sharded_metadata_in_one_request(hub):
    meta = api(hub).get_sharded_safetensors_metadata("mistralai/Mixtral-8x7B-v0.1")
    assert meta.parameter_count == {"BF16": 46_702_792_704} and len(meta.files_metadata) == 19
    assert hub.total_requests() == 1


def test_revision_branch(hub):
    client = api(hub, GRANTED_TOKEN)
    main = client.get_safetensors_metadata("google/gemma-2b-it")
    branch = client.get_safetensors_metadata("google/gemma-2b-it", revision="float16")
    assert main.parameter_count == {"BF16": 2_506_172_416}
    assert branch.parameter_count == {"F16": 2_506_172_416 + 256_000 * 2048}  # duplicated lm_head
    assert "lm_head.weight" in branch.weight_map and "lm_head.weight" not in main.weight_map
    info = client.model_info("google/gemma-2b-it", revision="float16")
    assert info.sha == sha_of("google/gemma-2b-it", "float16")
    by_sha = client.model_info("google/gemma-2b-it", revision=info.sha)
    assert by_sha.sha == info.sha


def test_legacy_id_gpt2(hub, tmp_path):
    assert api(hub).model_info("gpt2").id == "openai-community/gpt2"
    path = hf_hub_download("gpt2", "config.json", endpoint=hub.url, token=False, cache_dir=tmp_path)
    assert json.loads(Path(path).read_text())["model_type"] == "gpt2"
    assert hub.requests("/gpt2/resolve/*")[0].status == 307
    assert api(hub).get_safetensors_metadata("gpt2").parameter_count == {"F32": 124_439_808}


# ------------------------------------------------------------------ protocol details


def test_redirects(hub):
    with httpx2.Client(follow_redirects=False) as http:
        lfs = http.head(hf_hub_url("openai-community/gpt2", "model.safetensors", endpoint=hub.url))
        legacy = http.head(f"{hub.url}/gpt2/resolve/main/config.json")
    assert lfs.status_code == 302 and lfs.headers["Location"].startswith(hub.cdn_url + "/")
    header_length = struct.unpack("<Q", (HUB / "openai-community/gpt2/model.safetensors").read_bytes()[:8])[0]
    assert int(lfs.headers["X-Linked-Size"]) == 8 + header_length + 4 * 124_439_808
    assert lfs.headers["X-Repo-Commit"] == sha_of("openai-community/gpt2") and lfs.headers["X-Linked-Etag"]
    assert legacy.status_code == 307 and legacy.headers["Location"] == "/openai-community/gpt2/resolve/main/config.json"
    meta = get_hf_file_metadata(hf_hub_url("gpt2", "model.safetensors", endpoint=hub.url), token=False)
    assert meta.size == int(lfs.headers["X-Linked-Size"]) and meta.location == lfs.headers["Location"]
    assert meta.commit_hash == sha_of("openai-community/gpt2") and meta.etag == lfs.headers["X-Linked-Etag"].strip('"')


def test_range_requests(hub):
    stored = (HUB / "openai-community/gpt2/model.safetensors").read_bytes()
    url = hf_hub_url("openai-community/gpt2", "model.safetensors", endpoint=hub.url)
    with httpx2.Client(follow_redirects=True) as http:
        size = int(http.head(url, follow_redirects=False).headers["X-Linked-Size"])
        head = http.get(url, headers={"Range": "bytes=0-7"})
        assert head.status_code == 206 and head.content == stored[:8]
        assert head.headers["Content-Range"] == f"bytes 0-7/{size}" and head.headers["Content-Length"] == "8"
        assert hub.weight_downloads() == []
        data = http.get(url, headers={"Range": f"bytes={len(stored)}-{len(stored) + 15}"})
        assert data.status_code == 206 and data.content == bytes(16)
        assert hub.weight_downloads()[-1].range == f"bytes={len(stored)}-{len(stored) + 15}"
        tail = http.get(url, headers={"Range": "bytes=-4"})
        assert tail.headers["Content-Range"] == f"bytes {size - 4}-{size - 1}/{size}"
        assert http.get(url, headers={"Range": f"bytes={size}-"}).status_code == 416
        config = http.get(hf_hub_url("openai-community/gpt2", "config.json", endpoint=hub.url), headers={"Range": "bytes=2-5"})
        assert config.status_code == 206 and config.content == (HUB / "openai-community/gpt2/config.json").read_bytes()[2:6]


def test_header_over_100kb_takes_a_second_request(hub):
    tensors = {f"model.layers.{i}.mlp.weight": ("BF16", (8, 8)) for i in range(2000)}
    hub.add_repo("hfmem-test/big-header", {"config.json": b"{}", "model.safetensors": safetensors_header(tensors)})
    meta = api(hub).get_safetensors_metadata("hfmem-test/big-header")
    assert meta.parameter_count == {"BF16": 2000 * 64}
    assert [e.range for e in hub.requests("*/model.safetensors", "GET") if e.host == "cdn"][-2:] == [
        "bytes=0-100000",
        f"bytes=8-{len(safetensors_header(tensors)) - 1}",
    ]
    assert hub.weight_downloads() == []


def test_downloading_weights_is_counted_and_cut_off(hub, tmp_path, monkeypatch):
    hf_hub_download("hfmem-test/tiny-llama", "model.safetensors", endpoint=hub.url, token=False, cache_dir=tmp_path)
    assert [e.path for e in hub.weight_downloads()] == [f"/hfmem-test/tiny-llama/{sha_of('hfmem-test/tiny-llama')}/model.safetensors"]
    monkeypatch.setattr(hub, "max_data_bytes", 1 << 20)
    with httpx2.Client(follow_redirects=True) as http, pytest.raises(httpx2.RemoteProtocolError):
        http.get(hf_hub_url("openai-community/gpt2", "model.safetensors", endpoint=hub.url))
    assert hub.weight_downloads()[-1].bytes_sent < 2 << 20


# ------------------------------------------------------------------ errors


def test_gated_repo(hub, tmp_path):
    for token, status in ((False, 401), ("hf_someone_else", 403)):
        with pytest.raises(GatedRepoError) as err:
            hf_hub_download("meta-llama/Llama-2-7b-hf", "config.json", endpoint=hub.url, token=token, cache_dir=tmp_path)
        assert err.value.response.status_code == status
        assert "restricted" in err.value.response.headers["X-Error-Message"]
    path = hf_hub_download("meta-llama/Llama-2-7b-hf", "config.json", endpoint=hub.url, token=GRANTED_TOKEN, cache_dir=tmp_path)
    assert json.loads(Path(path).read_text())["num_hidden_layers"] == 32
    with pytest.raises(GatedRepoError):
        api(hub).get_safetensors_metadata("meta-llama/Llama-2-7b-hf")


def test_repo_not_found(hub, tmp_path):
    for token, status in ((False, 401), (GRANTED_TOKEN, 404)):
        with pytest.raises(RepositoryNotFoundError) as err:
            api(hub, token).model_info("nobody/nothing")
        assert err.value.response.status_code == status and err.value.response.headers["X-Error-Code"] == "RepoNotFound"
    with pytest.raises(RepositoryNotFoundError):
        hf_hub_download("nobody/nothing", "config.json", endpoint=hub.url, token=False, cache_dir=tmp_path)
    with pytest.raises(RepositoryNotFoundError):
        api(hub).model_info("hfmem-test/private-tiny-llama")
    assert api(hub, GRANTED_TOKEN).model_info("hfmem-test/private-tiny-llama").private is True


def test_revision_not_found(hub, tmp_path):
    with pytest.raises(RevisionNotFoundError):
        api(hub).model_info("openai-community/gpt2", revision="no-such-branch")
    with pytest.raises(RevisionNotFoundError):
        hf_hub_download("openai-community/gpt2", "config.json", revision="v9", endpoint=hub.url, token=False, cache_dir=tmp_path)


def test_entry_not_found(hub, tmp_path):
    with pytest.raises(EntryNotFoundError) as err:
        hf_hub_download("openai-community/gpt2", "tokenizer.json", endpoint=hub.url, token=False, cache_dir=tmp_path)
    assert err.value.response.headers["X-Repo-Commit"] == sha_of("openai-community/gpt2")


def test_malformed_repos(hub):
    client = api(hub)
    with pytest.raises(SafetensorsParsingError, match="too big"):
        client.get_safetensors_metadata("hfmem-test/bad-header-length")
    with pytest.raises(SafetensorsParsingError, match="not json"):
        client.get_safetensors_metadata("hfmem-test/bad-header-json")
    assert client.model_info("hfmem-test/bad-header-json").safetensors is None
    assert client.model_info("hfmem-test/bad-config").config is None
    assert not client.file_exists("hfmem-test/no-safetensors", "model.safetensors")
    assert client.file_exists("hfmem-test/no-safetensors", "pytorch_model.bin")


# ------------------------------------------------------------------ faults


def test_429_with_retry_after_is_retried(hub):
    fault = hub.inject("/api/models", status=429, retry_after=0)
    start = time.monotonic()
    models = list(api(hub).list_models(author="openai-community"))
    assert [m.id for m in models] == ["openai-community/gpt2", "openai-community/openai-gpt"]
    assert fault.hits == 1 and [e.status for e in hub.log] == [429, 200]
    assert hub.log[0].bytes_sent > 0 and time.monotonic() - start >= 1  # client waits Retry-After + 1 s


def test_429_surfaces_where_the_client_does_not_retry(hub):
    hub.inject("/api/models/*", status=429, retry_after=7)
    with pytest.raises(HfHubHTTPError) as err:
        api(hub).model_info("openai-community/gpt2")
    assert err.value.response.status_code == 429 and err.value.response.headers["Retry-After"] == "7"
    assert api(hub).model_info("openai-community/gpt2").id == "openai-community/gpt2"  # times=1 by default


def test_fault_effects(hub):
    url = f"{hub.url}/api/models/openai-community/gpt2"
    with httpx2.Client() as http:
        hub.inject("/api/models/*", status=500, times=2)
        assert [http.get(url).status_code for _ in range(3)] == [500, 500, 200]
        hub.inject("/api/models/*", latency=0.3)
        start = time.monotonic()
        assert http.get(url).status_code == 200 and time.monotonic() - start >= 0.3
        hub.inject("/api/models/*", drop=True)
        with pytest.raises(httpx2.RemoteProtocolError):
            http.get(url)
        assert hub.log[-1].status == 0
        hub.inject("/api/models/*", length_delta=100)
        with pytest.raises(httpx2.RemoteProtocolError):
            http.get(url)
        hub.inject("*/config.json", host="cdn", status=500)  # config.json never goes to the CDN
        assert http.get(hf_hub_url("openai-community/gpt2", "config.json", endpoint=hub.url)).status_code == 200
        stall = hub.inject("/api/models/*", stall=1.0)
        with pytest.raises(httpx2.ReadTimeout):
            http.get(url, timeout=0.2)
    assert stall.hits == 1 and [e.status for e in hub.log[:4]] == [500, 500, 200, 200]


def test_inject_rejects_unbounded_stalls(hub):
    with pytest.raises(ValueError):
        hub.inject("*", stall=3600)


# ------------------------------------------------------------------ listing, adding repos


def test_list_models_paginates(hub, monkeypatch):
    monkeypatch.setattr(hub, "page_size", 3)
    models = list(api(hub).list_models(author="meta-llama"))
    assert len(models) == 10 and all(m.id.startswith("meta-llama/") for m in models)
    assert len(hub.requests("/api/models")) == 4  # 3 + 3 + 3 + 1, following Link headers
    assert [m.id for m in api(hub).list_models(search="gemma-2-", limit=5)] == ["google/gemma-2-2b", "google/gemma-2-9b"]
    expanded = next(iter(api(hub).list_models(search="Qwen2.5-0.5B", expand=["safetensors"])))
    assert expanded.safetensors.total == 494_032_768


def test_added_repos_and_roots(hub, tmp_path):
    for i in range(30):
        repo = tmp_path / "batch" / f"repo-{i:02d}"
        repo.mkdir(parents=True)
        (repo / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (repo / "model.safetensors").write_bytes(safetensors_header({"w": ("F32", (i + 1, 2))}))
    assert len(hub.add_root(tmp_path)) == 30
    listed = list(api(hub).list_models(author="batch", expand=["safetensors"]))
    assert [m.safetensors.total for m in listed] == [2 * (i + 1) for i in range(30)]
    hub.add_repo("hfmem-test/added", {"config.json": b"{}"}, refs={"v1": {"config.json": b'{"a": 1}'}}, gated="manual")
    assert api(hub).model_info("hfmem-test/added", revision="v1").sha == sha_of("hfmem-test/added", "v1")
    hub.reset()
    with pytest.raises(RepositoryNotFoundError):
        api(hub).model_info("hfmem-test/added")
    assert list(api(hub).list_models(author="batch")) == []


def test_environment_points_at_the_fake_hub(hub, monkeypatch):
    import os

    import huggingface_hub.constants as constants

    assert os.environ["HF_ENDPOINT"] == hub.url == constants.ENDPOINT
    assert "HF_TOKEN" not in os.environ and os.environ["HFMEM_CACHE_DIR"]
    assert HfApi(token=False).model_info("openai-community/gpt2").sha == sha_of("openai-community/gpt2")
    assert hf_hub_url("gpt2", "config.json").startswith(hub.url)


# ------------------------------------------------------------------ the fixture repos themselves


def test_published_parameter_counts():
    published = json.loads((FIXTURES / "parameter_counts.json").read_text())
    assert len(published) == 10
    for repo_id, count in published.items():
        assert sum(element_counts(HUB / repo_id).values()) == count, repo_id


def test_headers_are_contiguous_and_sized():
    files = sorted(HUB.glob("*/*/*.safetensors"))
    assert len(files) > 900
    for path in files:
        if path.parent.name.startswith("bad-header"):
            continue
        offset = 0
        for name, t in sorted(read_header(path).items(), key=lambda kv: kv[1]["data_offsets"]):
            start, end = t["data_offsets"]
            assert start == offset and end - start == math.prod(t["shape"]) * DTYPE_BYTES[t["dtype"]], (path, name)
            offset = end


def test_every_index_total_size_matches_its_headers():
    indexes = sorted(HUB.glob("*/*/model.safetensors.index.json"))
    assert len(indexes) > 40
    for index in indexes:
        total_size = json.loads(index.read_text())["metadata"]["total_size"]
        assert stored_bytes(index.parent) == total_size, index


def test_real_indexes_are_verbatim():
    reference_totals = {  # metadata.total_size of the real Hub indexes (fixtures/README.md)
        "bigscience/bloom": 352_494_542_848,
        "google/gemma-2b-it": 5_012_344_832,
        "google/gemma-2b-it@float16": 6_060_920_832,
        "google/medgemma-27b-it": 54_864_813_280,
        "ibm-granite/granite-3.1-1b-a400m-instruct": 5_338_513_408,
        "microsoft/WizardLM-2-8x22B": 281_241_268_224,
    }
    for repo_id, total_size in reference_totals.items():
        assert json.loads((HUB / repo_id / "model.safetensors.index.json").read_text())["metadata"]["total_size"] == total_size
        assert stored_bytes(HUB / repo_id) == total_size, repo_id
    assert len(json.loads((HUB / "bigscience/bloom/model.safetensors.index.json").read_text())["weight_map"]) == 845
    assert sum(element_counts(HUB / "bigscience/bloom").values()) == 176_247_271_424  # huggingface.js test figure


def test_documented_edge_cases():
    # gemma-2b-it float16 branch: the index lists lm_head.weight although Gemma ties embeddings.
    assert element_counts(HUB / "google/gemma-2b-it@float16") == {"F16": 2_506_172_416 + 256_000 * 2048}
    assert read_header(HUB / "google/gemma-2b-it@float16/model-00002-of-00002.safetensors")["lm_head.weight"]["shape"] == [256_000, 2048]
    # granite: the real index is the fp32 upload, the config the later bf16 commit.
    assert json.loads((HUB / "ibm-granite/granite-3.1-1b-a400m-instruct/config.json").read_text())["torch_dtype"] == "bfloat16"
    assert element_counts(HUB / "ibm-granite/granite-3.1-1b-a400m-instruct") == {"F32": 1_334_628_352}
    # medgemma: the index's metadata.total_parameters disagrees with what it stores.
    medgemma = json.loads((HUB / "google/medgemma-27b-it/model.safetensors.index.json").read_text())["metadata"]
    assert medgemma["total_parameters"] == 28_842_036_848
    assert sum(element_counts(HUB / "google/medgemma-27b-it").values()) == 27_432_406_640


def test_deepseek_v3_mirrors_the_fp8_checkpoint():
    repo = HUB / "deepseek-ai/DeepSeek-V3"
    headers = {name: t for path in checkpoint_files(repo) for name, t in read_header(path).items()}
    # published figures of the real checkpoint (simpx/model-inspect README): tensors and bytes
    assert len(headers) == 91_991 and stored_bytes(repo) == 688_574_839_360
    q_a_proj = headers["model.layers.0.self_attn.q_a_proj.weight"]
    assert (q_a_proj["dtype"], q_a_proj["shape"]) == ("F8_E4M3", [1536, 7168])
    assert headers["model.layers.0.self_attn.q_a_proj.weight_scale_inv"]["shape"] == [12, 56]
    assert headers["model.layers.61.eh_proj.weight"]["dtype"] == "BF16"
    # without the MTP layer 61 and the FP8 scales, the count is transformers' meta-model count
    core = [t for n, t in headers.items() if not n.startswith("model.layers.61.") and not n.endswith("_scale_inv")]
    assert sum(math.prod(t["shape"]) for t in core) == 671_026_419_200


def test_repo_metadata():
    for meta_file in HUB.glob("*/*/.hub.json"):
        repo_id = f"{meta_file.parent.parent.name}/{meta_file.parent.name}"
        meta = json.loads(meta_file.read_text())
        assert meta["sha"] == meta["refs"]["main"] == sha_of(repo_id)
        gated = repo_id.startswith(("meta-llama/", "google/gemma", "google/medgemma"))
        assert meta["gated"] == ("manual" if gated else False), repo_id
    assert sorted(p.name for p in (HUB / "facebook/opt-1.3b").iterdir()) == [".hub.json", "config.json"]  # does not build
