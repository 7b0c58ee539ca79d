"""The local Hub's model pages as huggingface_hub's `model_info` and `list_models` read them: what the Hub derives
from the card (tags, card data, library, pipeline) and the listing's query parameters."""

from __future__ import annotations

from typing import Any

import pytest

from tests.localhub import OTHER_TOKEN, OTHER_USER, WRITE_TOKEN, LocalHub, hub, online

pytestmark = pytest.mark.hub

CARD = """---
license: apache-2.0
base_model:
- Qwen/Qwen3-0.6B
base_model_relation: finetune
library_name: mnn
pipeline_tag: text-generation
tags:
- speculative-decoding
- draft-model
---

# A draft
"""
BOMB = "---\na: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 10)}]\n" for i in range(8)
)


def _api(hub: LocalHub, token: str | None = WRITE_TOKEN) -> Any:
    from huggingface_hub import HfApi

    return HfApi(endpoint=hub.url, token=token if token else False)


def _repo(hub: LocalHub, repo: str, card: str | None = CARD, private: bool = False, token: str = WRITE_TOKEN) -> str:
    api = _api(hub, token)
    api.create_repo(repo, private=private)
    if card is not None:
        api.upload_file(path_or_fileobj=card.encode(), path_in_repo="README.md", repo_id=repo)
    return repo


def test_model_info_states_the_tags_card_data_and_library_its_card_declares(hub: LocalHub, online: None) -> None:
    info = _api(hub).model_info(_repo(hub, "local/draft"))
    assert info.library_name == "mnn" and info.pipeline_tag == "text-generation" and info.author == "local"
    assert info.card_data is not None and info.card_data.library_name == "mnn"
    assert info.card_data.base_model == ["Qwen/Qwen3-0.6B"] and info.card_data.tags == [
        "speculative-decoding",
        "draft-model",
    ]
    assert {"mnn", "speculative-decoding", "draft-model", "text-generation", "license:apache-2.0"} <= set(info.tags)
    assert {"base_model:Qwen/Qwen3-0.6B", "base_model:finetune:Qwen/Qwen3-0.6B"} <= set(info.tags)
    assert [s.rfilename for s in info.siblings] == [".gitattributes", "README.md"]
    assert _api(hub).model_info("local/draft", expand=["tags", "cardData"]).sha is None  # only what was asked for


def test_a_repo_without_a_card_or_with_an_alias_bomb_for_front_matter_has_no_card_data(
    hub: LocalHub, online: None
) -> None:
    bare = _api(hub).model_info(_repo(hub, "local/bare", card=None))
    assert bare.card_data is None and bare.tags == [] and bare.library_name is None
    bomb = _api(hub).model_info(_repo(hub, "local/bomb", card=BOMB + "---\n# x\n"))
    assert bomb.card_data is None and bomb.tags == []


def test_list_models_filters_by_author_search_tags_and_pipeline_as_the_hub_does(hub: LocalHub, online: None) -> None:
    _repo(hub, "local/draft-a")
    _repo(hub, "local/other", card=CARD.replace("library_name: mnn", "library_name: gguf"))
    _repo(hub, f"{OTHER_USER}/draft-b", token=OTHER_TOKEN)
    _repo(hub, "local/secret", private=True)
    api, anonymous = _api(hub), _api(hub, None)

    def ids(client: Any, **query: Any) -> list[str]:
        return [m.id for m in client.list_models(**query)]

    assert ids(api, author="local") == ["local/draft-a", "local/other", "local/secret"]
    assert ids(anonymous, author="local") == ["local/draft-a", "local/other"]  # a private repo only with a token
    assert ids(api, author=OTHER_USER) == [f"{OTHER_USER}/draft-b"]
    assert ids(api, author="nobody") == []
    assert ids(api, search="DRAFT") == ["alice/draft-b", "local/draft-a"]
    assert ids(api, filter="mnn", author="local") == ["local/draft-a", "local/secret"]
    assert ids(api, filter=["gguf", "draft-model"]) == ["local/other"]
    assert ids(api, pipeline_tag="text-generation", limit=1) == ["alice/draft-b"]
    listed = next(iter(api.list_models(author=OTHER_USER, cardData=True)))
    assert listed.card_data is not None and listed.card_data.library_name == "mnn" and listed.library_name == "mnn"
    assert next(iter(api.list_models(author=OTHER_USER))).card_data is None  # card data only when asked for
    full = next(iter(api.list_models(author=OTHER_USER, full=True)))
    assert full.sha is not None and [s.rfilename for s in full.siblings] == [".gitattributes", "README.md"]


def test_list_models_refuses_a_bad_limit_or_expand(hub: LocalHub) -> None:
    assert hub.raw("GET", "/api/models?limit=-1")[0] == 400
    assert hub.raw("GET", "/api/models?limit=x")[0] == 400
    assert hub.raw("GET", "/api/models?expand=nonsense")[0] == 400
    assert hub.raw("GET", "/api/models?expand=tags&full=true")[0] == 400
