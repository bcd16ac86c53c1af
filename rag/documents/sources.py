"""Where documents come from: the allowed folders, the files a job reads, and loading them whatever the format.

Loading goes through `rag.retrieval.loaders.load_documents` (Markdown, text, HTML, PDF, SQuAD), so this module
names no format beyond file extensions; without that package only Markdown is read, each file screened first
(unreadable, empty, binary, not a PDF). Either way a bad file becomes a `LoadError` with a reason and never stops
the job.

Document ids are made relative to the allowed folder that holds the file (uploads get an ``uploads/`` prefix),
so a file keeps its id whether a job names the file, its folder or the whole corpus.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings

from rag.retrieval.chunking import ChunkingConfig
from rag.retrieval.markdown import Document, FrontMatterError, LoadError, load_markdown_file

logger = logging.getLogger(__name__)

FORMATS = ("auto", "markdown", "text", "html", "pdf", "squad", "docx", "xlsx", "pptx")
SUFFIX_FORMATS = {
    ".md": "markdown",
    ".markdown": "markdown",
    ".txt": "text",
    ".text": "text",
    ".html": "html",
    ".htm": "html",
    ".pdf": "pdf",
    ".json": "squad",
    ".docx": "docx",
    ".xlsx": "xlsx",
    ".pptx": "pptx",
}
UPLOAD_SUFFIXES = frozenset(SUFFIX_FORMATS)
UPLOADS_PREFIX = "uploads"
_TEXT_FORMATS = frozenset({"markdown", "text", "html", "squad"})
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")
_SNIFF_BYTES = 8192


class PathNotAllowed(ValueError):
    """A path outside the corpus and uploads folders (the HTTP API and the admin only index those)."""


def uploads_dir() -> Path:
    return Path(settings.DATA_DIR) / "uploads"


def corpus_dir() -> Path:
    return Path(settings.CORPUS_DIR)


def allowed_roots() -> list[Path]:
    return [corpus_dir().resolve(), uploads_dir().resolve()]


def path_allowed(raw: str) -> Path:
    """`raw` (absolute, or relative to CORPUS_DIR) resolved, if it lies in an allowed folder; else
    PathNotAllowed. Symbolic links are resolved first, so a link cannot lead outside."""
    if not raw or not raw.strip() or "\x00" in raw:
        raise PathNotAllowed("an empty path")
    path = Path(raw.strip())
    if not path.is_absolute():
        path = corpus_dir() / path
    resolved = path.resolve()
    for root in allowed_roots():
        if resolved.is_relative_to(root):
            return resolved
    raise PathNotAllowed(
        f"{raw!r} is outside the corpus folder ({corpus_dir()}) and the uploads folder ({uploads_dir()})"
    )


def format_of(path: Path | str) -> str:
    """The format a file's extension implies ("" for an unknown extension)."""
    return SUFFIX_FORMATS.get(Path(path).suffix.lower(), "")


def in_scope(source: str, scope: Sequence[Path], *, job_format: str, source_format: str = "") -> bool:
    """Whether a document read from `source` belongs to what a job with these paths and format re-reads (and
    so is deleted when the job no longer finds it)."""
    if not source:
        return False
    path = Path(source)
    if job_format != "auto" and (source_format or format_of(path)) != job_format:
        return False
    return any(path == root or path.is_relative_to(root) for root in (p.resolve() for p in scope))


@dataclass(slots=True)
class LoadResult:
    documents: list[Document] = field(default_factory=list)
    skipped: list[LoadError] = field(default_factory=list)
    formats: dict[str, str] = field(default_factory=dict)  # doc_id -> format it was read as
    missing: list[Path] = field(default_factory=list)  # job paths that do not exist
    # documents not read this time but kept as indexed: doc_id -> why ("" unchanged, e.g. a 304; else the reason it
    # is kept stale, e.g. a first 404 or a fetch error)
    kept: dict[str, str] = field(default_factory=dict)


def _files(entry: Path, job_format: str) -> list[Path]:
    def wanted(path: Path) -> bool:
        fmt = format_of(path)
        return bool(fmt) and (job_format == "auto" or fmt == job_format)

    # hidden folders (.git, editor swap dirs) never hold help articles
    return sorted(
        p
        for p in entry.rglob("*")
        if p.is_file() and wanted(p) and not any(part.startswith(".") for part in p.relative_to(entry).parts)
    )


def screen_file(path: Path, fmt: str) -> str:
    """Why `path` cannot be indexed as `fmt` before any parser sees it ("" when it looks fine)."""
    try:
        with path.open("rb") as handle:
            head = handle.read(_SNIFF_BYTES)
    except OSError as exc:
        return f"cannot read the file ({exc.strerror or exc})"
    if not head:
        return "empty file"
    if fmt == "pdf":
        if head.lstrip()[:5] != b"%PDF-":
            return "not a PDF file (no %PDF header): broken or mislabelled"
        return ""
    if fmt in ("docx", "xlsx", "pptx"):
        if not head.startswith(b"PK\x03\x04"):
            return f"not a .{fmt} file (not a zip archive): broken, encrypted or mislabelled"
        return ""
    if fmt in _TEXT_FORMATS or not fmt:
        if b"\x00" in head and not head.startswith(_BOMS):
            return "binary file, not text"
        if not head.strip(b" \t\r\n\x0b\x0c" + b"".join(_BOMS)):
            return "empty file (only whitespace)"
    return ""


def _loader() -> Callable[..., list[Document]] | None:
    try:
        # Optional: a deployment may ship without the loaders package (the Markdown fallback below).
        from rag.retrieval.loaders import load_documents
    except ImportError:
        return None
    return load_documents


def chunking_for(fmt: str) -> ChunkingConfig:
    """The chunking that suits a format (the loaders' choice when they are installed)."""
    try:
        from rag.retrieval.loaders import chunking_for as loaders_chunking_for  # optional: see _loader
    except ImportError:
        return ChunkingConfig()
    return loaders_chunking_for(fmt)


def _markdown_fallback(entry: Path, job_format: str, errors: list[LoadError]) -> list[Document]:
    """Without the loaders package: Markdown only, each file screened first."""
    files = _files(entry, job_format) if entry.is_dir() else [entry]
    root = entry if entry.is_dir() else entry.parent
    documents: list[Document] = []
    for file in files:
        fmt = job_format if job_format != "auto" else format_of(file)
        reason = screen_file(file, fmt)
        if not reason and fmt != "markdown":
            reason = f"{fmt or 'this'} files need the document loaders (rag.retrieval.loaders), not installed"
        if reason:
            errors.append(LoadError(file, reason))
            continue
        try:
            documents.append(load_markdown_file(file, root=root))
        except (FrontMatterError, OSError) as exc:
            errors.append(LoadError(file, str(exc)))
    return documents


def _id_prefix(base: Path) -> str:
    """The doc_id prefix of documents whose ids are relative to folder `base`: its place under the allowed
    folder holding it ("" outside them: ids stay relative to the folder given, as the loaders make them)."""
    resolved = base.resolve()
    uploads = uploads_dir().resolve()
    # the deepest allowed folder wins (uploads may sit inside the corpus folder or the other way round)
    roots = sorted((r for r in allowed_roots() if resolved.is_relative_to(r)), key=lambda r: len(r.parts))
    if not roots:
        return ""
    root = roots[-1]
    parts = [UPLOADS_PREFIX] if root == uploads else []
    parts += list(resolved.relative_to(root).parts)
    return "/".join(parts)


def _as_load_error(item: Any, fallback: Path) -> LoadError:
    if isinstance(item, LoadError):
        return item
    path = getattr(item, "path", None)
    reason = getattr(item, "reason", None)
    return LoadError(Path(path) if path else fallback, str(reason if reason is not None else item))


def load_sources(
    paths: Iterable[Path],
    *,
    format: str = "auto",
    on_entry: Callable[[Path], None] | None = None,
) -> LoadResult:
    """Every document under `paths` (files or folders) in the given format ("auto": by extension).

    Each path goes to the loaders in one call (they pair Markdown forms with their attachments within it).
    `on_entry(path)` is called before each path (progress, cancel checks). A doc_id produced twice is an error
    for the second file.
    """
    if format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}")
    loader = _loader()
    result = LoadResult()
    seen: dict[str, str] = {}
    for entry in map(Path, paths):
        if on_entry is not None:
            on_entry(entry)
        if not entry.exists():
            result.skipped.append(LoadError(entry, "no such file or folder"))
            result.missing.append(entry)
            continue
        errors: list[Any] = []
        try:
            if loader is not None:
                documents = list(loader([entry], format=format, errors=errors))
            else:
                documents = _markdown_fallback(entry, format, errors)
        except Exception as exc:
            # the loaders skip bad files themselves; this is for a bug, which must not end the job either
            logger.exception("loading %s failed", entry)
            documents = []
            errors.append(LoadError(entry, f"could not be read ({type(exc).__name__}: {exc})"))
        result.skipped.extend(_as_load_error(error, entry) for error in errors)
        prefix = _id_prefix(entry if entry.is_dir() else entry.parent)
        for document in documents:
            doc_id = f"{prefix}/{document.doc_id}" if prefix else document.doc_id
            source = str(Path(document.source_path or entry).resolve())
            if doc_id in seen:
                result.skipped.append(LoadError(Path(source), f"duplicate doc_id {doc_id!r} (also {seen[doc_id]})"))
                continue
            seen[doc_id] = source
            result.documents.append(dataclasses.replace(document, doc_id=doc_id, source_path=source))
            result.formats[doc_id] = format if format != "auto" else format_of(source)
    return result
