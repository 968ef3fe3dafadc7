"""Batch scans: model lists, shards, concurrent analysis into JSONL, and CSV/markdown exports."""
