"""Everything that reads a model from outside: Hub client, safetensors headers, local files, model references,
hfmem's cache."""
