"""`convert --lookahead [CORPUS]`: a bundle of any kind configured for MNN's lookahead, with MNN's defaults written
out and the corpus shipped as lookup_file.txt; a corpus MNN could not use, or packager must not read, is refused
before any work (one line, exit 80 or 81, nothing written); lookahead next to an EAGLE head is refused; validate
judges what MNN would silently skip; checksum, sign, card, upload and pull carry the corpus; MNN loads the bundle and
decodes the same greedy tokens as plain decoding, and really drafts from the corpus."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from packager.bundle.kinds import FILES, LOOKUP, TARGET, release_names
from packager.bundle.lookahead import MAX_CORPUS, SETTINGS, read_corpus
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert, lookahead_plan
from packager.spec import model as spec_module
from packager.validate import validate
from tests import shared
from tests.conftest import run_cli
from tests.inprocess import run_packager
from tests.models import build_qwen3
from tests.signkeys import Keys, keys

TEXT = (
    "Lookahead drafts the tokens that followed the same words before.\nThe quick brown fox jumps over the lazy dog.\n"
)
PROMPTS = ("The capital of France is", "def fibonacci(n):\n", "Hello world, hello world, hello")


def _corpus(folder: Path, data: bytes | str = TEXT, name: str = "corpus.txt") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture(scope="module")
def corpus() -> Path:
    return shared.once("checkpoint", ["lookahead corpus", TEXT], _corpus)


def _sharpen(folder: Path, tie: bool) -> Path:
    """Damp every layer's output (o_proj, down_proj x 0.05) so the token's own embedding dominates the logits: the
    greedy choice then wins by ~3.5 logits, where random weights tie within the noise that separates one decode step
    from a batched verification. Tied, the model repeats its last token; untied, lm_head is the embedding shifted by
    one row, so it counts up from it (t, t+1, t+2, ...)."""
    import torch
    from safetensors.torch import load_file, save_file

    path = folder / "model.safetensors"
    state = load_file(str(path))
    for name, tensor in state.items():
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            state[name] = (tensor.float() * 0.05).to(tensor.dtype)
    if not tie:
        state["lm_head.weight"] = torch.roll(state["model.embed_tokens.weight"], 1, 0).clone()
    path.unlink()
    save_file(state, str(path), metadata={"format": "pt"})
    return folder


@pytest.fixture(scope="module")
def sharp_tied() -> Path:
    return shared.once(
        "checkpoint", ["sharp", True], lambda d: _sharpen(build_qwen3(d / "qwen3-tied", seed=3), tie=True)
    )


@pytest.fixture(scope="module")
def sharp_untied() -> Path:
    return shared.once(
        "checkpoint",
        ["sharp", False],
        lambda d: _sharpen(build_qwen3(d / "qwen3-untied", seed=3, tie=False), tie=False),
    )


@pytest.fixture(scope="module")
def draft(sharp_tied: Path, corpus: Path) -> dict[str, Any]:
    """A draft converted through the CLI with --lookahead=CORPUS (--json summary)."""

    def build(folder: Path) -> dict[str, Any]:
        out = folder / "bundle"
        done = run_cli("convert", str(sharp_tied), "--lookahead=" + str(corpus), "--out", str(out), "--json", "--quiet")
        assert done.returncode == 0, done.stderr
        return {"out": out, "summary": json.loads(done.stdout)}

    return shared.once("conversion", ["lookahead draft", shared.folder_digest(sharp_tied)], build)


@pytest.fixture(scope="module")
def bare_draft(sharp_tied: Path) -> Path:
    """--lookahead alone (no corpus) and --lookahead-length 5, through the CLI."""

    def build(folder: Path) -> Path:
        out = folder / "bundle"
        done = run_cli(
            "convert", str(sharp_tied), "--out", str(out), "--lookahead", "--lookahead-length", "5", "--quiet"
        )
        assert done.returncode == 0 and "no corpus (the prompt's own n-grams)" in done.stdout, done.stderr
        return out

    return shared.once("conversion", ["lookahead bare draft", shared.folder_digest(sharp_tied)], build)


@pytest.fixture(scope="module")
def target(sharp_untied: Path, corpus: Path) -> ConvertResult:
    """An untied two-layer target with a corpus and --lookahead-length 4, through the library."""
    result: ConvertResult = shared.converted(sharp_untied, kind="target", lookahead=corpus, lookahead_length=4)
    return result


def _config(bundle: Path) -> dict[str, Any]:
    return json.loads((bundle / "config.json").read_text())


# --- what a lookahead bundle is ---------------------------------------------------------------------------------


@pytest.mark.converter
def test_a_draft_with_a_corpus_writes_mnn_s_defaults_and_ships_the_corpus(draft: dict[str, Any], corpus: Path) -> None:
    bundle, summary = draft["out"], draft["summary"]
    assert sorted(p.name for p in bundle.iterdir()) == sorted([*FILES, LOOKUP])
    assert (bundle / LOOKUP).read_bytes() == corpus.read_bytes() and not (bundle / LOOKUP).is_symlink()
    config = _config(bundle)
    assert {k: config[k] for k in SETTINGS} == {
        "speculative_type": "lookahead",
        "draft_predict_length": 3,
        "draft_match_strictness": "low",
        "draft_selection_rule": "freqxlen",
        "ngram_match_maxlen": 4,
        "ngram_update": False,
    }
    assert config["lookup_file"] == LOOKUP
    # config.json is what MNN loads by default; the app's draftmodel recipe and the draft's own configs stay
    assert json.loads((bundle / "config_opencl.json").read_text())["speculative_type"] == "draftmodel"
    assert "speculative_type" not in json.loads((bundle / "config_cpu.json").read_text())
    runtime = json.loads((bundle / "runtime_config.json").read_text())
    assert "speculative_type lookahead first runs in MNN 3.2.0" in runtime["min_mnn_engine"]["because"]
    assert summary["lookahead"]["corpus"]["bytes"] == len(TEXT.encode()) and LOOKUP in summary["files"]


@pytest.mark.converter
def test_provenance_records_the_settings_and_the_corpus_digest(draft: dict[str, Any], corpus: Path) -> None:
    from packager.infra.hashing import xxh3_128_file

    record = json.loads(Path(draft["summary"]["provenance"]).read_text())
    assert record["lookahead"]["settings"]["ngram_match_maxlen"] == 4
    assert record["lookahead"]["corpus"] == {
        "path": str(corpus),
        "file": LOOKUP,
        "bytes": corpus.stat().st_size,
        "xxh3_128": xxh3_128_file(corpus),
    }
    assert record["bundle_xxh3_128"][LOOKUP] == xxh3_128_file(corpus)
    done = run_cli("validate", str(draft["out"]), "--json")  # the record is checked against its schema too
    assert done.returncode == 0, done.stdout


@pytest.mark.converter
def test_validate_passes_a_lookahead_draft_and_says_its_kind(draft: dict[str, Any]) -> None:
    done = run_cli("validate", str(draft["out"]), "--json", "--strict")
    assert done.returncode == 0, done.stdout
    assert json.loads(done.stdout)["checked"][0]["bundle_kind"] == "draft"


@pytest.mark.converter
def test_a_target_with_a_corpus_and_its_own_draft_length(target: ConvertResult) -> None:
    bundle = target.out
    assert sorted(p.name for p in bundle.iterdir()) == sorted([*TARGET.files, "embeddings_bf16.bin", LOOKUP])
    config = _config(bundle)
    assert config["speculative_type"] == "lookahead" and config["draft_predict_length"] == 4
    assert config["lookup_file"] == LOOKUP and "hidden_states" not in config
    report = validate(bundle)
    assert report.kind == "target" and not report.findings, report.findings
    assert target.lookahead is not None and target.lookahead.corpus is not None


@pytest.mark.converter
def test_lookahead_alone_ships_no_corpus_and_names_none(bare_draft: Path) -> None:
    config = _config(bare_draft)
    assert config["speculative_type"] == "lookahead" and config["draft_predict_length"] == 5
    assert "lookup_file" not in config and not (bare_draft / LOOKUP).exists()
    assert validate(bare_draft).ok(strict=True), validate(bare_draft).findings


# --- the spec's [convert] lookahead -----------------------------------------------------------------------------


def _spec(folder: Path, text: str) -> spec_module.ReleaseSpec:
    path = folder / "release.toml"
    path.write_text(text, encoding="utf-8")
    return spec_module.load(path)


def test_the_spec_names_a_corpus_relative_to_itself_and_the_flag_wins(tmp_path: Path) -> None:
    _corpus(tmp_path / "data")
    spec = _spec(tmp_path, '[convert]\nlookahead = "data/corpus.txt"\n[runtime.main]\ndraft_predict_length = 6\n')
    plan = lookahead_plan(ConvertRequest(checkpoint=tmp_path, out=tmp_path / "out", spec=spec), TARGET)
    assert plan is not None and plan.corpus is not None and plan.corpus.data == TEXT.encode()
    assert plan.keys()["draft_predict_length"] == 6 and plan.keys()["lookup_file"] == LOOKUP
    flagged = lookahead_plan(
        ConvertRequest(checkpoint=tmp_path, out=tmp_path / "out", spec=spec, lookahead=True, lookahead_length=2), TARGET
    )
    assert flagged is not None and flagged.corpus is None and flagged.keys()["draft_predict_length"] == 2
    plain = _spec(tmp_path, "[convert]\nlookahead = true\n")
    plan = lookahead_plan(ConvertRequest(checkpoint=tmp_path, out=tmp_path / "out", spec=plain), TARGET)
    assert plan is not None and plan.corpus is None and "lookup_file" not in plan.keys()  # noqa: SIM118 - keys() is a method of Lookahead
    off = _spec(tmp_path, "[convert]\nlookahead = false\n")
    assert lookahead_plan(ConvertRequest(checkpoint=tmp_path, out=tmp_path / "out", spec=off), TARGET) is None


@pytest.mark.parametrize("value", ['""', "3", "[1]"])
def test_the_spec_refuses_a_lookahead_that_is_neither_true_nor_a_path(tmp_path: Path, value: str) -> None:
    with pytest.raises(spec_module.SpecError, match="convert.lookahead"):
        _spec(tmp_path, f"[convert]\nlookahead = {value}\n")


def test_a_link_to_a_corpus_is_followed_and_its_bytes_shipped(tmp_path: Path) -> None:
    real = _corpus(tmp_path / "elsewhere")
    (tmp_path / "link.txt").symlink_to(real)
    assert read_corpus(tmp_path / "link.txt", tmp_path / "out").data == TEXT.encode()


# --- refusals ---------------------------------------------------------------------------------------------------


def _pipe(folder: Path) -> Path:
    os.mkfifo(folder / "pipe")
    return folder / "pipe"


def _inside_out(folder: Path) -> Path:
    return _corpus(folder / "out")


def _link_into_out(folder: Path) -> Path:
    (folder / "link.txt").symlink_to(_corpus(folder / "out"))
    return folder / "link.txt"


CORPORA: dict[str, tuple[Any, int, str]] = {
    "missing": (lambda f: f / "nothing.txt", 80, "does not exist"),
    "a folder": (lambda f: f, 80, "is a folder"),
    "a pipe": (_pipe, 80, "a device, pipe or socket"),
    "inside --out": (_inside_out, 80, "lies inside --out"),
    "a link into --out": (_link_into_out, 80, "lies inside --out"),
    "empty": (lambda f: _corpus(f, b""), 81, "is empty"),
    "only whitespace": (lambda f: _corpus(f, b" \n\t\n"), 81, "holds only whitespace"),
    "a NUL byte": (lambda f: _corpus(f, b"text\0more text"), 81, "NUL byte at byte 4"),
    "not UTF-8": (lambda f: _corpus(f, "caf\u00e9 latin-1".encode("latin-1")), 81, "is not UTF-8 text"),
    "too large": (lambda f: _corpus(f, b"word " * (MAX_CORPUS // 5 + 1)), 81, "larger than 8 MiB"),
}


def _one_line(done: Any, code: int, text: str) -> None:
    assert done.returncode == code, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and text in lines[0] and "Traceback" not in done.stderr, done.stderr


@pytest.mark.parametrize("case", sorted(CORPORA))
def test_a_corpus_mnn_could_not_use_is_refused_before_any_work(case: str, sharp_tied: Path, tmp_path: Path) -> None:
    make, code, text = CORPORA[case]
    folder = tmp_path / "inputs"
    folder.mkdir()
    corpus = make(folder)
    out = folder / "out"
    before = sorted(p.name for p in out.iterdir()) if out.exists() else None
    done = run_packager("convert", str(sharp_tied), "--out", str(out), f"--lookahead={corpus}", "--force")
    _one_line(done, code, text)
    assert (sorted(p.name for p in out.iterdir()) if out.exists() else None) == before
    assert not any(folder.glob(".out*")) and not (folder / "out.provenance.json").exists()


def test_lookahead_with_an_eagle_head_is_refused_before_the_head_is_read(sharp_tied: Path, tmp_path: Path) -> None:
    out = tmp_path / "bundle"
    done = run_packager(
        "convert", str(sharp_tied), "--eagle", str(tmp_path / "no-head"), "--lookahead", "--out", str(out)
    )
    _one_line(done, 19, "a bundle has one speculative_type")
    assert not out.exists()


def test_a_spec_whose_runtime_sets_another_mode_is_refused(sharp_tied: Path, tmp_path: Path) -> None:
    spec = tmp_path / "release.toml"
    spec.write_text('[convert]\nlookahead = true\n[runtime.main]\nspeculative_type = "mtp"\n', encoding="utf-8")
    done = run_packager("convert", str(sharp_tied), "--spec", str(spec), "--out", str(tmp_path / "bundle"))
    _one_line(done, 17, "runtime.main.speculative_type is 'mtp'")
    assert not (tmp_path / "bundle").exists()


def test_a_lookahead_length_without_lookahead_is_refused(sharp_tied: Path, tmp_path: Path) -> None:
    done = run_packager("convert", str(sharp_tied), "--lookahead-length", "4", "--out", str(tmp_path / "bundle"))
    _one_line(done, 19, "--lookahead-length")


@pytest.mark.converter
def test_lookahead_before_the_checkpoint_says_it_took_the_checkpoint(sharp_tied: Path, tmp_path: Path) -> None:
    done = run_cli("convert", "--lookahead", str(sharp_tied), "--out", str(tmp_path / "bundle"))
    assert done.returncode == 2 and "--lookahead took" in done.stderr and "--lookahead=CORPUS" in done.stderr


# --- validate ---------------------------------------------------------------------------------------------------


def _broken(bundle: Path, folder: Path, **config: Any) -> Path:
    copy = folder / "broken"
    if copy.exists():
        shutil.rmtree(copy)
    shutil.copytree(bundle, copy)
    data = _config(copy)
    data.update(config)
    (copy / "config.json").write_text(json.dumps(data, indent=2))
    return copy


def _findings(bundle: Path) -> list[str]:
    return [f"{f.severity} {f.file}{f.pointer}: {f.message}" for f in validate(bundle, checksums=False).findings]


@pytest.mark.converter
def test_validate_finds_a_lookup_file_outside_the_bundle(draft: dict[str, Any], tmp_path: Path) -> None:
    for value in ("/etc/hostname", "../lookup_file.txt", "sub/../../lookup_file.txt"):
        found = _findings(_broken(draft["out"], tmp_path, lookup_file=value))
        assert any(
            f.startswith("error config.json/lookup_file:") and "not a path inside the bundle" in f for f in found
        ), found


@pytest.mark.converter
def test_validate_finds_a_missing_corpus_mnn_would_skip_without_a_word(draft: dict[str, Any], tmp_path: Path) -> None:
    broken = _broken(draft["out"], tmp_path)
    (broken / LOOKUP).unlink()
    found = _findings(broken)
    assert any(f.startswith("error config.json/lookup_file:") and "missing" in f for f in found), found
    other = _broken(draft["out"], tmp_path, lookup_file="corpus.txt")
    found = _findings(other)
    assert any(f.startswith("error config.json/lookup_file:") and "lookup_file.txt" in f for f in found), found


@pytest.mark.converter
@pytest.mark.parametrize("data, text", [(b"\xff\xfe text", "not UTF-8 text"), (b"", "is empty"), (b"a\0b", "NUL byte")])
def test_validate_finds_a_corpus_that_is_not_text(
    draft: dict[str, Any], tmp_path: Path, data: bytes, text: str
) -> None:
    broken = _broken(draft["out"], tmp_path)
    (broken / LOOKUP).write_bytes(data)
    found = _findings(broken)
    assert any(f.startswith(f"error {LOOKUP}:") and text in f for f in found), found


@pytest.mark.converter
def test_validate_warns_of_a_corpus_no_mode_reads(draft: dict[str, Any], tmp_path: Path) -> None:
    found = _findings(_broken(draft["out"], tmp_path, speculative_type=""))
    assert [f for f in found if f.startswith("warning")] == [
        f"warning {LOOKUP}: unused: MNN reads a lookahead corpus "
        'only with speculative_type "lookahead" (config.json '
        "has '')"
    ], found
    assert not [f for f in found if f.startswith("error")], found


@pytest.mark.converter
@pytest.mark.parametrize(
    "key, value, text",
    [
        ("ngram_match_maxlen", 12, "greater than the maximum of 8"),
        ("ngram_match_maxlen", "4", "is not of type 'integer'"),
        ("draft_match_strictness", "hgh", "did you mean 'high'?"),
        ("draft_selection_rule", "fifo", "allowed: 'freqxlen', 'fcfs'"),
        ("ngram_update", "yes", "is not of type 'boolean'"),
        ("draft_predict_length", 0, "less than the minimum of 1"),
    ],
)
def test_validate_checks_the_lookahead_keys_against_the_schema(
    draft: dict[str, Any], tmp_path: Path, key: str, value: Any, text: str
) -> None:
    found = _findings(_broken(draft["out"], tmp_path, **{key: value}))
    assert any(f.startswith(f"error config.json/{key}:") and text in f for f in found), found


# --- checksum, sign, card, upload and pull carry the corpus -----------------------------------------------------------


@pytest.mark.converter
def test_checksum_sign_card_upload_and_pull_carry_the_corpus(draft: dict[str, Any], tmp_path: Path, keys: Keys) -> None:
    from packager.bundle.checksum import read_manifest, write_manifest
    from packager.card.render import render
    from packager.trust.sign import sign
    from tests.localhub import LocalHub, upload
    from tests.specs import EXAMPLE

    bundle = tmp_path / "bundle"
    shutil.copytree(draft["out"], bundle)
    card = render(bundle, spec_module.load(EXAMPLE)).text
    assert f"| `{LOOKUP}` |" in card and "with the corpus `lookup_file.txt` (" in card
    assert "lookahead" in card.split("---")[1]  # a Hub tag
    (bundle / "README.md").write_text(card)
    assert LOOKUP in read_manifest(write_manifest(bundle).path)
    assert LOOKUP in release_names(bundle) and LOOKUP in sign(bundle, keys.private).files
    hub = LocalHub(tmp_path / "hub", tmp_path / "netguard.log").start()
    try:
        done = upload(hub, bundle, "me/lookahead")
        assert done.returncode == 0, done.stderr
        stored = {e["path"] for e in hub.api("/api/models/me/lookahead/tree/main")}
        pulled = hub.cli(
            "pull", "me/lookahead", str(tmp_path / "app"), "--public-key", str(keys.public), "--quiet", token=None
        )  # --files app: what an app downloads to run it
    finally:
        hub.stop()
    assert {LOOKUP, "README.md", "checksums.xxh128", "model.sig"} <= stored
    assert pulled.returncode == 0, pulled.stderr
    assert (tmp_path / "app" / LOOKUP).read_bytes() == (bundle / LOOKUP).read_bytes()


@pytest.mark.converter
def test_the_card_of_a_target_says_lookahead_and_a_draft_without_a_corpus_says_so(
    target: ConvertResult, sharp_tied: Path, tmp_path: Path
) -> None:
    from packager.card.render import render
    from tests.specs import EXAMPLE

    text = render(target.out, spec_module.load(EXAMPLE)).text
    assert (
        "decodes with lookahead" in text
        and "| Lookahead | `config.json` runs MNN's lookahead (draft length 4)" in text
        and f"`{LOOKUP}`" in text
    )
    bare = tmp_path / "bare"
    shutil.copytree(target.out, bare)
    (bare / LOOKUP).unlink()
    config = _config(bare)
    del config["lookup_file"]
    (bare / "config.json").write_text(json.dumps(config))
    assert "over the prompt's own n-grams (no corpus)" in render(bare, spec_module.load(EXAMPLE)).text


# --- MNN ------------------------------------------------------------------------------------------------------


def _mnn(bundle: Path, **config: Any) -> Any:
    import MNN.llm as mnn_llm

    llm = mnn_llm.create(str(bundle / "config.json"))
    llm.set_config(config)  # the wrapper takes a dict and json.dumps it: a JSON string would merge as a no-op
    assert llm._c_obj.load()
    return llm


def _generate(bundle: Path, prompt: str, n: int, **config: Any) -> list[int]:
    """MNN's own generate() from an empty cache. Its return value is the context's output_tokens; get_context() is
    not read (pymnn 3.6.1 crashes building a generate_str that ends inside a UTF-8 character)."""
    llm = _mnn(bundle, **config)
    llm._c_obj.generate_init()  # lookahead samples its first token only when current_token is -1
    return [int(t) for t in llm._c_obj.generate(llm.tokenizer_encode(prompt), n)]


@pytest.mark.converter
@pytest.mark.parametrize("which", ["draft", "target"])
def test_mnn_decodes_a_lookahead_bundle_to_the_greedy_tokens_of_plain_decoding(
    which: str, draft: dict[str, Any], target: ConvertResult
) -> None:
    bundle = draft["out"] if which == "draft" else target.out
    assert json.loads(_mnn(bundle)._c_obj.dump_config())["speculative_type"] == "lookahead"
    for prompt in PROMPTS:
        # a step of lookahead may accept drafts past n: the first n tokens are compared
        assert _generate(bundle, prompt, 24)[:24] == _generate(bundle, prompt, 24, speculative_type="")[:24], prompt


@pytest.mark.converter
def test_mnn_drafts_from_the_prompt_without_a_corpus(bare_draft: Path) -> None:
    # generate(ids, 1) runs one step: plain decoding emits one token, lookahead that token and every draft accepted
    # with it. The sharpened draft repeats the prompt's last token, which the prompt's own n-grams predict.
    assert json.loads(_mnn(bare_draft)._c_obj.dump_config())["draft_predict_length"] == 5
    assert _generate(bare_draft, "go go go go go", 1, speculative_type="") == [728]
    assert _generate(bare_draft, "go go go go go", 1) == [728] * 6


@pytest.mark.converter
def test_mnn_drafts_from_the_corpus_the_bundle_carries(
    target: ConvertResult, sharp_untied: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    prompt = PROMPTS[2]
    ids = [int(i) for i in _mnn(target.out).tokenizer_encode(prompt)]
    plain = _generate(target.out, prompt, 12, speculative_type="")
    assert _generate(target.out, prompt, 1) == plain[:1]  # the shipped corpus does not predict this model's text
    bundle = tmp_path / "bundle"
    shutil.copytree(target.out, bundle)
    text = AutoTokenizer.from_pretrained(sharp_untied).decode(ids + plain)
    (bundle / LOOKUP).write_text(text, encoding="utf-8")  # one that holds the model's own continuation
    assert _generate(bundle, prompt, 1) == plain[:5]  # the token and 4 accepted drafts (draft length 4)
    assert _generate(bundle, prompt, 12)[:12] == plain
