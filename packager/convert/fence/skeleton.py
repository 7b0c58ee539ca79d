"""The weightless model llmexport traces in graph-only mode (`--skip_weight`), built to trace like the checkpoint.

Runs inside the converter worker, after llmexport is imported. Memory stays flat in the model's size: the
linears' and the embedding's values never reach the graph (llmexport traces every linear as a FakeLinear and
embeds only a three-token sample), so their memory is allocated and never written.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Rows of a linear or the embedding that get values (the sample llmexport embeds reads rows 0-2).
_SAMPLE_ROWS = 8


def like_checkpoint(dtype: str, classes: dict[str, int], fills: tuple[Callable[[Any], None], ...] = ()) -> None:
    """Make llmexport's weightless model trace to the same graph the real checkpoint traces to.

    llmexport builds it with from_config (float32) and leaves its memory uninitialized. Two things of the
    weights do shape the graph: the dtype (casts are traced) and which tensors are equal (the ONNX exporter
    folds identical initializers into one, e.g. the all-ones norms of an untrained model). So the skeleton is
    built in the dtype the real path loads, and each traced parameter is filled with a value of its equality
    class (classes come from the checkpoint's own tensors; unequal tensors get unequal values). `fills` write the
    buffers a family's graph reads, which to_empty left unwritten too (packager.convert.fence.patches.FILLS).
    """
    import torch
    import transformers

    original = transformers.AutoModelForCausalLM.from_config.__func__  # type: ignore[attr-defined]

    def from_config(cls: Any, config: Any, **kwargs: Any) -> Any:
        kwargs.setdefault("dtype", getattr(torch, dtype))
        model = original(cls, config, **kwargs)
        to_empty = model.to_empty
        model.to_empty = lambda **kw: _fill(to_empty(**kw), classes, fills)
        return model

    transformers.AutoModelForCausalLM.from_config = classmethod(from_config)  # type: ignore[method-assign,assignment]  # patched for the trace


def _fill(model: Any, classes: dict[str, int], fills: tuple[Callable[[Any], None], ...]) -> Any:
    import torch

    embed = model.get_input_embeddings()
    # llmexport turns the embedding to float32 after loading, which writes a full copy; made float32 here (still
    # unwritten memory), that conversion does nothing. The traced graph is the same: the embedding is not in it.
    embed._parameters["weight"] = torch.nn.Parameter(torch.empty(embed.weight.shape, dtype=torch.float32))
    if getattr(model.config, "tie_word_embeddings", False):
        # to_empty gave the tied pair separate storage; make them one Parameter again, as loading does
        # (set in the module's dict: accelerate's empty-weights context would move a re-registered one to meta).
        model.get_output_embeddings()._parameters["weight"] = embed.weight
    untraced = {
        id(p)
        for m in model.modules()
        if isinstance(m, (torch.nn.Linear, torch.nn.Embedding))
        for p in m.parameters(recurse=False)
    }
    with torch.no_grad():
        for fill in fills:
            fill(model)
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


# The facts of llmexport's tokenizer its graph-only export reads, and how each is read from the real one.
_FACTS: dict[str, Callable[[Any], Any]] = {
    "chat_template": lambda t: t.get_chat_template(),
    "bos_token": lambda t: t.bos_token,
    "eos_token": lambda t: t.eos_token,
}


class FactsTokenizer:
    """Stands in for llmexport's tokenizer where only its chat template and bos/eos tokens are read: they come
    from `facts` (which may wait for them); when `facts` gives None, or anything else is read, the real
    tokenizer is loaded with `load` and answers instead."""

    _real: Any  # llmexport's tokenizer once loaded

    def __init__(self, load: Callable[[], Any], facts: Callable[[], dict[str, Any] | None]) -> None:
        self._load, self._facts, self._real = load, facts, None
        self._stop_ids: list[int] = []

    def _loaded(self) -> Any:
        if self._real is None:
            self._real = self._load()
            self._real.stop_ids = self._stop_ids
        return self._real

    @property
    def stop_ids(self) -> list[int]:
        return self._stop_ids

    @stop_ids.setter
    def stop_ids(self, ids: list[int]) -> None:  # packager sets its own stop ids; a loaded tokenizer gets them too
        self._stop_ids = ids
        if self._real is not None:
            self._real.stop_ids = ids

    def _fact(self, name: str) -> Any:
        known = self._facts()
        return known[name] if known is not None else _FACTS[name](self._loaded())

    def get_chat_template(self) -> Any:
        return self._fact("chat_template")

    @property
    def bos_token(self) -> Any:
        return self._fact("bos_token")

    @property
    def eos_token(self) -> Any:
        return self._fact("eos_token")

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._loaded(), name)


def tokenizer_facts(facts: Callable[[], dict[str, Any] | None]) -> None:
    """In graph-only mode llmexport's exporter loads the tokenizer (about a second, on the graph's critical path)
    only to read its chat template and bos/eos tokens (llm_config.json's `jinja`). The forked copy beside the
    graph loads the same tokenizer anyway and sends them; `facts` waits for them."""
    import llmexport  # the module llmexport/llmexport.py, first on sys.path

    real = llmexport.LlmTokenizer

    class _Loader:
        @staticmethod
        def from_pretrained(path: str, model_type: str, **kwargs: Any) -> FactsTokenizer:
            return FactsTokenizer(lambda: real.from_pretrained(path, model_type=model_type, **kwargs), facts)

    llmexport.LlmTokenizer = _Loader


def facts_of(tokenizer: Any) -> dict[str, Any]:
    """What FactsTokenizer stands in for, read from llmexport's own tokenizer."""
    return {name: read(tokenizer) for name, read in _FACTS.items()}
