"""Checkpoint -> MNN bundle conversion."""
