"""Where each document an index job reads links to, in this order:

1. the link staff set on the document in the admin (`Document.url_override`): it wins over everything below,
   for a file and for a website page alike, on every later index or sync, until staff clear it;
2. the document's own link: a website page's URL (after redirects and its canonical link), or `url` front matter;
3. the base URL of the folder source, or of the uploads source, that holds the file, + the file's path relative
   to that folder (`https://help.example.edu/` + `en/fees.html`).

The link is part of the document's content hash, so a changed link (a new base URL, a link set or cleared by
staff) makes the document "updated" in the job's plan: its chunks are written again with the new link and the
cached answers citing it are dropped, as for a changed text.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from urllib.parse import quote

from rag.documents.models import Document, Source, SourceKind
from rag.documents.sources import uploads_dir
from rag.retrieval.markdown import Document as SourceDocument
from rag.text.links import http_link

FOLDER_KINDS = (SourceKind.FOLDER, SourceKind.UPLOADS)


def source_folder(source: Source) -> Path:
    """The folder a folder or uploads source reads (the uploads folder for the uploads source)."""
    if source.kind == SourceKind.UPLOADS:
        return uploads_dir().resolve()
    return Path(source.folder).resolve()


def base_urls() -> list[tuple[Path, str]]:
    """(folder, base URL) of every folder and uploads source that has a base URL, deepest folder first."""
    found = [
        (source_folder(source), source.base_url)
        for source in Source.objects.filter(kind__in=FOLDER_KINDS).exclude(base_url="")
        if http_link(source.base_url)
    ]
    return sorted(found, key=lambda item: len(item[0].parts), reverse=True)


def staff_links() -> dict[str, str]:
    """doc_id -> the link staff set on it."""
    rows = Document.objects.exclude(url_override="").values_list("doc_id", "url_override")
    return {doc_id: link for doc_id, link in rows if http_link(link)}


def base_link(base_url: str, relative: str) -> str:
    return base_url.rstrip("/") + "/" + quote(relative)


def with_link(document: SourceDocument, url: str, *, marker: str = "") -> SourceDocument:
    """`document` linking to `url`, its content hash covering the link."""
    digest = hashlib.sha256(f"{document.content_hash}\n{marker}{url}".encode()).hexdigest()
    return dataclasses.replace(document, url=url, content_hash=digest)


def link_of(document: SourceDocument, *, staff: Mapping[str, str], bases: Sequence[tuple[Path, str]]) -> SourceDocument:
    """`document` with the link it is cited by (see the module's order)."""
    chosen = staff.get(document.doc_id)
    if chosen:
        return with_link(document, chosen, marker="link set by staff: ")
    if document.url or not document.source_path:
        return document
    path = Path(document.source_path)
    for folder, base_url in bases:
        if path.is_relative_to(folder):
            return with_link(document, base_link(base_url, path.relative_to(folder).as_posix()))
    return document


def links_applied(documents: Iterable[SourceDocument]) -> list[SourceDocument]:
    """The documents a job read, each with its link (reads the staff links and the sources' base URLs)."""
    staff = staff_links()
    bases = base_urls()
    return [link_of(document, staff=staff, bases=bases) for document in documents]
