"""The streaming converter: graph cache, quantization, weight writing."""
