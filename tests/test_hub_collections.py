"""The local Hub's collections and gating, driven through huggingface_hub's own HfApi over HTTP: what the real
client sends and expects, with the same auth and validation rules as the rest of the Hub."""

from __future__ import annotations

from typing import Any

import pytest

from tests.localhub import OTHER_TOKEN, OTHER_USER, READ_TOKEN, WRITE_TOKEN, LocalHub, hub, online

pytestmark = pytest.mark.hub


def _api(hub: LocalHub, token: str | None = WRITE_TOKEN) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token if token else False)


def _status(exc: pytest.ExceptionInfo[Any]) -> int:
    return exc.value.response.status_code


def test_create_is_idempotent_by_title_and_get_and_list_see_it(hub: LocalHub, online: None) -> None:
    api = _api(hub)
    first = api.create_collection("TokForge Draft Models", namespace="tokforge", description="Drafts for TokForge")
    assert first.slug.startswith("tokforge/tokforge-draft-models-") and len(first.slug.rsplit("-", 1)[1]) == 24
    assert first.title == "TokForge Draft Models" and first.owner["name"] == "tokforge" and first.items == []
    again = api.create_collection("TokForge Draft Models", namespace="tokforge", exists_ok=True)
    assert again.slug == first.slug
    with pytest.raises(Exception) as conflict:
        api.create_collection("TokForge Draft Models", namespace="tokforge")
    assert _status(conflict) == 409
    api.create_collection("Another", namespace="tokforge")
    api.create_collection("Elsewhere", namespace="someone-else")
    listed = {c.title for c in api.list_collections(owner="tokforge")}
    assert listed == {"TokForge Draft Models", "Another"}
    assert api.get_collection(first.slug).description == "Drafts for TokForge"
    assert _api(hub, None).get_collection(first.slug).title == "TokForge Draft Models"  # public: no token needed


def test_items_add_once_update_and_delete(hub: LocalHub, online: None) -> None:
    api = _api(hub)
    api.create_repo("tokforge/draft-a")
    api.create_repo("tokforge/draft-b")
    slug = api.create_collection("Drafts", namespace="tokforge").slug
    added = api.add_collection_item(slug, "tokforge/draft-a", "model", note="v3, 10,000 samples")
    assert [(i.item_id, i.item_type, i.note, i.position) for i in added.items] == [
        ("tokforge/draft-a", "model", "v3, 10,000 samples", 0)
    ]
    with pytest.raises(Exception) as twice:
        api.add_collection_item(slug, "tokforge/draft-a", "model")
    assert _status(twice) == 409
    same = api.add_collection_item(slug, "tokforge/draft-a", "model", exists_ok=True)
    assert len(same.items) == 1
    api.add_collection_item(slug, "tokforge/draft-b", "model")
    item = api.get_collection(slug).items[0]
    api.update_collection_item(slug, item.item_object_id, note="v4")
    assert api.get_collection(slug).items[0].note == "v4"
    api.delete_collection_item(slug, item.item_object_id)
    assert [i.item_id for i in api.get_collection(slug).items] == ["tokforge/draft-b"]
    api.delete_collection_item(slug, item.item_object_id, missing_ok=True)
    with pytest.raises(Exception) as gone:
        api.delete_collection_item(slug, item.item_object_id)
    assert _status(gone) == 404
    assert [c.slug for c in api.list_collections(item="models/tokforge/draft-b")] == [slug]
    assert list(api.list_collections(item="models/tokforge/draft-a")) == []
    api.delete_repo("tokforge/draft-b")
    assert api.get_collection(slug).items == []  # a deleted repo leaves its collections


def test_collection_writes_follow_the_hub_auth_rules(hub: LocalHub, online: None) -> None:
    from huggingface_hub.errors import HfHubHTTPError

    mine = _api(hub)
    mine.create_repo("tokforge/draft")
    alice = _api(hub, OTHER_TOKEN)
    hers = alice.create_collection("Alice's picks")
    assert hers.owner["name"] == OTHER_USER and hers.owner["type"] == "user"
    cases = [
        (lambda: mine.add_collection_item(hers.slug, "tokforge/draft", "model"), 403),  # another owner's collection
        (lambda: mine.create_collection("Mine now", namespace=OTHER_USER), 403),  # another user's namespace
        (lambda: alice.create_collection("Hers", namespace="tokforge"), 403),
        (lambda: _api(hub, READ_TOKEN).create_collection("Read only", namespace="tokforge"), 403),
        (lambda: _api(hub, "hf_unknown_token").create_collection("Who", namespace="tokforge"), 401),
        (lambda: _api(hub, None).create_collection("Nobody", namespace="tokforge"), 401),
        (lambda: mine.create_collection("", namespace="tokforge"), 400),
        (lambda: mine.create_collection("x" * 61, namespace="tokforge"), 400),
        (lambda: mine.create_collection("Long", namespace="tokforge", description="d" * 151), 400),
        (
            lambda: mine.add_collection_item(
                mine.create_collection("Mine", namespace="tokforge").slug, "tokforge/draft", "model", note="n" * 501
            ),
            400,
        ),
        (
            lambda: mine.add_collection_item(
                mine.create_collection("Mine", namespace="tokforge", exists_ok=True).slug, "tokforge/absent", "model"
            ),
            404,
        ),
        (
            lambda: mine.add_collection_item(
                mine.create_collection("Mine", namespace="tokforge", exists_ok=True).slug, "squad", "dataset"
            ),
            400,
        ),
        (lambda: mine.get_collection("tokforge/no-such-0123456789abcdef01234567"), 404),
    ]
    for call, status in cases:
        with pytest.raises(HfHubHTTPError) as refused:
            call()
        assert _status(refused) == status, (status, refused.value)
    assert [i.item_id for i in alice.get_collection(hers.slug).items] == []


def test_private_collection_is_hidden_without_a_token(hub: LocalHub, online: None) -> None:
    from huggingface_hub.errors import HfHubHTTPError

    slug = _api(hub).create_collection("Secret drafts", namespace="tokforge", private=True).slug
    with pytest.raises(HfHubHTTPError) as hidden:
        _api(hub, None).get_collection(slug)
    assert _status(hidden) == 404
    assert list(_api(hub, None).list_collections(owner="tokforge")) == []
    assert [c.slug for c in _api(hub, READ_TOKEN).list_collections(owner="tokforge")] == [slug]


def test_gated_repo_downloads_need_the_owner(hub: LocalHub, online: None, tmp_path: Any) -> None:
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import GatedRepoError

    api = _api(hub)
    api.create_repo("tokforge/gated")
    api.upload_file(path_or_fileobj=b"hello", path_in_repo="a.txt", repo_id="tokforge/gated")
    api.update_repo_settings("tokforge/gated", gated="auto")
    assert api.model_info("tokforge/gated").gated == "auto"
    assert _api(hub, None).model_info("tokforge/gated").gated == "auto"  # the page is public, the files are not
    for token, status in ((False, 401), (OTHER_TOKEN, 403)):
        with pytest.raises(GatedRepoError) as refused:
            hf_hub_download("tokforge/gated", "a.txt", endpoint=hub.url, token=token, cache_dir=tmp_path / "c")
        assert refused.value.response.status_code == status
    for token in (WRITE_TOKEN, READ_TOKEN):  # the owner's tokens, read-only included
        path = hf_hub_download(
            "tokforge/gated", "a.txt", endpoint=hub.url, token=token, cache_dir=tmp_path / f"c-{token[8:12]}"
        )
        assert open(path, "rb").read() == b"hello"
    api.update_repo_settings("tokforge/gated", gated="manual")
    assert api.model_info("tokforge/gated").gated == "manual"
    api.update_repo_settings("tokforge/gated", gated=False)
    assert hf_hub_download("tokforge/gated", "a.txt", endpoint=hub.url, token=False, cache_dir=tmp_path / "open")
    status, _, body = hub.raw(
        "PUT", "/api/models/tokforge/gated/settings", b'{"gated": 0}', {"Content-Type": "application/json"}
    )
    assert status == 400 and b"gated is" in body
    with pytest.raises(Exception) as foreign:
        _api(hub, OTHER_TOKEN).update_repo_settings("tokforge/gated", gated="auto")
    assert _status(foreign) == 403
