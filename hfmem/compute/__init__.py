"""Compute and time: matmul FLOPs per token from the architecture, and a roofline time per training step."""
