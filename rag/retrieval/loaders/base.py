"""What every file loader shares: the skip signal, text decoding with encoding detection, titles, language.

Loaders turn one file into `Document`s or raise `SkipFile` with a reason a member of staff can act on ("not text
in any supported encoding", "encrypted PDF"); `load_documents` turns that into a `LoadError` for the job log.
"""

from __future__ import annotations

import codecs
import hashlib
import re

from rag.retrieval.markdown import MAX_TITLE_CHARS, detect_document_language

# Tried in this order after the byte-order marks. Big5 before GB18030: GB18030 accepts almost any byte pair, so
# a Big5 file would "decode" as GB18030 mojibake, while GB text rarely survives Big5's stricter table. cp950 is
# Microsoft's Big5 (a few dozen extra characters, e.g. 碁 銹), what Windows in Taiwan actually writes.
# cp1252 (Windows' Western code page, a superset of Latin-1's printable range) comes last: it decodes all but five
# byte values, so it would take any file from the others. It is the fallback for English and Western European
# text saved by older Windows tools ("café – naïve"), and is only accepted for text that looks like it: see
# `_plausible_single_byte`.
ENCODINGS = ("utf-8", "big5", "cp950", "gb18030", "cp1252")
_SINGLE_BYTE = frozenset({"cp1252"})
# Latin-script text is mostly ASCII (an accent is one letter in a word); binary data, or text in an unsupported
# multi-byte encoding, is about half bytes above 0x7F
_MAX_SINGLE_BYTE_HIGH_RATIO = 0.25
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),  # before UTF-16 LE: its BOM starts with the UTF-16 LE one
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF_BYTES = 8192
# text files use tab, newline, carriage return and form feed; other C0 controls (and DEL) mean binary data
_CONTROL_RE = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")
_MAX_CONTROL_RATIO = 0.02
_CJK = r"\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_CJK_GAP_RE = re.compile(rf"(?<=[{_CJK}])[ \t\u3000]+(?=[{_CJK}])")


class SkipFile(Exception):
    """This file cannot be loaded; `reason` goes to the job log as a `LoadError`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def looks_binary(text_or_bytes: str | bytes) -> bool:
    """NUL bytes or more than a few control characters in the first few kilobytes."""
    sample = text_or_bytes[:_SNIFF_BYTES]
    if isinstance(sample, bytes):
        if b"\x00" in sample:
            return True
        sample = sample.decode("latin-1")  # one char per byte: only the C0 range matters here
    if not sample:
        return False
    return len(_CONTROL_RE.findall(sample)) / len(sample) > _MAX_CONTROL_RATIO


def decode_text(data: bytes, *, preferred: str | None = None) -> tuple[str, str]:
    """(text, encoding): a byte-order mark wins, then `preferred` (e.g. an HTML meta charset), then `ENCODINGS`.

    Raises `SkipFile` for an empty or binary file, or bytes that none of the encodings decode. UTF-16 without a
    BOM is not guessed: its NUL bytes make it look binary, and guessing its byte order goes wrong on short files.
    """
    if not data.strip():
        raise SkipFile("empty file" if not data else "the file holds only whitespace")
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise SkipFile(
                    f"starts with a {encoding} byte-order mark but is not {encoding} ({exc.reason})"
                ) from exc
            return _checked(text.lstrip("\ufeff")), encoding
    if looks_binary(data):
        raise SkipFile("binary file (NUL bytes or control characters), not text")
    candidates = ENCODINGS if preferred is None else (preferred, *ENCODINGS)
    for encoding in candidates:
        if encoding in _SINGLE_BYTE and encoding != preferred and not _plausible_single_byte(data):
            continue
        try:
            return _checked(data.decode(encoding)), encoding
        except (UnicodeDecodeError, LookupError):
            continue
    raise SkipFile(f"not text in any supported encoding ({', '.join(ENCODINGS)}, or UTF-16/32 with a BOM)")


def _plausible_single_byte(data: bytes) -> bool:
    """Whether bytes that every multi-byte encoding refused can be Western text in a single-byte code page.

    The control-character check (`looks_binary`) has run on the bytes already, and runs again on the decoded
    text; but a single-byte code page turns every other byte into a printable character, so binary data without
    control bytes would pass both. Text in such a code page is mostly ASCII.
    """
    sample = data[:_SNIFF_BYTES]
    high = sum(1 for byte in sample if byte > 0x7F)
    return high / len(sample) <= _MAX_SINGLE_BYTE_HIGH_RATIO


def _checked(text: str) -> str:
    if looks_binary(text):
        raise SkipFile("binary file (control characters after decoding), not text")
    if not text.strip():
        raise SkipFile("no text")
    return text


def join_cjk_gaps(text: str) -> str:
    """Drop spaces between two CJK characters (PDF extraction and HTML line wrapping put them there).

    Chinese does not separate words with spaces, and the tokenizer would lose the bigram across each one.
    """
    return _CJK_GAP_RE.sub("", text)


def title_from_text(text: str, *, fallback: str) -> tuple[str, str]:
    """(title, body): a short first line is the title and leaves the body; otherwise `fallback` and all the text.

    A long first line is a paragraph, not a title. A one-line file keeps that line as its body too, so its text
    is still indexed and quoted.
    """
    lines = text.splitlines()
    for index, line in enumerate(lines):
        candidate = line.strip().lstrip("#").strip()
        if not candidate:
            continue
        if len(candidate) > MAX_TITLE_CHARS:
            break
        body = "\n".join(lines[index + 1 :]).strip()
        return candidate, body or candidate
    return fallback, text.strip()


def resolve_language(text: str, language: str | None) -> str:
    """The given language, else detected from the start of the text: zh-hant, zh-hans, en or other."""
    if language:
        return language
    return detect_document_language(text)
