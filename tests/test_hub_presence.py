"""Release and upload put the repo into its publisher's collection (once, after the verified commit) and gate it,
over HTTP with the real client against the local Hub; failures say exactly what is done and what is not."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from packager import resources
from tests.localhub import OTHER_TOKEN, OTHER_USER, WRITE_TOKEN, LocalHub, hub, online, ready
from tests.localhub import history as _history
from tests.localhub import upload as _upload

pytestmark = pytest.mark.hub

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "release.toml"
REPO = "your-name/Qwen3-0.6B-KL-draft-MNN"
TITLE = "TokForge Draft Models"


def _spec(tmp_path: Path, extra: str) -> Path:
    path = tmp_path / "release.toml"
    path.write_text(EXAMPLE.read_text().replace('publisher = "your-name"\n', f'publisher = "your-name"\n{extra}\n', 1))
    return path


def _api(hub: LocalHub, token: str = WRITE_TOKEN) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token)


def _collections(hub: LocalHub, owner: str = "your-name") -> list[Any]:
    api = _api(hub)
    return [api.get_collection(c.slug) for c in api.list_collections(owner=owner)]


def _release(hub: LocalHub, spec: Path, bundle: Path, *flags: str) -> tuple[Any, dict[str, Any]]:
    """release --json; its summary checked against the summary's schema."""
    result = hub.cli("release", str(spec), "--bundle", str(bundle), "--json", "--quiet", *flags)
    summary = json.loads(result.stdout)
    Draft202012Validator(resources.schema("release_summary")).validate(summary)
    return result, summary


def test_release_adds_the_repo_to_its_collection_once_however_often_it_runs(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    spec = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_note = "The v3 draft"\ngated = "auto"')
    for run in range(2):
        result, summary = _release(hub, spec, ready)
        assert result.returncode == 0, result.stdout + result.stderr
        assert [s["name"] for s in summary["stages"]][-2:] == ["upload, verify, tag", "collection"]
        detail = summary["stages"][-1]["detail"]
        assert ("created collection" in detail and "repo added" in detail) if run == 0 else "already holds" in detail
        collections = _collections(hub)
        assert [c.title for c in collections] == [TITLE]
        assert [(i.item_id, i.note) for i in collections[0].items] == [(REPO, "The v3 draft")]
    assert len(_history(hub, REPO)) == 1  # the second run committed nothing
    assert _api(hub).model_info(REPO).gated == "auto" and "gated (auto)" in summary["stages"][-2]["detail"]
    assert summary["gated"] == "auto" and summary["collection"]["title"] == TITLE
    assert (summary["collection"]["created"], summary["collection"]["added"]) == (False, False)
    assert summary["collection"]["slug"] == collections[0].slug
    changed = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_note = "The v3 draft, 10,000 samples"')
    result, summary = _release(hub, changed, ready)
    assert result.returncode == 0 and "note updated" in summary["stages"][-1]["detail"]
    assert [i.note for i in _collections(hub)[0].items] == ["The v3 draft, 10,000 samples"]
    assert _api(hub).model_info(REPO).gated == "auto"  # no gated key: the setting stays as it is


def test_a_failing_collection_call_after_the_commit_says_what_is_done_and_a_rerun_finishes(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    spec = _spec(tmp_path, f'collection = "{TITLE}"')
    hub.faults({"method": "POST", "path": "/api/collections", "status": 422})
    result, summary = _release(hub, spec, ready)
    assert result.returncode == 65, result.stdout + result.stderr
    tag = hub.api(f"/api/models/{REPO}/refs")["tags"]
    assert summary["commit"] and [t["name"] for t in tag] == ["v3"] and tag[0]["targetCommit"] == summary["commit"]
    assert summary["exit_code"] == 65 and summary["collection"] is None and summary["tag"] == "v3"
    assert {r["action"] for r in summary["plan"]} == {"add"}  # what the commit holds, though a later stage failed
    ok, failed = summary["stages"][-2], summary["stages"][-1]
    assert ok["name"] == "upload, verify, tag" and ok["ok"] and failed["name"] == "collection" and not failed["ok"]
    assert f"{REPO}@{summary['commit'][:12]} is committed, verified and tagged v3" in failed["detail"]
    assert "was NOT updated" in failed["detail"] and "rerun the same command to finish" in failed["detail"]
    assert _collections(hub) == []
    text = hub.cli("release", str(spec), "--bundle", str(ready), "--quiet")  # the faults are used up: it finishes
    assert text.returncode == 0, text.stdout + text.stderr
    assert [i.item_id for c in _collections(hub) for i in c.items] == [REPO] and len(_history(hub, REPO)) == 1


def test_another_users_collection_is_refused_before_anything_is_sent(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    _api(hub, OTHER_TOKEN).create_collection(TITLE)
    spec = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_owner = "{OTHER_USER}"')
    result, summary = _release(hub, spec, ready)
    assert result.returncode == 66, result.stdout + result.stderr
    assert f"belongs to the user {OTHER_USER}, not to local; nothing was sent" in summary["error"]
    assert summary["commit"] is None and _history(hub, REPO) == []
    assert summary["stages"][-1]["name"] == "upload, verify, tag" and not summary["stages"][-1]["ok"]


def test_a_refused_collection_after_the_commit_is_its_own_exit_code(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    # The owner is the token's own namespace, but the Hub refuses the collection once the release is committed.
    hub.faults({"method": "POST", "path": "/api/collections", "status": 403})
    spec = _spec(tmp_path, f'collection = "{TITLE}"')
    result = hub.cli("release", str(spec), "--bundle", str(ready), "--quiet")
    assert result.returncode == 66, result.stdout + result.stderr
    assert (
        "is committed, verified and tagged v3; the collection 'TokForge Draft Models' of your-name was NOT updated"
        in result.stdout
        and "(403)" in result.stdout
    )
    assert "committed and tagged, but its collection is NOT updated; rerun the same command to finish" in result.stdout
    assert len(_history(hub, REPO)) == 1 and _collections(hub) == []


def test_a_collection_owner_the_token_cannot_write_is_refused_before_anything_is_sent(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    # alice has no collection of this title yet: her namespace alone says that the token's user (local) cannot.
    result = hub.cli(
        "upload", str(ready), "tokforge/draft", "--collection", TITLE, "--collection-owner", OTHER_USER, "--quiet"
    )
    assert result.returncode == 66 and result.stderr.count("\n") == 1, result.stdout + result.stderr
    assert f"the collection owner {OTHER_USER} is not a namespace local may write" in result.stderr
    assert "nothing was sent" in result.stderr and "collection_owner" in result.stderr
    spec = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_owner = "{OTHER_USER}"')
    released, summary = _release(hub, spec, ready)
    assert released.returncode == 66 and summary["commit"] is None, released.stdout + released.stderr
    assert hub.stats()["commits_received"] == 0 and hub.stats()["lfs_bytes_received"] == 0
    assert _history(hub, "tokforge/draft") == [] and _history(hub, REPO) == [] and _collections(hub, OTHER_USER) == []


def test_release_dry_run_says_what_it_would_do_to_the_collection_and_gating_and_does_none_of_it(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    spec = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_note = "The v3 draft"\ngated = "manual"')
    result, summary = _release(hub, spec, ready, "--dry-run")
    assert result.returncode == 0, result.stdout + result.stderr
    plan, collection = summary["stages"][-2:]
    assert (plan["name"], collection["name"]) == ("upload plan (dry run)", "collection (dry run)")
    assert "gated (manual) once released" in plan["detail"] and summary["gated"] == "manual"
    assert collection["ok"] and f"would create the collection {TITLE!r} and add the repo" in collection["detail"]
    assert summary["collection"] == {
        "title": TITLE,
        "slug": None,
        "url": None,
        "created": True,
        "added": True,
        "note_updated": False,
    }
    assert _collections(hub) == [] and hub.stats()["commits_received"] == 0
    assert hub.cli("verify-remote", REPO).returncode == 43  # not even the repo was made
    assert hub.cli("release", str(spec), "--bundle", str(ready), "--quiet").returncode == 0
    slug = _collections(hub)[0].slug
    ungated = _spec(tmp_path, f'collection = "{TITLE}"\ngated = "auto"')
    text = hub.cli("release", str(ungated), "--bundle", str(ready), "--quiet", "--dry-run")
    assert text.returncode == 0, text.stdout + text.stderr
    assert f"the collection {TITLE!r} ({slug}) already holds the repo; nothing changed on the Hub" in text.stdout
    assert "gated (auto) once released" in text.stdout
    assert text.stdout.splitlines()[-1] == f"dry run of {REPO}@v3: nothing changed on {hub.url}"
    assert _api(hub).model_info(REPO).gated == "manual" and len(_history(hub, REPO)) == 1  # the dry run set nothing
    assert [(i.item_id, i.note) for c in _collections(hub) for i in c.items] == [(REPO, "The v3 draft")]


def test_release_dry_run_refuses_another_users_collection_like_a_release(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    _api(hub, OTHER_TOKEN).create_collection(TITLE)
    spec = _spec(tmp_path, f'collection = "{TITLE}"\ncollection_owner = "{OTHER_USER}"')
    result, summary = _release(hub, spec, ready, "--dry-run")
    assert result.returncode == 66 and summary["exit_code"] == 66, result.stdout + result.stderr
    assert summary["stages"][-1]["name"] == "upload plan (dry run)" and not summary["stages"][-1]["ok"]
    assert "nothing was sent" in summary["error"] and summary["collection"] is None


def test_upload_collection_flags_dry_run_changes_nothing(hub: LocalHub, ready: Path, online: None) -> None:
    dry = _upload(hub, ready, "tokforge/draft", "--collection", TITLE, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["collection"]["created"] is True and _collections(hub, "tokforge") == []
    text = hub.cli("upload", str(ready), "tokforge/draft", "--collection", TITLE, "--dry-run", "--quiet")
    assert f"would create the collection {TITLE!r} and add the repo" in text.stdout
    done = _upload(hub, ready, "tokforge/draft", "--collection", TITLE, "--collection-note", "first")
    assert done.returncode == 0, done.stderr
    placed = json.loads(done.stdout)["collection"]
    assert placed["added"] and placed["slug"].startswith("tokforge/tokforge-draft-models-")
    assert [(i.item_id, i.note) for c in _collections(hub, "tokforge") for i in c.items] == [
        ("tokforge/draft", "first")
    ]
    bad = hub.cli("upload", str(ready), "tokforge/draft", "--collection", "", "--quiet")
    assert bad.returncode == 19 and "error: --collection: " in bad.stderr and bad.stderr.count("\n") == 1
    assert "release" not in bad.stderr and "spec" not in bad.stderr  # a flag, not the release spec, is wrong
    orphan = hub.cli("upload", str(ready), "tokforge/draft", "--collection-note", "x", "--quiet")
    assert orphan.returncode == 19 and "need --collection" in orphan.stderr


def test_gated_release_refuses_downloads_without_access(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    result = hub.cli("release", str(_spec(tmp_path, 'gated = "manual"')), "--bundle", str(ready), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    assert hub.api(f"/api/models/{REPO}")["gated"] == "manual"
    anonymous = hub.cli("verify-remote", f"{REPO}@v3", token=None)
    assert anonymous.returncode == 68 and "is gated and no token was given" in anonymous.stderr
    stranger = hub.cli("verify-remote", f"{REPO}@v3", token=OTHER_TOKEN)
    assert stranger.returncode == 68 and "has not been granted access" in stranger.stderr
    assert hub.cli("verify-remote", f"{REPO}@v3").returncode == 0  # the owner's token


def test_a_wrong_token_on_a_gated_repo_is_a_credentials_error_for_verify_remote_as_for_pull(
    hub: LocalHub, ready: Path, tmp_path: Path
) -> None:
    result = hub.cli("release", str(_spec(tmp_path, 'gated = "manual"')), "--bundle", str(ready), "--quiet")
    assert result.returncode == 0, result.stdout + result.stderr
    for args in (("verify-remote", f"{REPO}@v3"), ("pull", f"{REPO}@v3", str(tmp_path / "draft"), "--quiet")):
        wrong = hub.cli(*args, token="hf_wrong_token_SECRET")
        assert wrong.returncode == 41 and wrong.stderr.count("\n") == 1, args + (wrong.stdout + wrong.stderr,)
        assert "rejected the credentials (401)" in wrong.stderr and "damaged" not in wrong.stderr
        assert "SECRET" not in wrong.stdout + wrong.stderr


def test_gating_that_cannot_be_set_stops_before_the_commit(hub: LocalHub, ready: Path) -> None:
    hub.faults({"method": "PUT", "path": "/settings", "status": 403})
    result = _upload(hub, ready, "tokforge/draft", "--gated", "auto")
    assert result.returncode == 67, result.stdout + result.stderr
    assert "gated access (auto) was not set" in result.stderr and "nothing was committed" in result.stderr
    assert _history(hub, "tokforge/draft") == []


def test_two_runs_at_once_make_one_collection_with_one_entry(hub: LocalHub, online: None) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from packager.hub.client import connect
    from packager.hub.collection import CollectionRequest, place

    _api(hub).create_repo("tokforge/draft")
    # Both runs find no collection, then create it at the same moment (the barrier holds the first until the
    # second arrives), then add the repo: the Hub's 409s and exists_ok leave one collection and one entry.
    hub.faults({"method": "POST", "path": "/api/collections", "barrier": 2, "times": 2})
    wanted = CollectionRequest(TITLE, "tokforge", "v3")

    def run() -> Any:
        return place(connect(hub.url, WRITE_TOKEN), wanted, "tokforge/draft", private=False, sleep=lambda _: None)

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = [f.result() for f in [pool.submit(run), pool.submit(run)]]
    assert results[0].slug == results[1].slug and hub.stats()["faults_left"] == 0
    collections = _collections(hub, "tokforge")
    assert len(collections) == 1 and [(i.item_id, i.note) for i in collections[0].items] == [("tokforge/draft", "v3")]
