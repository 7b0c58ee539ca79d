"""The weightless model llmexport traces in graph-only mode (`--skip_weight`), built to trace like the checkpoint.

Runs inside the converter worker, after llmexport is imported. Memory stays flat in the model's size: the
linears' and the embedding's values never reach the graph (llmexport traces every linear as a FakeLinear and
embeds only a three-token sample), so their memory is allocated and never written.
"""

from __future__ import annotations

from typing import Any

# Rows of a linear or the embedding that get values (the sample llmexport embeds reads rows 0-2).
_SAMPLE_ROWS = 8


def like_checkpoint(dtype: str, classes: dict[str, int]) -> None:
    """Make llmexport's weightless model trace to the same graph the real checkpoint traces to.

    llmexport builds it with from_config (float32) and leaves its memory uninitialized. Two things of the
    weights do shape the graph: the dtype (casts are traced) and which tensors are equal (the ONNX exporter
    folds identical initializers into one, e.g. the all-ones norms of an untrained model). So the skeleton is
    built in the dtype the real path loads, and each traced parameter is filled with a value of its equality
    class (classes come from the checkpoint's own tensors; unequal tensors get unequal values).
    """
    import torch
    import transformers

    original = transformers.AutoModelForCausalLM.from_config.__func__  # type: ignore[attr-defined]

    def from_config(cls: Any, config: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("dtype", getattr(torch, dtype))
        model = original(cls, config, **kwargs)
        to_empty = model.to_empty
        model.to_empty = lambda **kw: _fill(to_empty(**kw), classes)
        return model

    transformers.AutoModelForCausalLM.from_config = classmethod(from_config)  # type: ignore[method-assign]


def _fill(model: Any, classes: dict[str, int]) -> Any:
    import torch

    embed = model.get_input_embeddings()
    # llmexport turns the embedding to float32 after loading, which writes a full copy; made float32 here (still
    # unwritten memory), that conversion does nothing. The traced graph is the same: the embedding is not in it.
    embed._parameters["weight"] = torch.nn.Parameter(torch.empty(embed.weight.shape, dtype=torch.float32))
    if getattr(model.config, "tie_word_embeddings", False):
        # to_empty gave the tied pair separate storage; make them one Parameter again, as loading does
        # (set in the module's dict: accelerate's empty-weights context would move a re-registered one to meta).
        model.get_output_embeddings()._parameters["weight"] = embed.weight
    untraced = {id(p) for m in model.modules() if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
                for p in m.parameters(recurse=False)}
    with torch.no_grad():
        for index, (name, param) in enumerate(model.named_parameters()):
            values = param[:_SAMPLE_ROWS] if id(param) in untraced else param
            values.zero_()
            flat = values.view(-1)
            cls = classes.get(name, len(classes) + index)
            flat[0] = float(cls % 200 + 1)
            if flat.numel() > 1:
                flat[1] = float(cls // 200 + 1)
    return model


def lengths_only(converter: Any) -> None:
    """In skip-weight mode llmexport's quant() returns zero-filled tensors whose lengths alone it uses; have it
    allocate them without writing (zero-filling them cost seconds and memory in proportion to the model)."""
    import torch
    import utils.mnn_converter as module

    class _Unwritten:
        zeros = staticmethod(torch.empty)

        def __getattr__(self, name: str) -> Any:
            return getattr(torch, name)

    original = converter.quant

    def quant(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not self.exporter.args.skip_weight:
            return original(self, *args, **kwargs)
        module.torch = _Unwritten()
        try:
            return original(self, *args, **kwargs)
        finally:
            module.torch = torch

    converter.quant = quant


def without_discarded_tokenizer() -> None:
    """llmexport's model loader reads the tokenizer (about a second) into an attribute the exporter replaces
    with its own right after; in graph-only mode that first one is not read."""
    import utils.model

    class _Discarded:
        @staticmethod
        def from_pretrained(*args: Any, **kwargs: Any) -> None:
            return None

    utils.model.LlmTokenizer = _Discarded
