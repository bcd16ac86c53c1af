"""PDF files through pypdf: the text layer of every page, in page order.

A PDF is untrusted input for a parser written in Python, so any exception while opening it or reading a page is
a reason to skip (the file) or to log (the page), never a crash of the whole load. Scanned PDFs have no text
layer: they are skipped with a reason, since OCR is not part of this product.
"""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

from rag.retrieval.loaders.base import SkipFile, content_hash, join_cjk_gaps, resolve_language, title_from_text
from rag.retrieval.markdown import Document, LoadError

logger = logging.getLogger(__name__)

# titles producers put in the metadata that are not the document's title
_JUNK_TITLE_RE = re.compile(r"^(microsoft (word|powerpoint|excel) - |untitled$)|\.(docx?|pptx?|xlsx?|pdf|odt)$", re.I)


def _metadata_title(reader: object) -> str:
    try:
        title = str(getattr(getattr(reader, "metadata", None), "title", None) or "").strip()
    except Exception:  # broken metadata must not cost the document
        return ""
    return "" if _JUNK_TITLE_RE.search(title) else title


def load_pdf(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    from pypdf import PdfReader  # imported late: only a PDF load pays for it

    data = path.read_bytes()
    if not data:
        raise SkipFile("empty file")
    try:
        reader = PdfReader(io.BytesIO(data))
        if reader.is_encrypted:
            # many PDFs are encrypted only against editing and open with an empty user password
            try:
                opened = reader.decrypt("")
            except Exception as exc:
                raise SkipFile(f"encrypted PDF that cannot be opened ({type(exc).__name__}: {exc})") from exc
            if not opened:
                raise SkipFile("encrypted PDF: it needs a password")
        pages = list(reader.pages)
    except SkipFile:
        raise
    except Exception as exc:
        raise SkipFile(f"not a readable PDF ({type(exc).__name__}: {exc})") from exc
    texts: list[str] = []
    for number, page in enumerate(pages, start=1):
        try:
            text = page.extract_text() or ""
        except Exception as exc:
            errors.append(LoadError(path, f"page {number}: text could not be extracted ({type(exc).__name__})"))
            continue
        text = join_cjk_gaps(text.replace("\r\n", "\n").replace("\r", "\n")).strip()
        if text:
            texts.append(text)
    if not texts:
        raise SkipFile(f"no extractable text in {len(pages)} page(s) (a scanned image? OCR is not supported)")
    body = "\n\n".join(texts)
    title = _metadata_title(reader)
    if not title:
        title, body = title_from_text(body, fallback=path.stem)
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
