"""The model card: rendering, measurements, Hub evaluation results."""
