"""Gemma 3 (270m, 1b; the text part of 4b and up): sliding-window and global layers with their own rope bases,
(1 + w) RMSNorms around each sublayer, embeddings scaled by sqrt(hidden), a SentencePiece-style BPE with a BOS.

llmexport 0.0.5 gives every layer the local rope base (its dual rotary exists only for gemma4); packager's
converter gives each layer type transformers' own frequencies (packager.convert.fence.worker). The sliding window
needs nothing: llmexport writes `attention_type: mix` and a mask per layer kind, and MNN keeps the whole KV cache
and masks it, so rejected draft tokens roll back as for any full-attention model."""

from __future__ import annotations

from .base import Family, Layout, License

# The Gemma Terms of Use (section 3.1) ask every distribution to carry this notice.
GEMMA_TERMS = License(
    "gemma",
    "Gemma Terms of Use",
    "https://ai.google.dev/gemma/terms",
    notice="Gemma is provided under and subject to the Gemma Terms of Use found at ai.google.dev/gemma/terms",
)

GEMMA3 = Family(
    name="gemma3",
    title="Gemma 3",
    model_types=("gemma3_text",),
    markers={"<bos>": 2, "<start_of_turn>": 105, "<end_of_turn>": 106},
    # <end_of_turn> (106) ends a chat turn, <eos> (1) plain text.
    stop_tokens=("<end_of_turn>", "<eos>"),
    known_stop_ids=(106, 1),
    layout=Layout(qk_norm=True, qkv_bias=False, norm_offset=1.0, sandwich_norms=True),
    license=GEMMA_TERMS,
    architecture=(
        "Gemma 3 decoder (five sliding-window layers to each global layer; rope bases 10,000 local and 1,000,000 "
        "global; (1 + w) RMSNorms before and after each sublayer and on q and k; GeGLU; embeddings scaled by "
        "sqrt(hidden))"
    ),
    bos_token="<bos>",
    # 270m and 1b: default rope for both layer kinds; 4b and up scale the global layers' rope linearly (factor 8).
    rope_types=("default", "linear"),
    template_variables={"bos_token": "<bos>"},
    # A SentencePiece-style BPE (byte fallback, "▁" for spaces): MNN's text format hard-codes Qwen2's byte-level
    # pre-tokenizer, so only the pipeline format reads it right.
    tokenizer_formats=("pipeline",),
    layer_types=("sliding_attention", "full_attention"),
    beyond_rows=("<image_soft_token>",),
    multimodal_types=("gemma3",),  # Gemma 3 4b and up as released: Gemma3ForConditionalGeneration
    tags=("gemma3", "gemma"),
    base_models=("google/gemma-3-270m-it", "google/gemma-3-1b-it"),
    targets=("google/gemma-3-4b-it", "google/gemma-3-12b-it", "google/gemma-3-27b-it"),
    compatible_targets={
        "gemma3_4b": {"enabled": True},
        "gemma3_12b": {"enabled": True},
        "gemma3_27b": {"enabled": True},
    },
    # llmexport's exporter in MNN's tree writes precision "normal" for Gemma 3: its activations overflow fp16.
    runtime={"precision": "normal"},
    sampling="Gemma 3 instruction-tuned models ship top-k 64, top-p 0.95 (temperature 1.0)",
)
