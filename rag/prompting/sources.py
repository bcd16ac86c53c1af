"""Numbered sources for the answer prompt, and the sources an LLM answer actually cited.

The model sees `[n] title — text` blocks, one number per document (two chunks of one article share it, as in
the offline answers), and cites them as [n]. After the answer, only the cited numbers become the answer's
sources: the numbers stay as the model wrote them, since the text has already been streamed.
"""

from __future__ import annotations

import mimetypes
import re
from dataclasses import dataclass, field

from rag.rules.answers import form_download_url
from rag.rules.terms import split_sentences
from rag.state import Attachment, RetrievedChunk, Source

_CITATION_RE = re.compile(r"\[(\d{1,3})\]")
PREVIOUS_ANSWER_ID = "previous-answer"


@dataclass(slots=True)
class NumberedSource:
    source: Source
    texts: list[str] = field(default_factory=list)
    form_file: str = ""


def number_sources(
    chunks: list[RetrievedChunk], *, forms_base_url: str, max_sources: int, max_chars: int
) -> list[NumberedSource]:
    """Chunks grouped by document in rank order, numbered from 1; at most `max_sources` documents."""
    by_key: dict[str, NumberedSource] = {}
    for chunk in chunks:
        key = chunk.doc_id or chunk.url or chunk.chunk_id
        numbered = by_key.get(key)
        if numbered is None:
            if len(by_key) >= max_sources:
                continue
            download_url = form_download_url(chunk, forms_base_url) if chunk.kind == "form" else ""
            numbered = by_key[key] = NumberedSource(
                Source.from_chunk(chunk, ref=len(by_key) + 1, download_url=download_url),
                form_file=chunk.form_file,
            )
        if chunk.text.strip() and sum(len(t) for t in numbered.texts) < max_chars:
            numbered.texts.append(chunk.text.strip()[:max_chars])
    return list(by_key.values())


def sources_prompt(numbered: list[NumberedSource]) -> str:
    """The `sources` variable of the answer prompt."""
    blocks = []
    for item in numbered:
        source = item.source
        head = f"[{source.ref}] {source.title}"
        if source.kind == "form":
            form = f"form {source.form_id}, " if source.form_id else "form, "
            head += f" ({form}download: {source.download_url or source.url})"
        body = "\n".join(item.texts)
        blocks.append(f"{head} — {body}" if body else head)
    return "\n\n".join(blocks)


def cited_refs(text: str) -> list[int]:
    """Citation numbers in order of first appearance."""
    seen: dict[int, None] = {}
    for match in _CITATION_RE.finditer(text):
        seen.setdefault(int(match.group(1)), None)
    return list(seen)


def cited_sources(text: str, numbered: list[NumberedSource]) -> tuple[list[Source], list[Attachment]]:
    """The sources `text` cites (by number, in number order) and the files of the cited forms."""
    cited = set(cited_refs(text))
    # The previous answer as a whole is material to rewrite, not a source to list.
    chosen = [item for item in numbered if item.source.ref in cited and item.source.doc_id != PREVIOUS_ANSWER_ID]
    attachments = []
    for item in chosen:
        if item.source.kind == "form" and item.form_file:
            name = item.form_file.rsplit("/", 1)[-1]
            media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
            attachments.append(Attachment(name=name, url=item.source.download_url, media_type=media_type))
    return [item.source for item in chosen], attachments


def previous_answer_chunks(body: str, sources: list[Source], *, language: str) -> list[RetrievedChunk]:
    """The previous answer as source material for rewriting it: one chunk per source it cited, holding the
    sentences that cite it (so the new answer can keep the same numbers), or the whole answer as one chunk."""
    sentences = split_sentences(body, min_chars=1)
    chunks = []
    for source in sources:
        marker = f"[{source.ref}]"
        text = " ".join(s for s in sentences if marker in s)
        if text:
            chunks.append(
                RetrievedChunk(
                    chunk_id=f"{PREVIOUS_ANSWER_ID}#{source.ref}",
                    doc_id=source.doc_id or f"{PREVIOUS_ANSWER_ID}-{source.ref}",
                    title=source.title,
                    url=source.url,
                    text=text,
                    score=1.0,
                    language=language,
                )
            )
    if chunks:
        return chunks
    return [
        RetrievedChunk(
            chunk_id=f"{PREVIOUS_ANSWER_ID}#0",
            doc_id=PREVIOUS_ANSWER_ID,
            title="Previous answer",
            url="",
            text=body,
            score=1.0,
            language=language,
        )
    ]
