"""Serving memory: the weights an inference engine loads, its KV cache per token and the state per sequence, and
what each engine (vLLM, SGLang, llama.cpp, transformers) reserves before it sizes the cache. Pure arithmetic."""
