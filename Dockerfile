# hfmem as a slim, CPU-only image: for the GitHub Action (`docker://` steps) and for batch jobs.
#   docker build -t hfmem .
#   docker run --rm -e HF_TOKEN hfmem meta-llama/Llama-2-7b-hf --format json
#   docker run --rm -v "$PWD:/work" -w /work hfmem scan models.txt --out results.jsonl
# torch is the CPU build, taken from PyTorch's CPU wheel index (hfmem only uses the meta device, so no
# GPU build is needed and the image stays small); --build-arg TORCH_INDEX_URL=... picks another index.
# No USER instruction: GitHub runs Docker actions as root to reach $GITHUB_WORKSPACE; for batch jobs,
# `docker run --user 1000:1000` works too, since the caches live in the world-writable /cache.
FROM python:3.12-slim-bookworm

ARG TORCH_VERSION=2.13.0
ARG TORCH_INDEX_URL=https://download.pytorch.org/whl/cpu

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    HF_HOME=/cache/huggingface \
    HFMEM_CACHE_DIR=/cache/hfmem

# git: the Action's diff mode runs `git show <base sha>:<path>` in the mounted workspace, which belongs to
# another user (hence safe.directory). Debian's git is left unpinned (DL3008): a pinned version leaves the
# mirror with the next point release and breaks the build, while the base image tag fixes the release.
# hadolint ignore=DL3008
RUN apt-get update \
    && apt-get install -y --no-install-recommends git \
    && rm -rf /var/lib/apt/lists/* \
    && git config --system --add safe.directory '*'

RUN pip install --no-cache-dir --index-url "${TORCH_INDEX_URL}" "torch==${TORCH_VERSION}" \
    && mkdir -p /cache \
    && chmod 1777 /cache

COPY pyproject.toml README.md /tmp/hfmem/
COPY hfmem /tmp/hfmem/hfmem
RUN pip install --no-cache-dir /tmp/hfmem \
    && rm -rf /tmp/hfmem

WORKDIR /work
ENTRYPOINT ["hfmem"]
CMD ["--help"]
