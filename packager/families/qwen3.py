"""Qwen3 (dense): the family packager has converted from the start."""

from __future__ import annotations

# Qwen3's two end tokens: <|im_end|> ends a chat turn, <|endoftext|> ends plain text.
QWEN3_STOP_IDS = (151645, 151643)
