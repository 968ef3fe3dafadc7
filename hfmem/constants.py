"""Defaults that are not a training setting, defined once for every module that needs them."""

from __future__ import annotations

DEFAULT_SEQ_LEN = 2048
"""The sequence length estimated when none is set (capped at the model's max_position_embeddings)."""

HUB_TIMEOUT_S = 10.0
"""Seconds per Hub request before it is retried (the CLI's --timeout default)."""

MAX_SHARDS = 2_048
"""Shard files a safetensors index may name. The largest real checkpoints have a few hundred: Llama-3.1-405B 191
(model-00191-of-00191.safetensors), DeepSeek-V3 163 (model-00163-of-000163.safetensors); an index naming more is
refused before any header is read (the index's own 50 MB bound admits about a million names)."""

MAX_HUB_REQUESTS = 8_192
"""Hub requests one model may make, retries included (a redirect to the CDN is followed within its request): twice
what a model at MAX_SHARDS takes when every header needs two reads (the model's description, config.json, the
index, then two reads a shard: 4,099). Past it the model fails rather than keep a Hub or mirror busy."""

HFU_STACKS = ("any", "megatron")
"""Whose published utilisation figures can set the default HFU (the hfu_stack setting): every cited source's
median on the GPU's architecture, or one training stack's own (compute.roofline's sources tag theirs)."""
