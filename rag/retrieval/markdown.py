"""Help-centre Markdown documents: front matter, validation and loading from folders.

The front matter is the flat subset staff actually write (``key: value``, ``tags: [a, b]``, quotes optional), so a
small parser is enough and keeps PyYAML's surprises out (``no`` becoming False, ``1.10`` becoming 1.1). Loading
collects a `LoadError` per bad file instead of raising: one typo must not keep the other documents out of the index.

A file without front matter is an ordinary Markdown file (a README, an exported page): it is read the way plain
text is, titled by its first heading (else its file name), its language detected from the text, with no url. A
file whose first line is ``---`` has front matter, and then the front matter decides and must be valid.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from rag.text.language import ZH_HANT, detect_language
from rag.text.links import http_link

LANGUAGES = frozenset({"zh-hant", "zh-hans", "en"})
KINDS = frozenset({"article", "form"})
KNOWN_KEYS = frozenset({"title", "url", "language", "tags", "kind", "form_id", "form_file"})

_KEY_RE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)\s*:(.*)$")
_FENCE = "---"
# the chunker's ATX heading rule, plus setext ("Title" underlined with === or ---)
_ATX_RE = re.compile(r"^ {0,3}(#{1,6})\s+(.+?)(?:\s+#+)?\s*$")
_SETEXT_RE = re.compile(r"^ {0,3}(=+|-+)\s*$")
_CODE_FENCE_RE = re.compile(r"^\s*(```|~~~)")
MAX_TITLE_CHARS = 120  # a longer "heading" is a paragraph someone marked up, not a title
# enough text to tell the language apart; a whole book need not be scanned
LANGUAGE_SAMPLE_CHARS = 4000


class FrontMatterError(ValueError):
    """The front matter is missing or malformed; the message says which line and why."""


@dataclass(frozen=True, slots=True)
class LoadError:
    path: Path
    reason: str

    def __str__(self) -> str:
        return f"{self.path}: {self.reason}"


@dataclass(frozen=True, slots=True)
class Document:
    doc_id: str  # the path relative to the corpus root, without ".md", with "/" separators: stable across runs
    title: str
    text: str  # the Markdown body, front matter removed
    language: str
    url: str = ""
    tags: tuple[str, ...] = ()
    kind: str = "article"
    form_id: str = ""
    form_file: str = ""
    content_hash: str = ""  # sha256 of the raw file: lets a later reindex skip unchanged documents
    source_path: str = field(default="", compare=False)


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[1:-1]
    return value


def _parse_value(raw: str, lineno: int) -> str | tuple[str, ...]:
    value = raw.strip()
    if value.startswith("["):
        if not value.endswith("]"):
            raise FrontMatterError(f"line {lineno}: list value must end with ']'")
        inner = value[1:-1].strip()
        if not inner:
            return ()
        items = tuple(_unquote(item.strip()) for item in inner.split(","))
        if any(not item for item in items):
            raise FrontMatterError(f"line {lineno}: empty item in list {value}")
        return items
    if value.endswith("]"):
        raise FrontMatterError(f"line {lineno}: list value must start with '['")
    return _unquote(value)


def parse_front_matter(raw: str) -> tuple[dict[str, str | tuple[str, ...]], str]:
    """Split ``---`` front matter from the body: (fields, body). Raises `FrontMatterError`."""
    text = raw.lstrip("\ufeff")  # editors on Windows like to add a BOM
    lines = text.splitlines()
    if not lines or lines[0].strip() != _FENCE:
        raise FrontMatterError("no front matter: the file must start with a '---' line")
    fields: dict[str, str | tuple[str, ...]] = {}
    for index in range(1, len(lines)):
        line = lines[index]
        lineno = index + 1
        stripped = line.strip()
        if stripped == _FENCE:
            body = "\n".join(lines[index + 1 :])
            return fields, body.strip("\n")
        if not stripped or stripped.startswith("#"):
            continue
        match = _KEY_RE.match(stripped)
        if match is None:
            raise FrontMatterError(f"line {lineno}: expected 'key: value', got {stripped!r}")
        key = match.group(1)
        if key in fields:
            raise FrontMatterError(f"line {lineno}: duplicate key {key!r}")
        fields[key] = _parse_value(match.group(2), lineno)
    raise FrontMatterError("front matter is not closed: no second '---' line")


def _link(fields: dict[str, str | tuple[str, ...]]) -> str:
    url = _scalar(fields, "url")
    if url and not http_link(url):
        raise FrontMatterError(f"'url' must be an http(s) URL, got {url[:80]!r}")
    return url


def _scalar(fields: dict[str, str | tuple[str, ...]], key: str) -> str:
    value = fields.get(key, "")
    if isinstance(value, tuple):
        raise FrontMatterError(f"{key!r} must be a single value, not a list")
    return value.strip()


def has_front_matter(raw: str) -> bool:
    """Whether the text opens with front matter: its first non-blank line is ``---``.

    Not only the very first line: front matter after a blank line is a mistake to report ("the file must start
    with a '---' line"), not metadata to index as body text.
    """
    for line in raw.lstrip("\ufeff").splitlines():
        if line.strip():
            return line.strip() == _FENCE
    return False


def first_heading(markdown: str) -> str:
    """The text of the first ATX (``# Title``) or setext heading outside code fences; "" when there is none."""
    in_fence = False
    previous = ""
    for line in markdown.splitlines():
        if _CODE_FENCE_RE.match(line):
            in_fence = not in_fence
            previous = ""
            continue
        if in_fence:
            continue
        match = _ATX_RE.match(line)
        if match is not None:
            return match.group(2).strip()
        if previous and _SETEXT_RE.match(line):
            return previous
        previous = line.strip()
    return ""


def detect_document_language(text: str) -> str:
    """zh-hant, zh-hans, en or other, from the start of the text (Traditional Chinese when it cannot tell)."""
    return detect_language(text[:LANGUAGE_SAMPLE_CHARS], default=ZH_HANT)


def document_from_text(raw: str, *, doc_id: str, source_path: str = "", language: str | None = None) -> Document:
    """Parse and validate one file's text. Raises `FrontMatterError` naming the problem.

    Without front matter the file is plain Markdown (see `plain_document`); `language` is used only then, the
    front matter's own wins.
    """
    if not has_front_matter(raw):
        return plain_document(raw, doc_id=doc_id, source_path=source_path, language=language)
    fields, body = parse_front_matter(raw)
    unknown = sorted(set(fields) - KNOWN_KEYS)
    if unknown:
        # a misspelt key (e.g. "langauge") would otherwise be silently ignored
        raise FrontMatterError(f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(KNOWN_KEYS))}")
    title = _scalar(fields, "title")
    if not title:
        raise FrontMatterError("'title' is required")
    language = _scalar(fields, "language")
    if language not in LANGUAGES:
        raise FrontMatterError(f"'language' must be one of {', '.join(sorted(LANGUAGES))}, got {language!r}")
    kind = _scalar(fields, "kind") or "article"
    if kind not in KINDS:
        raise FrontMatterError(f"'kind' must be one of {', '.join(sorted(KINDS))}, got {kind!r}")
    form_id = _scalar(fields, "form_id")
    if kind == "form" and not form_id:
        raise FrontMatterError("a document with 'kind: form' needs a 'form_id'")
    raw_tags = fields.get("tags", ())
    tags = (raw_tags,) if isinstance(raw_tags, str) and raw_tags else raw_tags if isinstance(raw_tags, tuple) else ()
    if not body.strip():
        raise FrontMatterError("the document has no body text")
    return Document(
        doc_id=doc_id,
        title=title,
        text=body,
        language=language,
        url=_link(fields),
        tags=tuple(tag.strip() for tag in tags),
        kind=kind,
        form_id=form_id,
        form_file=_scalar(fields, "form_file"),
        content_hash=hashlib.sha256(raw.encode("utf-8")).hexdigest(),
        source_path=source_path,
    )


def plain_document(raw: str, *, doc_id: str, source_path: str = "", language: str | None = None) -> Document:
    """A Markdown file without front matter, read as the text loader reads a .txt file: the first heading is the
    title (the file name when there is none, or only one too long to be a title), `language` or the detected
    one, no url. The body keeps the heading, as it does under front matter, so the chunker sees the structure.
    """
    body = raw.lstrip("\ufeff").replace("\r\n", "\n").replace("\r", "\n").strip("\n")
    if not body.strip():
        raise FrontMatterError("the document has no body text")
    heading = first_heading(body)
    fallback = Path(source_path).stem if source_path else doc_id.rsplit("/", 1)[-1]
    title = heading if heading and len(heading) <= MAX_TITLE_CHARS else fallback
    return Document(
        doc_id=doc_id,
        title=title,
        text=body,
        language=language or detect_document_language(body),
        content_hash=hashlib.sha256(raw.encode("utf-8")).hexdigest(),
        source_path=source_path,
    )


def doc_id_for(path: Path, root: Path) -> str:
    return path.relative_to(root).with_suffix("").as_posix()


def load_markdown_file(path: Path, *, root: Path | None = None) -> Document:
    """One file; `doc_id` is its path relative to `root` (default: its folder). Raises on any problem."""
    path = Path(path)
    base = root if root is not None else path.parent
    try:
        raw = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FrontMatterError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from exc
    return document_from_text(raw, doc_id=doc_id_for(path, base), source_path=str(path))


def _markdown_files(root: Path) -> list[Path]:
    # hidden folders (.git, editor swap dirs) never hold help articles
    return sorted(
        p
        for p in root.rglob("*.md")
        if p.is_file() and not any(part.startswith(".") for part in p.relative_to(root).parts)
    )


def load_markdown_dir(path: Path | str, *, errors: list[LoadError] | None = None) -> list[Document]:
    """Every ``*.md`` under `path` (recursively, sorted), skipping other files.

    A file that cannot be read or parsed is appended to `errors` as a `LoadError` (path and reason) and
    skipped; pass a list to see them. A missing folder is reported the same way.
    """
    return load_markdown_paths([Path(path)], errors=errors)


def load_markdown_paths(paths: Iterable[Path | str], *, errors: list[LoadError] | None = None) -> list[Document]:
    """Files and folders together; a doc_id seen twice is an error for the second file."""
    sink: list[LoadError] = errors if errors is not None else []
    documents: list[Document] = []
    seen: dict[str, Path] = {}
    for entry in map(Path, paths):
        if entry.is_dir():
            root, files = entry, _markdown_files(entry)
        elif entry.is_file():
            if entry.suffix.lower() != ".md":
                sink.append(LoadError(entry, "not a Markdown (.md) file"))
                continue
            root, files = entry.parent, [entry]
        else:
            sink.append(LoadError(entry, "no such file or folder"))
            continue
        for file in files:
            try:
                document = load_markdown_file(file, root=root)
            except (FrontMatterError, OSError) as exc:
                sink.append(LoadError(file, str(exc)))
                continue
            if document.doc_id in seen:
                sink.append(LoadError(file, f"duplicate doc_id {document.doc_id!r} (also {seen[document.doc_id]})"))
                continue
            seen[document.doc_id] = file
            documents.append(document)
    return documents
