"""HTML pages as Markdown-style text: headings stay headings (the chunker splits on them), the rest is text.

Only what a reader of the page sees is kept. `<script>`, `<style>` and other non-text elements are dropped with
everything inside them, and so are elements the page hides (`hidden`, `aria-hidden="true"`, inline
`display:none`): text nobody sees is exactly where an injected instruction for the LLM would hide. When the page
marks its main content (`<main>` or `role="main"`), navigation and footers around it are left out.
"""

from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

from rag.retrieval.loaders.base import SkipFile, content_hash, decode_text, join_cjk_gaps, resolve_language
from rag.retrieval.markdown import Document, LoadError
from rag.retrieval.tables import render_table

# elements whose content is never page text
_DROPPED = frozenset(
    {"script", "style", "noscript", "template", "svg", "math", "iframe", "object", "canvas", "select", "button"}
    | {"nav"}  # site menus: the same links on every page would match every question about them
)
_VOID = frozenset(
    {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "param", "source", "track", "wbr"}
)
_BLOCK = frozenset(
    {
        "address", "article", "aside", "blockquote", "body", "caption", "dd", "details", "div", "dl", "dt",
        "fieldset", "figcaption", "figure", "footer", "form", "header", "hr", "html", "main", "ol", "p", "pre",
        "section", "summary", "table", "tbody", "thead", "tfoot", "ul",
    }
)  # fmt: skip
_LINE = frozenset({"br", "tr", "li", "option"})
_CELL = frozenset({"td", "th"})
_HEADING_RE = re.compile(r"^h([1-6])$")
_SPACE_RE = re.compile(r"\s+")
_HIDDEN_STYLE_RE = re.compile(r"display\s*:\s*none|visibility\s*:\s*hidden", re.IGNORECASE)
_META_CHARSET_RE = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:-]+)""", re.IGNORECASE)
_CJK_CHAR = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
# a line break in the source between two CJK characters is wrapping, not a space (CSS Text 3 does the same)
_CJK_WRAP_RE = re.compile(rf"(?<=[{_CJK_CHAR}])[ \t]*[\r\n]+[ \t]*(?=[{_CJK_CHAR}])")
_BLANK_LINES_RE = re.compile(r"\n{3,}")
# around the content of a page without <main>: the site's header, footer, sidebars, banners and breadcrumbs
_FURNITURE = frozenset({"header", "footer", "aside"})
_FURNITURE_NAME_RE = re.compile(r"\b(cookie\w*|breadcrumbs?|crumbs|sidebar|banner|skip-link|site-header|site-footer)\b")


class _PageText(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.title = ""
        self.first_h1 = ""
        self._all: list[str] = []  # the whole page's text pieces
        self._main: list[str] = []  # the pieces inside <main>, when the page has one
        self._body: list[str] = []  # the pieces outside site furniture (header, footer, aside, cookie banners)
        self._furniture: list[list[str | int]] = []  # [tag, nesting depth] of furniture elements still open
        self._dropping: list[list[str | int]] = []  # [tag, nesting depth] of dropped elements still open
        self._main_depth = 0
        self._pre_depth = 0
        self._in_title = False
        self._heading: tuple[int, list[str]] | None = None
        self._lists: list[int | None] = []  # the open lists, innermost last: an <ol>'s next number, None for <ul>
        # tables being read (a nested table's text goes into the outer table's cell): rows of cells of pieces
        self._tables: list[list[list[list[str]]]] = []

    # -- helpers

    def _emit(self, piece: str) -> None:
        self._all.append(piece)
        if self._main_depth:
            self._main.append(piece)
        elif not self._furniture:
            self._body.append(piece)

    def text(self) -> str:
        # <main> when the page marks it; else the page without its furniture; else all of it
        pieces = next((p for p in (self._main, self._body) if "".join(p).strip()), self._all)
        lines = [line.strip() for line in "".join(pieces).split("\n")]
        return _BLANK_LINES_RE.sub("\n\n", "\n".join(lines)).strip()

    # -- parser callbacks

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if self._dropping:
            top = self._dropping[-1]
            if tag == top[0] and tag not in _VOID:
                top[1] = int(top[1]) + 1
            return
        attributes = dict(attrs)
        if tag in _DROPPED or _hidden(attributes):
            if tag not in _VOID:
                self._dropping.append([tag, 1])
            return
        self._furniture_start(tag, attributes)
        if self._table_start(tag):
            return
        if tag == "title":
            self._in_title = not self.title
        elif tag == "main" or attributes.get("role") == "main":
            self._main_depth += 1
        elif tag == "pre":
            self._pre_depth += 1
        if tag in ("ol", "ul"):
            start = attributes.get("start") or "1"
            self._lists.append(int(start) if tag == "ol" and start.strip().isdigit() else None)
        heading = _HEADING_RE.match(tag)
        if heading:
            self._heading = (int(heading.group(1)), [])
        elif tag == "li":
            # an item of a numbered list keeps its number: a procedure's steps are read by their numbers
            number = self._lists[-1] if self._lists else None
            self._emit(f"\n{number}. " if number is not None else "\n- ")
            if number is not None:
                self._lists[-1] = number + 1
        elif tag in _LINE:
            self._emit("\n")
        elif tag in _CELL:
            self._emit(" ")
        elif tag in _BLOCK:
            self._emit("\n\n")

    def handle_endtag(self, tag: str) -> None:
        if self._dropping:
            top = self._dropping[-1]
            if tag == top[0]:
                depth = int(top[1]) - 1
                top[1] = depth
                if depth <= 0:
                    self._dropping.pop()
            return
        self._furniture_end(tag)
        if self._table_end(tag):
            return
        if tag == "title":
            self._in_title = False
        elif tag == "main" and self._main_depth:
            self._main_depth -= 1
        elif tag == "pre" and self._pre_depth:
            self._pre_depth -= 1
        elif tag in ("ol", "ul") and self._lists:
            self._lists.pop()
        heading = _HEADING_RE.match(tag)
        if heading and self._heading is not None:
            level, parts = self._heading
            self._heading = None
            words = _SPACE_RE.sub(" ", join_cjk_gaps("".join(parts))).strip()
            if words:
                if level == 1 and not self.first_h1:
                    self.first_h1 = words
                # a heading on its own line, as the chunker's Markdown heading parser expects
                self._emit(f"\n\n{'#' * level} {words}\n\n")
        elif tag in _BLOCK:
            self._emit("\n\n")

    def handle_data(self, data: str) -> None:
        if self._dropping:
            return
        if self._in_title:
            self.title = _SPACE_RE.sub(" ", f"{self.title} {data}").strip()
            return
        if self._tables:
            table = self._tables[-1]
            if table and table[-1]:
                table[-1][-1].append(data)
            return
        if self._heading is not None:
            self._heading[1].append(data)
            return
        if self._pre_depth:
            self._emit(data)
            return
        self._emit(_SPACE_RE.sub(" ", _CJK_WRAP_RE.sub("", data)))

    # -- site furniture outside <main>: left out of a page that does not mark its main content

    def _furniture_start(self, tag: str, attributes: dict[str, str | None]) -> None:
        if self._main_depth or tag in _VOID:
            return
        if self._furniture:
            top = self._furniture[-1]
            if tag == top[0]:
                top[1] = int(top[1]) + 1
            return
        names = f"{attributes.get('class') or ''} {attributes.get('id') or ''}".lower()
        if tag in _FURNITURE or _FURNITURE_NAME_RE.search(names):
            self._furniture.append([tag, 1])

    def _furniture_end(self, tag: str) -> None:
        if self._furniture and tag == self._furniture[-1][0]:
            top = self._furniture[-1]
            top[1] = int(top[1]) - 1
            if int(top[1]) <= 0:
                self._furniture.pop()

    # -- tables: rendered in the one pipe-table format (rag.retrieval.tables) when they close

    def _table_start(self, tag: str) -> bool:
        """Whether a start tag was table business (or is inside a cell, where it is only a word break)."""
        if tag == "table":
            if self._tables and self._tables[-1] and self._tables[-1][-1]:
                self._tables[-1][-1][-1].append(" ")  # a nested table is text in the outer cell
            self._tables.append([])
            return True
        if not self._tables:
            return False
        table = self._tables[-1]
        if tag == "tr":
            table.append([])
        elif tag in _CELL:
            if not table:
                table.append([])
            table[-1].append([])
        elif table and table[-1]:
            table[-1][-1].append(" ")
        return True

    def _table_end(self, tag: str) -> bool:
        if not self._tables:
            return False
        if tag != "table":
            if self._tables[-1] and self._tables[-1][-1] and tag in _BLOCK | _LINE | _CELL:
                self._tables[-1][-1][-1].append(" ")
            return True
        rows = self._tables.pop()
        cells = [["".join(pieces) for pieces in row] for row in rows]
        if self._tables:
            outer = self._tables[-1]
            if outer and outer[-1]:
                outer[-1][-1].append(" ".join(" ".join(row) for row in cells))
            return True
        table = render_table([[join_cjk_gaps(cell) for cell in row] for row in cells])
        if table:
            self._emit(f"\n\n{table}\n\n")
        return True


def _hidden(attributes: dict[str, str | None]) -> bool:
    if "hidden" in attributes or (attributes.get("aria-hidden") or "").lower() == "true":
        return True
    return bool(_HIDDEN_STYLE_RE.search(attributes.get("style") or ""))


def html_to_text(html: str) -> tuple[str, str]:
    """(title, Markdown-style text) of an HTML page; the title is "" when the page has neither <title> nor <h1>."""
    parser = _PageText()
    parser.feed(html)
    parser.close()
    return parser.title or parser.first_h1, parser.text()


def _meta_charset(data: bytes) -> str | None:
    match = _META_CHARSET_RE.search(data[:4096])
    return match.group(1).decode("ascii").lower() if match else None


def load_html(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    data = path.read_bytes()
    text, _ = decode_text(data, preferred=_meta_charset(data))
    title, body = html_to_text(text)
    if not body:
        raise SkipFile("no visible text in the page")
    return [
        Document(
            doc_id=doc_id,
            title=title or path.stem,
            text=body,
            language=resolve_language(body, language),
            content_hash=content_hash(data),
            source_path=str(path),
        )
    ]
