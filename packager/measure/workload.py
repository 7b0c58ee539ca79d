"""The workload: conversations rendered with the model's own chat template (thinking off), so the draft is
measured on what a chat app feeds the target (generation stops at the stop ids), and prompts a user gives
(--prompts, a spec's [verify] prompts)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from .. import resources
from ..errors import FileSystemError, InvalidOption, PackagerError, PairIncompatible, shorten
from ..infra.userfile import PROMPTS_BYTES, read_bytes

Messages = tuple[tuple[str, str], ...]  # (role, content) turns


@dataclass(frozen=True)
class Prompt:
    category: str
    language: str
    messages: Messages


def builtin() -> tuple[Prompt, ...]:
    """The built-in workload: prose, code, Q&A and chat in several languages (packager/data/pair_prompts.json)."""
    return tuple(
        Prompt(item["category"], item["language"], tuple((m["role"], m["content"]) for m in item["messages"]))
        for item in resources.pair_prompts()
    )


def spread(items: tuple[Prompt, ...], count: int) -> tuple[Prompt, ...]:
    """`count` of the items, evenly spaced through them, in their order (the built-in file groups them by category,
    then language: a spread keeps every kind); all of them when there are no more."""
    if count >= len(items):
        return items
    return tuple(items[index * len(items) // count] for index in range(count))


def from_texts(texts: tuple[str, ...]) -> tuple[Prompt, ...]:
    """Prompts of a --prompts file: each is one user turn."""
    return tuple(Prompt("user", "?", (("user", text),)) for text in texts)


def chat_template(path: Path) -> str:
    """The chat template of a checkpoint (tokenizer_config.json or chat_template.jinja) or an MNN model folder
    (llm_config.json's jinja); "" when it has none."""
    if (path / "llm_config.json").is_file() and not (path / "tokenizer_config.json").is_file():
        jinja = json.loads((path / "llm_config.json").read_text(encoding="utf-8")).get("jinja") or {}
        return str(jinja.get("chat_template") or "")
    config = path / "tokenizer_config.json"
    template = json.loads(config.read_text(encoding="utf-8")).get("chat_template") if config.is_file() else None
    if not template and (path / "chat_template.jinja").is_file():
        template = (path / "chat_template.jinja").read_text(encoding="utf-8")
    return str(template or "")


@cache
def _compiled(template: str) -> Any:
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    # The environment transformers' apply_chat_template uses, so the text is the one the checkpoint's own
    # tokenizer would produce.
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.filters["tojson"] = lambda value, indent=None, **_: json.dumps(value, ensure_ascii=False, indent=indent)
    env.globals["raise_exception"] = _raise
    return env.from_string(template)


def _raise(message: str) -> None:
    raise PairIncompatible(f"the chat template refused the prompt ({shorten(message)})")


def render(template: str, prompt: Prompt, variables: Mapping[str, Any]) -> str:
    """The conversation as the model sees it, ready for the assistant's turn, with the family's template variables
    (`variables`, its `template_variables`): Llama 3's bos_token, Qwen3's enable_thinking switched off."""
    if not template:
        raise PairIncompatible(
            "the target has no chat template to render the workload with",
            "pair checkpoints or bundles that carry their chat template",
        )
    messages = [{"role": role, "content": content} for role, content in prompt.messages]
    return str(
        _compiled(template).render(
            messages=messages,
            add_generation_prompt=True,
            tools=None,
            **variables,
        )
    )


def prompts_from_file(
    path: Path, named: str = "--prompts", error: type[PackagerError] = InvalidOption
) -> tuple[str, ...]:
    """One prompt per line, or a JSON list / {"prompts": [...]} of non-empty strings. `named` says where the path
    was given ("--prompts", or "<spec>: [verify] prompts") and `error` is what a bad file raises (a missing or
    unreadable --prompts file is a FileSystemError; one the spec names is the spec's error)."""
    where = f"{named} {shorten(str(path), 120)}"
    data = read_bytes(path, PROMPTS_BYTES, what=named, unreadable=FileSystemError if error is InvalidOption else error)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{where} is not UTF-8 text ({exc.reason} at byte {exc.start})", _PROMPTS_HINT) from None
    if text.lstrip().startswith(("[", "{")):
        try:
            data = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as exc:
            reason = exc.msg if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
            raise error(f"{where} is not valid JSON ({reason})", _PROMPTS_HINT) from None
        prompts = data.get("prompts") if isinstance(data, dict) else data
    else:
        prompts = [line for line in text.splitlines() if line.strip()]
    if not isinstance(prompts, list) or not all(isinstance(p, str) and p.strip() for p in prompts):
        raise error(f"{where} must hold a list of non-empty strings", _PROMPTS_HINT)
    if not prompts:
        raise error(f"{where} holds no prompts", _PROMPTS_HINT)
    return tuple(prompts)


def spec_prompts(spec: Any) -> tuple[str, ...] | None:
    """The prompts of a release spec's [verify] prompts (None: the built-in workload), refused as the spec's."""
    if spec is None or spec.verify_prompts is None:
        return None
    from ..errors import SpecError

    return prompts_from_file(spec.verify_prompts, f"{spec.path or 'the release spec'}: [verify] prompts", SpecError)


_PROMPTS_HINT = 'give one prompt per line, or a JSON list of strings, or {"prompts": [...]}'
