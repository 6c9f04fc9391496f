"""Frozen, validated inputs (model, hardware, training, layout) and their loaders."""
