"""Running llmexport and MNN's converter fenced: sandbox, child worker, forked copies."""
