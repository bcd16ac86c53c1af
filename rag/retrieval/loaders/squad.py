"""SQuAD-format JSON (``data[].paragraphs[].context`` with ``qas``): each paragraph is one document.

A reading-comprehension paragraph is already a retrieval unit (its questions are answered inside it), so it is
indexed whole (see `PASSAGE_CHUNKING` in rag.retrieval.chunking) and its doc_id names its place in the file,
``<file>/<article index>/<paragraph index>``, stable as long as the file's order is. The questions are read too,
for `manage.py eval_retrieval`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rag.retrieval.loaders.base import SkipFile, decode_text, resolve_language
from rag.retrieval.markdown import Document, LoadError
from rag.text.language import ZH_HANS, ZH_HANT, chinese_script, converter


@dataclass(frozen=True, slots=True)
class SquadQuestion:
    question_id: str
    text: str
    doc_id: str  # the paragraph that answers it
    answers: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class SquadFile:
    documents: list[Document]
    questions: list[SquadQuestion]


def read_squad(path: Path, *, doc_prefix: str, language: str | None, errors: list[LoadError]) -> SquadFile:
    """Paragraphs and their (answerable) questions. A bad article or paragraph is a `LoadError`, not the file's end.

    Raises `SkipFile` when the file is not SQuAD-format JSON at all or holds no paragraph with text.
    """
    text, _ = decode_text(path.read_bytes())
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SkipFile(f"not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from exc
    articles = data.get("data") if isinstance(data, dict) else None
    if not isinstance(articles, list):
        raise SkipFile('not SQuAD format: expected an object with a "data" list of articles')
    documents: list[Document] = []
    questions: list[SquadQuestion] = []
    for article_index, article in enumerate(articles):
        paragraphs = article.get("paragraphs") if isinstance(article, dict) else None
        if not isinstance(paragraphs, list):
            errors.append(LoadError(path, f'data[{article_index}]: no "paragraphs" list; article skipped'))
            continue
        raw_title = str(article.get("title") or "").strip().replace("_", " ")
        for paragraph_index, paragraph in enumerate(paragraphs):
            where = f"data[{article_index}].paragraphs[{paragraph_index}]"
            context = paragraph.get("context") if isinstance(paragraph, dict) else None
            if not isinstance(context, str) or not context.strip():
                errors.append(LoadError(path, f"{where}: no context text; paragraph skipped"))
                continue
            doc_id = f"{doc_prefix}/{article_index}/{paragraph_index}"
            paragraph_language = resolve_language(context, language)
            title = _title_in_script(raw_title, paragraph_language) or f"{doc_prefix} {article_index}"
            documents.append(
                Document(
                    doc_id=doc_id,
                    title=title,
                    text=context.strip(),
                    language=paragraph_language,
                    content_hash=hashlib.sha256(f"{title}\n{context}".encode()).hexdigest(),
                    source_path=str(path),
                )
            )
            questions.extend(_questions(paragraph, doc_id))
    if not documents:
        raise SkipFile("no paragraph with context text")
    return SquadFile(documents, questions)


def _title_in_script(title: str, language: str) -> str:
    """The article title in the paragraph's Chinese script.

    Wikipedia-derived sets keep page names in one script and text in another (DRCD: Simplified titles,
    Traditional paragraphs). A title is shown in citations and indexed with every chunk; in the wrong script it
    matches no question (which the pipeline normalises to the corpus's script) and reads oddly to the user.
    Plain ``s2t``/``t2s`` (character level, no phrase rewriting): titles are mostly proper names.
    """
    if not title:
        return title
    if language == ZH_HANT and chinese_script(title) == ZH_HANS:
        return converter("s2t").convert(title)
    if language == ZH_HANS and chinese_script(title) == ZH_HANT:
        return converter("t2s").convert(title)
    return title


def _questions(paragraph: dict[str, Any], doc_id: str) -> list[SquadQuestion]:
    out: list[SquadQuestion] = []
    qas = paragraph.get("qas")
    for index, qa in enumerate(qas if isinstance(qas, list) else []):
        if not isinstance(qa, dict) or qa.get("is_impossible"):
            continue  # SQuAD 2.0's unanswerable questions have no gold paragraph to find
        question = str(qa.get("question") or "").strip()
        if not question:
            continue
        answers = tuple(str(answer.get("text", "")) for answer in qa.get("answers") or () if isinstance(answer, dict))
        out.append(SquadQuestion(str(qa.get("id") or f"{doc_id}#{index}"), question, doc_id, answers))
    return out


def load_squad(path: Path, *, doc_id: str, language: str | None, errors: list[LoadError]) -> list[Document]:
    return read_squad(path, doc_prefix=doc_id, language=language, errors=errors).documents
