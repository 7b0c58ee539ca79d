"""The card's Hub presence: usage steps, links and the app, the download line, and evaluation results the Hub
reads from `model-index` (checked offline with huggingface_hub's ModelCard / EvalResult)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from packager.card.render import human_size, render
from packager.convert.pipeline import ConvertResult
from packager.errors import CardError, SpecError
from packager.measure.digests import measured_digests
from packager.spec import model as spec_module
from tests.conftest import run_cli
from tests.pairreports import pair_report
from tests.specs import EXAMPLE

PRESENCE = """
usage = ["Install TokForge from Google Play.", "On Android, open Settings > Speed & engine > Models & Modules.",
         "Load a Qwen3 MNN chat model and chat as usual."]

[card.links]
Website = "https://tokforge.ai"
Discord = "https://discord.gg/Acv3CBtfVm"

[card.app]
name = "TokForge"
download_name = "Acceleration Pack: Qwen3-0.6B 40k"
platforms = ["Android"]
not_downloaded_on = ["iOS"]
"""


def _spec(tmp_path: Path, card_extra: str = PRESENCE, release_extra: str = "") -> Path:
    """The example spec with more [release] keys and more [card] keys (subtables after the card's own keys)."""
    text = EXAMPLE.read_text()
    text = text.replace('publisher = "your-name"\n', f'publisher = "your-name"\n{release_extra}\n', 1)
    head, tail = text.split("[[credits]]", 1)
    path = tmp_path / "release.toml"
    path.write_text(f"{head.rstrip()}\n{card_extra}\n[[credits]]{tail}")
    return path


def _verify_report(path: Path, bundle: Path, ok: bool = True) -> Path:
    """A verify report with chosen figures of the bundle `bundle` (its files' digests)."""
    path.write_text(
        json.dumps(
            {
                "files_xxh3_128": measured_digests(bundle),
                "ok": ok,
                "prompts": 54,
                "positions": 2400,
                "decisive_positions": 1900,
                "top1_decisive": 0.991,
                "top1_agreement": 0.962,
                "mean_kl": 0.0123,
                "p99_kl": 0.2,
                "mean_cosine": 0.995,
                "min_cosine": 0.97,
                "greedy_agreement": 0.8,
                "failures": [] if ok else ["mean KL 0.2 > 0.05"],
                "notes": [],
            }
        )
    )
    return path


def _results(text: str) -> dict[str, object]:
    from huggingface_hub import ModelCard

    data = ModelCard(text, ignore_metadata_errors=False).data
    return {r.metric_type: r for r in data.eval_results or []}


def test_usage_links_and_app_render_only_when_given(bundle4: ConvertResult, tmp_path: Path) -> None:
    text = render(bundle4.out, spec_module.load(_spec(tmp_path))).text
    assert "## Use it in TokForge\n\n1. Install TokForge from Google Play.\n2. On Android, open Settings > " in text
    assert "3. Load a Qwen3 MNN chat model and chat as usual." in text
    assert "## Links\n\n- Website: https://tokforge.ai\n- Discord: https://discord.gg/Acv3CBtfVm\n" in text
    assert (
        'TokForge calls this download "Acceleration Pack: Qwen3-0.6B 40k". This bundle is for TokForge on '
        "Android. TokForge for iOS does not download it."
    ) in text
    assert "TokForge downloads `config.json`" in text
    plain = render(bundle4.out, spec_module.load(EXAMPLE)).text
    assert "## Links" not in plain and "## Use it in" not in plain and "## How to use it\n" not in plain
    assert "An app downloads `config.json`" in plain
    steps_only = render(bundle4.out, spec_module.load(_spec(tmp_path, 'usage = ["Copy the files to the phone."]'))).text
    assert "## How to use it\n\n1. Copy the files to the phone.\n" in steps_only and "## Links" not in steps_only


def test_download_line_gives_the_app_files_and_the_whole_repo(bundle4: ConvertResult, tmp_path: Path) -> None:
    from packager.bundle.kinds import APP_FILES

    app = sum(size for name, size in bundle4.sizes.items() if name in APP_FILES)
    whole = sum(bundle4.sizes.values())
    assert len(APP_FILES) == 7
    text = render(bundle4.out, spec_module.load(_spec(tmp_path))).text
    assert (
        f"| Download | {human_size(app)} for TokForge (7 runtime files); {human_size(whole)} (10 files) for the "
        "whole repo, with this card and `checksums.xxh128` |"
    ) in text
    assert (
        f"| Download | {human_size(app)} for the app (7 runtime files)"
        in render(bundle4.out, spec_module.load(EXAMPLE)).text
    )


def test_pair_report_becomes_hub_eval_results(bundle4: ConvertResult, tmp_path: Path) -> None:
    from packager import __version__

    spec = spec_module.load(_spec(tmp_path))
    report = pair_report(tmp_path / "p.json", bundle4.out)
    first = _results(render(bundle4.out, spec, measurements=_measured(bundle4, report)).text)
    alpha, tau, sampled = first["greedy_acceptance_alpha"], first["tokens_per_step"], first["sampling_acceptance"]
    assert (alpha.metric_value, tau.metric_value, sampled.metric_value) == (0.62, 2.31, 0.71)
    assert tau.metric_config == "d=3" and "at d=3" in tau.metric_name  # the bundle's own draft_predict_length
    assert alpha.metric_args == {"ci95_low": 0.59, "ci95_high": 0.65}
    assert alpha.task_type == "text-generation" and alpha.dataset_type == "packager-pair"
    assert alpha.dataset_config == "Qwen/Qwen3-8B" and "54 chat-templated prompts, 1728" in alpha.dataset_name
    assert alpha.source_name == f"packager {__version__}"
    assert alpha.source_url == "https://huggingface.co/your-name/Qwen3-0.6B-KL-draft-MNN"
    assert "temperature 0.7, top-k 20, top-p 0.8" in sampled.metric_config
    # The figures move with the report; the device's recommended d wins over the bundle's; no sampling, no result.
    moved = pair_report(tmp_path / "q.json", bundle4.out, alpha=0.7, tau3=2.5, sampled=None, recommended=5)
    second = _results(render(bundle4.out, spec, measurements=_measured(bundle4, moved)).text)
    assert second["greedy_acceptance_alpha"].metric_value == 0.7 and "sampling_acceptance" not in second
    assert second["tokens_per_step"].metric_config == "d=5" and second["tokens_per_step"].metric_value == 3.5


def test_a_pair_target_named_by_its_cache_path_is_stated_by_hub_id_and_the_draft_s_own_base_is_warned(
    bundle4: ConvertResult, tmp_path: Path
) -> None:
    spec = spec_module.load(_spec(tmp_path))
    other = render(bundle4.out, spec, measurements=_measured(bundle4, pair_report(tmp_path / "p.json", bundle4.out)))
    assert "Acceptance with Qwen/Qwen3-8B (packager pair:" in other.text and "same model here" not in other.text
    own = pair_report(tmp_path / "q.json", bundle4.out, target="Qwen--Qwen3-0.6B")  # the spec's base_model
    text = render(bundle4.out, spec, measurements=_measured(bundle4, own)).text
    assert "**Draft and target are the same model here** (Qwen/Qwen3-0.6B):" in text


def _measured(bundle4: ConvertResult, pair: Path | None = None, verify: Path | None = None) -> dict[str, object]:
    from packager.card.measurements import gather_measurements

    found = gather_measurements(bundle4.out, provenance=bundle4.provenance, pair_report=pair, verify_report=verify)
    assert found is not None
    return found


def test_verify_figures_become_eval_results_and_a_failed_one_is_refused(bundle4: ConvertResult, tmp_path: Path) -> None:
    measured = _measured(bundle4, verify=_verify_report(tmp_path / "v.json", bundle4.out))
    results = _results(render(bundle4.out, spec_module.load(EXAMPLE), measurements=measured).text)
    assert results["mean_kl"].metric_value == 0.0123 and results["top1_agreement"].metric_value == 0.962
    assert results["top1_agreement_decisive"].metric_value == 0.991
    assert results["mean_kl"].dataset_type == "packager-verify" and "2400 positions" in results["mean_kl"].dataset_name
    assert "greedy_acceptance_alpha" not in results
    with pytest.raises(CardError, match="failed verification"):
        _measured(bundle4, verify=_verify_report(tmp_path / "bad.json", bundle4.out, ok=False))
    (tmp_path / "other.json").write_text('{"ok": true}')
    with pytest.raises(CardError, match="is not a `packager verify --json` report"):
        _measured(bundle4, verify=tmp_path / "other.json")


def test_no_measurement_no_model_index(bundle4: ConvertResult) -> None:
    assert "model-index" not in render(bundle4.out, spec_module.load(EXAMPLE)).text


def test_card_cli_takes_the_spec_pair_report_and_verify(bundle4: ConvertResult, tmp_path: Path) -> None:
    pair_report(tmp_path / "pair.json", bundle4.out, alpha=0.55)
    spec = _spec(tmp_path, PRESENCE.replace("\n[card.links]", 'pair_report = "pair.json"\n\n[card.links]', 1))
    result = run_cli(
        "card",
        str(bundle4.out),
        "--spec",
        str(spec),
        "--verify",
        str(_verify_report(tmp_path / "v.json", bundle4.out)),
        "-o",
        "-",
    )
    assert result.returncode == 0, result.stderr
    results = _results(result.stdout)
    assert results["greedy_acceptance_alpha"].metric_value == 0.55 and results["mean_kl"].metric_value == 0.0123
    override = run_cli(
        "card",
        str(bundle4.out),
        "--spec",
        str(spec),
        "--pair",
        str(pair_report(tmp_path / "other.json", bundle4.out, alpha=0.8)),
        "-o",
        "-",
    )
    assert _results(override.stdout)["greedy_acceptance_alpha"].metric_value == 0.8
    (tmp_path / "pair.json").unlink()
    missing = run_cli("card", str(bundle4.out), "--spec", str(spec), "-o", "-")
    assert missing.returncode == 24 and "pair.json" in missing.stderr and missing.stderr.count("\n") == 1


@pytest.mark.parametrize(
    ("card_extra", "release_extra", "path", "says"),
    [
        ("", 'collection = ""', "release.collection", "should be non-empty"),
        ("", f'collection = "{"x" * 61}"', "release.collection", "is longer than 60 characters"),
        ("", 'collection = "  padded"', "release.collection", "must be one line"),
        ("", 'collection_note = "a note"', "release", "'collection' is a dependency of 'collection_note'"),
        ("", 'gated = "yes"', "release.gated", "is not one of"),
        ('[card.links]\nWebsite = "ftp://tokforge.ai"', "", "card.links.Website", "is not an http:// or https:// URL"),
        (
            '[card.links]\nWebsite = "javascript:alert(1)"',
            "",
            "card.links.Website",
            "is not an http:// or https:// URL",
        ),
        ('[card.links]\nWebsite = "https:///path"', "", "card.links.Website", "with a host"),
        ('[card.links]\nWebsite = "https://me:secret@tokforge.ai"', "", "card.links.Website", "user name or password"),
        ('[card.links]\n"Web|site" = "https://tokforge.ai"', "", "card.links", "is not a usable link name"),
        ('usage = ["Install it.", "Open | Settings"]', "", "card.usage.1", "must be one line without |"),
        ('usage = ["Install it.\\n---\\nlicense: mit"]', "", "card.usage.0", "must be one line"),
        ('usage = ["# Big heading"]', "", "card.usage.0", "not starting with #"),
        ('usage = ["<script>x</script>"]', "", "card.usage.0", "without | or <"),
        ("usage = []", "", "card.usage", "should be non-empty"),
        (
            '[card.app]\nname = "TokForge"\ndownload_name = "Pack | 40k"\nplatforms = ["Android"]',
            "",
            "card.app.download_name",
            "without | or <",
        ),
        ('[card.app]\nname = "TokForge"\ndownload_name = "Pack"', "", "card.app", "'platforms' is a required property"),
    ],
)
def test_bad_presence_input_is_refused_at_spec_check_with_its_path(
    tmp_path: Path, card_extra: str, release_extra: str, path: str, says: str
) -> None:
    with pytest.raises(SpecError) as caught:
        spec_module.load(_spec(tmp_path, card_extra, release_extra))
    message = caught.value.message
    assert f": {path}: " in message and says in message, message
    assert len(message) < 400


def test_a_good_presence_spec_loads_into_typed_fields(tmp_path: Path) -> None:
    spec = spec_module.load(
        _spec(
            tmp_path,
            release_extra='collection = "TokForge Draft Models"\n'
            'collection_note = "v3, 10,000 samples"\ngated = "manual"',
        )
    )
    release, card = spec.need("release"), spec.need("card")
    assert (release.collection, release.collection_note, release.gated) == (
        "TokForge Draft Models",
        "v3, 10,000 samples",
        "manual",
    )
    assert release.owner == "your-name"  # the repo's namespace unless collection_owner says otherwise
    assert card.links == (("Website", "https://tokforge.ai"), ("Discord", "https://discord.gg/Acv3CBtfVm"))
    assert card.app is not None and card.app.platforms == ("Android",) and card.app.not_downloaded_on == ("iOS",)
    assert len(card.usage) == 3


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("alpha", "0.62"),
        ("alpha", float("nan")),
        ("alpha", 1.5),
        ("recommended_draft_predict_length", "3"),
        ("prompts", True),
    ],
)
def test_a_tampered_pair_report_is_refused_naming_the_figure(
    bundle4: ConvertResult, tmp_path: Path, field: str, value: object
) -> None:
    path = pair_report(tmp_path / "p.json", bundle4.out)
    data = json.loads(path.read_text())
    if field == "alpha":
        data["alpha"]["value"] = value
    else:
        data[field] = value
    path.write_text(json.dumps(data))
    with pytest.raises(CardError) as refused:
        _measured(bundle4, path)
    shown = {"recommended_draft_predict_length": "recommended_d"}.get(field, field)
    assert shown in refused.value.message and "not a number" in refused.value.message


def test_a_tampered_verify_report_is_refused(bundle4: ConvertResult, tmp_path: Path) -> None:
    path = _verify_report(tmp_path / "v.json", bundle4.out)
    data = json.loads(path.read_text())
    data["mean_kl"] = -1
    path.write_text(json.dumps(data))
    with pytest.raises(CardError, match="mean_kl is '-1', not a number"):
        _measured(bundle4, verify=path)
