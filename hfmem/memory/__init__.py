"""Training memory: settings, model state, activations, the per-GPU estimate, fit matrices and fit advice."""
