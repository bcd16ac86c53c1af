"""Plain text files: any of the supported encodings, the title from a short first line or the file name."""

from __future__ import annotations

from pathlib import Path

from rag.retrieval.loaders.base import content_hash, decode_text, resolve_language, title_from_text
from rag.retrieval.markdown import Document, LoadError


def load_text(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    data = path.read_bytes()
    text, _ = decode_text(data)
    # Windows line ends and a stray BOM must not reach the chunker's line-based parsing
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    title, body = title_from_text(text, fallback=path.stem)
    return [
        Document(
            doc_id=doc_id,
            title=title,
            text=body,
            language=resolve_language(body, language),
            content_hash=content_hash(data),
            source_path=str(path),
        )
    ]
