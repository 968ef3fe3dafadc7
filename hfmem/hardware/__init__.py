"""The GPU catalogue (gpus.json) and user-defined GPU specs."""
