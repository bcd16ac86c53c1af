"""retrieval_checker: are the retrieved chunks good enough to answer from, worth another try, or hopeless?

Two signals, both cheap: the retriever's score of the best chunk (a floor, tuned per deployment), and whether
the question's key terms actually appear in one of the top chunks. The lexical check catches the common
failure of dense search: a confident score for an article on a neighbouring topic.
"""

from __future__ import annotations

from typing import Any

from rag.deps import PipelineDeps
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.rules.messages import reply_language
from rag.rules.planner_rules import FORM_INTENTS
from rag.rules.terms import overlap, query_characters, query_terms, text_terms
from rag.state import PipelineState
from rag.text.glossary import builtin_glossary

NAME = "retrieval_checker"
INPUTS = ("normalized_question", "search_query", "retrieved")
OPTIONAL_INPUTS = ("loops", "intent", "history", "language")  # see response_synth.OPTIONAL_INPUTS
OUTPUTS = ("retrieval_verdict",)
RELEVANT = "relevant"
RETRY = "retry"
FALLBACK = "fallback"


class RetrievalChecker:
    name = NAME

    def __init__(
        self, *, min_score: float, min_overlap: float, max_loops: int, top_n: int, min_char_overlap: float = 0.0
    ) -> None:
        self._min_score = min_score
        self._min_overlap = min_overlap
        self._min_char_overlap = min_char_overlap
        self._max_loops = max_loops
        self._top_n = top_n

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        verdict = RELEVANT if self._good_enough(state) else (RETRY if state.loops < self._max_loops else FALLBACK)
        state.retrieval_verdict = verdict
        return verdict

    def _good_enough(self, state: PipelineState) -> bool:
        chunks = state.retrieved
        if not chunks:
            return False
        if state.intent in FORM_INTENTS:
            # The search was restricted to forms; which of them fit is response_synth's call.
            return any(chunk.kind == "form" for chunk in chunks)
        if max(chunk.score for chunk in chunks) < self._min_score:
            return False
        # The question's own terms, or, in a conversation, those of the main query of this pass: "tell me more" is
        # searched as the previous question, and judged by it too. Without a conversation only the asker's words
        # count: a retry's query is a variation (the model's, with an LLM) in the help centre's words, and judging
        # by it let an off-topic question through to an answer the content does not support.
        term_sets = [query_terms(state.normalized_question)]
        if state.history and state.search_query and state.search_query != state.normalized_question:
            term_sets.append(query_terms(state.search_query))
        # a passage in the other language holds the question's help-centre terms translated (rag.text.glossary);
        # only such a passage is judged by them
        translated = query_terms(" ".join(builtin_glossary().translations(state.normalized_question)))
        asked = reply_language(state.language)
        characters = query_characters(state.normalized_question) if self._min_char_overlap else set()
        # The top few, not only the first: fusion may rank a broadly similar chunk above the precise one.
        for chunk in chunks[: self._top_n]:
            have = text_terms(f"{chunk.title} {chunk.heading} {chunk.text}")
            foreign = bool(translated) and bool(chunk.language) and reply_language(chunk.language) != asked
            found = max(overlap(wanted, have) for wanted in ([*term_sets, translated] if foreign else term_sets))
            if found >= self._min_overlap:
                return True
            # A Chinese question in other words than the passage's: most of its characters are there, and some
            # of its bigrams (the text's unigrams are among its terms)
            if characters and found >= self._min_overlap / 2 and overlap(characters, have) >= self._min_char_overlap:
                return True
        return False


def _build(deps: PipelineDeps, params: dict[str, Any]) -> RetrievalChecker:
    return RetrievalChecker(
        min_score=params["min_score"] or deps.config.min_relevance,
        min_overlap=params["min_overlap"],
        # The deployment's bound caps the workflow's: a draft cannot make requests loop longer.
        max_loops=min(params["max_loops"], deps.config.max_retrieval_loops),
        top_n=params["top_n"],
        min_char_overlap=params["min_char_overlap"],
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Judges the retrieved chunks: relevant, retry with another query, or fall back to an honest answer.",
        "zh-hant": "判斷檢索結果：相關、換個查詢重試，或改為誠實告知找不到答案。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    routes=(RELEVANT, RETRY, FALLBACK),
    params={
        "min_score": ParamSpec("float", 0.0, "Lowest retriever score of the best chunk (0: the deployment's)"),
        "min_overlap": ParamSpec(
            "float", 0.4, "Share of the question's key terms a top chunk must contain", minimum=0, maximum=1
        ),
        "max_loops": ParamSpec(
            "int", 2, "Retries before falling back; the retry edge's max_visits must allow as many", minimum=0
        ),
        "min_char_overlap": ParamSpec(
            "float",
            0.7,
            "Chinese questions: share of their characters a top chunk holding half the overlap above must contain "
            "(0: off)",
            minimum=0,
            maximum=1,
        ),
        "top_n": ParamSpec("int", 3, "How many top chunks the lexical check looks at", minimum=1, maximum=20),
    },
)
