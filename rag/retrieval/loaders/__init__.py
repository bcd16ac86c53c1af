"""Load help-centre sources of any supported format into `Document`s: one call, files and folders alike.

    errors: list[LoadError] = []
    documents = load_documents([folder, "faq.pdf"], errors=errors)

Formats: Markdown (the staff-authored articles with front matter, or ordinary files without, titled by their first
heading), plain text, HTML, PDF, Office (.docx, .xlsx, .pptx) and SQuAD-format JSON (each paragraph a document).
With ``format="auto"`` the file's extension decides; a named format applies to every file given by path, and picks
that format's extensions in folders. Nothing a file contains stops the load: every file (or SQuAD paragraph) that
cannot be used becomes a `LoadError(path, reason)` in `errors`, which is the job log's list of what was skipped and
why.

doc_ids are paths relative to the folder given (or the file's own folder): Markdown keeps its existing rule
(without ".md"), other files keep their extension so "guide.pdf" and "guide.html" stay apart, and a SQuAD
paragraph is ``<file without .json>/<article index>/<paragraph index>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path
from typing import Literal, get_args

from rag.retrieval.chunking import PASSAGE_CHUNKING, ChunkingConfig
from rag.retrieval.loaders.base import SkipFile, decode_text
from rag.retrieval.loaders.html import html_to_text, load_html
from rag.retrieval.loaders.office import load_docx, load_pptx, load_xlsx
from rag.retrieval.loaders.pdf import load_pdf
from rag.retrieval.loaders.squad import SquadFile, SquadQuestion, load_squad, read_squad
from rag.retrieval.loaders.text import load_text
from rag.retrieval.markdown import LANGUAGES, Document, FrontMatterError, LoadError, document_from_text
from rag.text.compat import fold_compatibility

__all__ = [
    "EXTENSIONS",
    "FORMATS",
    "Document",
    "Format",
    "LoadError",
    "SquadFile",
    "SquadQuestion",
    "chunking_for",
    "format_for_path",
    "html_to_text",
    "load_documents",
    "load_file",
    "read_squad",
]

logger = logging.getLogger(__name__)

Format = Literal["auto", "markdown", "text", "html", "pdf", "squad", "docx", "xlsx", "pptx"]
FORMATS: tuple[str, ...] = get_args(Format)
EXTENSIONS: dict[str, tuple[str, ...]] = {
    "markdown": (".md", ".markdown"),
    "text": (".txt", ".text"),
    "html": (".html", ".htm"),
    "pdf": (".pdf",),
    "squad": (".json",),
    "docx": (".docx",),
    "xlsx": (".xlsx",),
    "pptx": (".pptx",),
}
# The reason a form's attachment (the file its `form_file` names) is left out of the index: it is downloaded.
ATTACHMENT_REASON = "attachment of"
_BY_EXTENSION = {extension: name for name, extensions in EXTENSIONS.items() for extension in extensions}

Loader = Callable[..., list[Document]]


def _load_markdown(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    # front matter names the language; `language` is for a file without any, as for formats that carry none
    text, _ = decode_text(path.read_bytes())
    try:
        return [document_from_text(text, doc_id=doc_id, source_path=str(path), language=language)]
    except FrontMatterError as exc:
        raise SkipFile(str(exc)) from exc


_LOADERS: dict[str, Loader] = {
    "markdown": _load_markdown,
    "text": load_text,
    "html": load_html,
    "pdf": load_pdf,
    "squad": load_squad,
    "docx": load_docx,
    "xlsx": load_xlsx,
    "pptx": load_pptx,
}


def format_for_path(path: Path | str) -> str | None:
    """The format the file's extension implies, None for an extension no loader reads."""
    return _BY_EXTENSION.get(Path(path).suffix.lower())


def chunking_for(format: str) -> ChunkingConfig:
    """The chunking that suits documents of `format`: SQuAD paragraphs stay whole up to a larger size."""
    return PASSAGE_CHUNKING if format == "squad" else ChunkingConfig()


def _doc_id(path: Path, root: Path, format: str) -> str:
    relative = path.relative_to(root)
    if format in ("markdown", "squad"):
        relative = relative.with_suffix("")
    return relative.as_posix()


def _walk(root: Path, format: str) -> list[Path]:
    # hidden files and folders (.git, .DS_Store, editor swap files) are never documents
    files = sorted(
        p
        for p in root.rglob("*")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )
    if format != "auto":
        files = [p for p in files if p.suffix.lower() in EXTENSIONS[format]]
    # Markdown first: it names the attachments (form_file) the other files may be
    return sorted(files, key=lambda p: (format_for_path(p) != "markdown", p))


def _as_paths(paths: Iterable[Path | str] | Path | str) -> list[Path]:
    if isinstance(paths, str | Path):
        return [Path(paths)]
    return [Path(p) for p in paths]


def load_documents(
    paths: Iterable[Path | str] | Path | str,
    *,
    format: str = "auto",
    errors: list[LoadError],
    language: str | None = None,
) -> list[Document]:
    """Documents from files and folders (folders recursively, sorted), in a deterministic order.

    `language` (zh-hant, zh-hans, en) is given to documents whose format carries none (text, HTML, PDF,
    SQuAD); without it each document's language is detected from its text. Raises ValueError only for a bad
    `format` or `language`: those are the caller's mistakes, not the files'.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {format!r}")
    if language is not None and language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(sorted(LANGUAGES))}, got {language!r}")
    documents: list[Document] = []
    seen: dict[str, Path] = {}
    for entry in _as_paths(paths):
        if entry.is_dir():
            root, files = entry, _walk(entry, format)
        elif entry.is_file():
            root, files = entry.parent, [entry]
        else:
            errors.append(LoadError(entry, "no such file or folder"))
            continue
        attachments: dict[Path, str] = {}  # form files that Markdown documents offer for download
        for file in files:
            if file.resolve() in attachments:
                # indexing the blank form as well would put two hits for one form in every answer
                errors.append(
                    LoadError(file, f"{ATTACHMENT_REASON} {attachments[file.resolve()]!r} (form_file); not indexed")
                )
                continue
            loaded = _load_file(file, root=root, format=format, language=language, errors=errors)
            for document in loaded:
                if document.doc_id in seen:
                    errors.append(
                        LoadError(file, f"duplicate doc_id {document.doc_id!r} (also {seen[document.doc_id]})")
                    )
                    continue
                seen[document.doc_id] = file
                documents.append(document)
                if document.form_file:
                    attachments[(root / document.form_file).resolve()] = document.doc_id
    return documents


def load_file(
    file: Path, *, doc_id: str, format: str, errors: list[LoadError], language: str | None = None
) -> list[Document]:
    """The documents of one file read as `format` (a named format, not "auto"), its doc_id given by the caller (a
    page fetched by a crawl keeps its URL's id, not the temporary file's name). Failures go to `errors`."""
    return _load_one(file, doc_id=doc_id, file_format=format, language=language, errors=errors)


def _load_file(file: Path, *, root: Path, format: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    file_format = format if format != "auto" else format_for_path(file)
    if file_format is None:
        known = ", ".join(sorted(_BY_EXTENSION))
        errors.append(LoadError(file, f"unsupported file type {file.suffix or '(no extension)'!r} (known: {known})"))
        return []
    return _load_one(
        file, doc_id=_doc_id(file, root, file_format), file_format=file_format, language=language, errors=errors
    )


def _load_one(
    file: Path, *, doc_id: str, file_format: str, language: str | None, errors: list[LoadError]
) -> list[Document]:
    try:
        loaded = _LOADERS[file_format](file, doc_id=doc_id, language=language, errors=errors)
        # Kangxi radicals from a PDF, full-width letters...: what a reader sees, so what search and answers use
        return [
            replace(document, title=fold_compatibility(document.title), text=fold_compatibility(document.text))
            for document in loaded
        ]
    except SkipFile as exc:
        errors.append(LoadError(file, exc.reason))
    except OSError as exc:
        errors.append(LoadError(file, f"cannot read the file ({exc.strerror or exc})"))
    except Exception as exc:
        # a parser bug on one odd file must not keep every other document out of the index; the traceback is
        # for the operator, the reason for the job log
        logger.exception("loading %s as %s failed", file, file_format)
        errors.append(LoadError(file, f"could not be loaded as {file_format} ({type(exc).__name__}: {exc})"))
    return []
