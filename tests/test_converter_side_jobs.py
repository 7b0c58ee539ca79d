"""The converter worker's side job (a forked copy) and the tokenizer stand-in its early message feeds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from packager.convert.fence.forked import Forked, Send
from packager.convert.fence.sandbox import Fence
from packager.convert.fence.skeleton import FactsTokenizer


def _fork(tmp_path: Path, job: Any) -> Forked:
    return Forked(Fence(tmp_path), job)  # the fence is not installed here: only its own fork is used


def test_the_copy_sends_its_early_message_before_its_result(tmp_path: Path) -> None:
    def job(send: Send) -> dict[str, Any]:
        send({"facts": 1})
        send({"facts": 2})  # only the first early message is sent
        return {"done": True}

    side = _fork(tmp_path, job)
    assert side.early() == {"facts": 1}
    assert side.early() == {"facts": 1}
    assert side.result() == {"done": True}


def test_a_copy_without_an_early_message_still_gives_its_result(tmp_path: Path) -> None:
    side = _fork(tmp_path, lambda send: {"done": True})
    assert side.early() is None
    assert side.result() == {"done": True}


@pytest.mark.parametrize("early", [False, True])
def test_a_failing_copy_reads_as_none(tmp_path: Path, early: bool) -> None:
    def job(send: Send) -> dict[str, Any]:
        if early:
            send({"facts": 1})
        raise RuntimeError("the side job broke")

    side = _fork(tmp_path, job)
    assert side.early() == ({"facts": 1} if early else None)
    assert side.result() is None


class _Real:
    loads = 0

    def __init__(self) -> None:
        _Real.loads += 1
        self.bos_token, self.eos_token, self.vocab_size = None, "<|im_end|>", 151669
        self.stop_ids: list[int] = []

    def get_chat_template(self) -> str:
        return "{{ real }}"


def test_the_stand_in_answers_from_the_facts_without_loading_the_tokenizer() -> None:
    _Real.loads = 0
    facts = {"chat_template": "{{ sent }}", "bos_token": None, "eos_token": "<|im_end|>"}
    stand_in = FactsTokenizer(_Real, lambda: facts)
    stand_in.stop_ids = [151645]
    assert hasattr(stand_in, "get_chat_template")
    assert (stand_in.get_chat_template(), stand_in.bos_token, stand_in.eos_token) == ("{{ sent }}", None, "<|im_end|>")
    assert _Real.loads == 0


def test_the_stand_in_loads_the_tokenizer_when_the_facts_are_missing_or_more_is_read() -> None:
    _Real.loads = 0
    without = FactsTokenizer(_Real, lambda: None)
    without.stop_ids = [151645]
    assert (without.get_chat_template(), without.bos_token, without.eos_token) == ("{{ real }}", None, "<|im_end|>")
    assert _Real.loads == 1 and without._loaded().stop_ids == [151645]
    without.stop_ids = [151643, 151645]
    assert without._loaded().stop_ids == [151643, 151645] and _Real.loads == 1
    more = FactsTokenizer(_Real, lambda: {"chat_template": "", "bos_token": None, "eos_token": None})
    assert getattr(more, "_private", "absent") == "absent" and _Real.loads == 1  # private names load nothing
    assert more.vocab_size == 151669 and _Real.loads == 2


_HEAP_PROBE = """
import os, sys
from pathlib import Path
from packager import resources
from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.tokenizer import hf_encodings

def rss():
    return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

before = rss()
inspect_checkpoint(Path(sys.argv[1]))
after_inspect = rss()
hf_encodings(Path(sys.argv[1]) / "tokenizer.json", resources.tokenizer_corpus())
print(after_inspect - before, rss() - after_inspect)
"""


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc")
def test_the_cli_gives_back_the_memory_of_the_tokenizer_it_read(tiny_checkpoint: Path) -> None:
    # Parsing tokenizer.json grew the CLI by 36 MB and the tokenizers library by 110 MB for the whole conversion
    # (the Qwen3 tokenizer), counted in the conversion's peak memory; both are given back.
    import subprocess
    import sys

    out = subprocess.run(
        [sys.executable, "-c", _HEAP_PROBE, str(tiny_checkpoint)], capture_output=True, text=True, check=True
    )
    inspect_growth, reference_growth = (int(x) for x in out.stdout.split())
    assert inspect_growth < 16 * 2**20 and reference_growth < 32 * 2**20, out.stdout
