"""response_synth: compose the answer and stream it; the one node on the normal path that writes `answer` deltas.

Offline, the answer is extractive: sentences of the retrieved articles that share most words with the question,
each with its citation, then the numbered sources. A how-to question whose best passage is one step of a
procedure written as sections gets every step: the node reads that article's chunks, in order, from the
retriever. Forms get download links (and attachments), exports a CSV link, and anything unanswerable an honest
reply in the question's language with the way to a human.

With an LLM, answers from retrieved material are generated and streamed token by token (unified-agent-system
with the numbered sources; `reasoning` deltas on their own channel), and so are the follow-up translations and
rewrites followup_transform prepared. Only the sources the answer cites are kept, under the numbers it used,
and listed after it. Fixed replies (out of scope, the forms export, nothing relevant found: retrieval_checker's
`fallback`) stay offline: there is nothing for a model to add, and the model never answers what retrieval did
not find. When the model fails for good, before or after its first token, the answer is made (or finished) from
the passages after a one-line notice, flagged `degraded` (where degraded answers are allowed; elsewhere the error
ends the stream). Then the running conversation summary is planned with this node's params
(`rag.conversation_summary`): the offline one at once, and the model's (conversation-summarizer) after the terminal
event, once the conversation outgrows the history the model sees word for word (`summary_when`); a failed call keeps
the offline one, the answer is already out. Every call emits its usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import Any, Protocol, runtime_checkable

from rag.branding.texts import FixedOrganisation, OrganisationSource
from rag.conversation_summary import (
    EVERY_TURN,
    WINDOW_FULL,
    AnsweredTurn,
    ConversationSummarizer,
    SummaryPolicy,
)
from rag.deps import PipelineDeps, PromptProvider
from rag.engine import NodeType, ParamSpec
from rag.errors import Busy, PipelineAbort, UpstreamError, UpstreamTimeout
from rag.events import StreamWriter
from rag.nodes._streaming import stream_text
from rag.nodes.retrieval_checker import RELEVANT
from rag.prompting import calls
from rag.prompting.followup import REWRITE, SCRIPT, TARGET_NAMES, TRANSLATE, canonical_instruction, followup_mode
from rag.prompting.prompts import TRANSLATOR, UNIFIED_AGENT
from rag.prompting.sources import cited_sources, number_sources, sources_prompt
from rag.rules import answers, messages
from rag.rules.asked import titles_asking
from rag.rules.followup import ELABORATE, SHORTEN, SUMMARIZE
from rag.rules.planner_rules import CONVERSATION_FOLLOWUP, FORM_DOWNLOAD, FORM_EXPORT, OUT_OF_SCOPE
from rag.rules.transforms import previous_question, split_answer, transform_previous_answer
from rag.state import Attachment, PipelineState, RetrievedChunk, Usage
from rag.stats import AnswerStats
from rag.text.language import OTHER

logger = logging.getLogger(__name__)

NAME = "response_synth"
INPUTS = ("normalized_question", "language")
# Read when an upstream node wrote them, meaningful defaults otherwise (no retrieval on the direct path, no
# prepared answer outside follow-ups): optional inputs, so a workflow without retrieval still validates.
OPTIONAL_INPUTS = (
    "intent",
    "should_retrieve",
    "followup_instruction",
    "search_query",
    "queries",
    "retrieved",
    "retrieval_verdict",
    "answer",
    "summary",
    "previous_answer",
)
OUTPUTS = ("answer", "sources", "attachments", "new_summary", "summary_job", "degraded", "refused")
_ELABORATE_EXTRA_SENTENCES = 3
ANSWER = "answer"  # an LLM task besides followup's TRANSLATE and REWRITE: answering from retrieved chunks
# What an offline instruction asks, said to the model.
_INSTRUCTION_SENTENCES = {
    SUMMARIZE: "Summarise the previous answer.",
    SHORTEN: "Make the previous answer shorter.",
    ELABORATE: "Explain the previous answer in more detail.",
}
# Chunks of one article read to give a procedure whole: far more steps than a chat answer can show (the demo
# help centre's longest article has 8 chunks), and a bound on what one question reads.
MAX_DOCUMENT_CHUNKS = 50


@runtime_checkable
class DocumentReader(Protocol):
    """A retriever that also gives one document's chunks in order (`rag.retrieval.retriever.StoreRetriever`)."""

    async def document_chunks(self, doc_id: str, *, limit: int) -> list[RetrievedChunk]: ...


class ResponseSynth:
    name = NAME

    def __init__(
        self,
        *,
        stream_chunk_chars: int,
        forms_base_url: str,
        forms_export_url: str,
        max_sentences: int,
        min_sentences: int,
        contact_zh: str,
        contact_en: str,
        llm: Any = None,
        prompts: PromptProvider | None = None,
        max_sources: int = 5,
        source_chars: int = 1500,
        history_turns: int = 4,
        history_chars: int = 1500,
        llm_summary: bool = True,
        summary_when: str = WINDOW_FULL,
        summary_timeout: float = 10.0,
        summary_slot_wait: float = 30.0,
        degraded_answers: bool = True,
        stats: AnswerStats | None = None,
        documents: DocumentReader | None = None,
        document_timeout: float = 5.0,
        organisation: OrganisationSource | None = None,
    ) -> None:
        self._chunk_chars = stream_chunk_chars
        self._forms_base_url = forms_base_url
        self._forms_export_url = forms_export_url
        self._max_sentences = max_sentences
        self._min_sentences = min(min_sentences, max_sentences)
        # An empty contact (the default) means the organisation's own contact text (its branding).
        self._contact = {messages.ZH: contact_zh, messages.EN: contact_en}
        self._organisation = organisation or FixedOrganisation()
        self._llm = llm
        self._prompts = calls.prompt_provider(prompts)
        self._max_sources = max_sources
        self._source_chars = source_chars
        self._history_turns = history_turns
        self._history_chars = history_chars
        self._stats = stats or AnswerStats()
        self._summarizer = ConversationSummarizer(
            llm=llm,
            prompts=self._prompts,
            stats=self._stats,
            policy=SummaryPolicy(
                llm_summary=llm_summary,
                when=summary_when,
                timeout=summary_timeout,
                slot_wait=summary_slot_wait,
                history_turns=history_turns,
                history_chars=history_chars,
            ),
        )
        self._degraded = degraded_answers
        self._documents = documents
        self._document_timeout = document_timeout

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        task = self._llm_task(state) if self._llm is not None and not state.answer else None
        if task is not None:
            await self._generate(state, writer, task)
        else:
            if not state.answer:
                self._set(state, await self._compose(state))
            # Otherwise already written (a follow-up transform): only the streaming is left to do.
            await stream_text(writer, self.name, state.answer, chunk_chars=self._chunk_chars)
        # The offline summary at once; the model's is written after the terminal event (`summary_job`), so the
        # answer's stream never waits for it nor holds a second slot while it is written.
        # (the turn spelled out here rather than by AnsweredTurn.of, so the registry's check sees what is read)
        turn = AnsweredTurn(
            backend=state.backend,
            previous=state.summary,
            question=state.normalized_question,
            answer=state.answer,
            history=tuple(state.history),
            degraded=state.degraded,
        )
        planned = self._summarizer.plan(turn)
        state.new_summary, state.summary_job = planned.offline, planned.job
        return None

    @staticmethod
    def _set(state: PipelineState, composed: answers.ComposedAnswer) -> None:
        state.answer = composed.text
        state.sources = composed.sources
        state.attachments = composed.attachments

    # ------------------------------------------------------------------ LLM answers

    @staticmethod
    def _llm_task(state: PipelineState) -> str | None:
        """What the model is asked to write here, or None for an offline reply."""
        if state.intent == CONVERSATION_FOLLOWUP and not state.should_retrieve:
            if not state.previous_answer.strip():
                return None
            kind = followup_mode(state.followup_instruction, state.previous_answer).kind
            return None if kind == SCRIPT else kind
        if state.intent in (OUT_OF_SCOPE, FORM_EXPORT) or not state.should_retrieve:
            return None
        # The model never answers what retrieval did not find: with nothing relevant (retrieval_checker's
        # fallback) the offline refusal, with the way to a human, is the answer on every backend, as offline.
        return ANSWER if _relevant(state) else None

    async def _generate(self, state: PipelineState, writer: StreamWriter, task: str) -> None:
        try:
            if task == TRANSLATE:
                request = await self._translation_request(state)
            else:
                request = await self._answer_request(state, task)
        except calls.PromptUnavailable as exc:
            calls.log_fallback(NAME, exc)
            await writer.emit(
                self.name,
                "status",
                "generate",
                task=task,
                answer_source="rules_fallback",
                fallback_reason=calls.fallback_reason(exc),
            )
            await self._offline_answer(state, writer, task)
            return
        prompt_messages, numbered, options = request
        await writer.emit(self.name, "status", "generate", task=task, answer_source="llm", sources=len(numbered or ()))
        streamed: list[str] = []
        try:
            body = await self._stream(state, writer, prompt_messages, options, streamed)
        except (UpstreamError, UpstreamTimeout, Busy) as exc:
            # Failed for good (the call policy's retries are spent, or the stream broke off mid-answer, which is
            # never retried). Passages in hand: the answer is made (or finished) from them rather than with an error.
            if not (self._degraded and state.degraded_allowed and task == ANSWER and state.retrieved):
                raise
            await self._degraded_answer(state, writer, exc, "".join(streamed))
            return
        if not body.strip():
            # The model said nothing (a max_tokens of reasoning, say): the offline answer rather than silence.
            await writer.emit(self.name, "status", "generate", answer_source="rules_fallback", fallback_reason="empty")
            await self._offline_answer(state, writer, task)
            return
        if numbered is None:  # a translation: the previous answer's sources, listed in the target language
            sources = state.sources or split_answer(state.previous_answer)[1]
            attachments: list[Attachment] = []
            language = followup_mode(state.followup_instruction, state.previous_answer).target_language
        else:
            sources, attachments = cited_sources(body, numbered)
            language = state.language
        block = f"\n\n{answers.sources_block(sources, language)}" if sources else ""
        if block:
            await stream_text(writer, self.name, block, chunk_chars=self._chunk_chars)
        state.answer = body + block
        state.sources = sources
        state.attachments = attachments

    async def _translation_request(self, state: PipelineState) -> tuple[list[dict[str, str]], None, dict[str, Any]]:
        target = followup_mode(state.followup_instruction, state.previous_answer).target_language
        snapshot = await calls.load_prompt(self._prompts, TRANSLATOR)
        system = calls.render(snapshot, TRANSLATOR, target_language=TARGET_NAMES[target])
        body, _ = split_answer(state.previous_answer)
        prompt_messages = [{"role": "system", "content": system}, {"role": "user", "content": body}]
        return prompt_messages, None, calls.call_options(self._llm, snapshot, node=NAME)

    async def _answer_request(
        self, state: PipelineState, task: str
    ) -> tuple[list[dict[str, str]], Any, dict[str, Any]]:
        chunks = await self._with_steps(state) if task == ANSWER else state.retrieved
        numbered = number_sources(
            # a question about a row of a table: the model reads that row under its header, as offline
            answers.rows_in_focus(state.normalized_question, chunks) if task == ANSWER else chunks,
            forms_base_url=self._forms_base_url,
            max_sources=self._max_sources,
            max_chars=self._source_chars,
        )
        snapshot = await calls.load_prompt(self._prompts, UNIFIED_AGENT)
        system = calls.render(
            snapshot, UNIFIED_AGENT, language=state.language, sources=sources_prompt(numbered), summary=state.summary
        )
        prompt_messages = [
            {"role": "system", "content": system},
            *calls.history_messages(state.history, turns=self._history_turns, max_chars=self._history_chars),
            {"role": "user", "content": _user_message(state, task)},
        ]
        return prompt_messages, numbered, calls.call_options(self._llm, snapshot, node=NAME)

    async def _degraded_answer(
        self, state: PipelineState, writer: StreamWriter, exc: PipelineAbort, streamed: str = ""
    ) -> None:
        """The extractive answer from the retrieved passages, after a one-line notice that says what it is.

        When the model failed mid-answer (``streamed``: what the reader already has), the same notice and passages
        follow what was streamed, so the answer is finished, flagged `degraded`, rather than ended by an error; the
        cut-off text stays as it was read, the notice says that what follows is the articles' own words."""
        logger.warning(
            "answer LLM failed (%s)%s: answering from the passages", exc.code, " mid-answer" if streamed else ""
        )
        if streamed:
            await writer.emit(
                self.name,
                "status",
                "generate",
                answer_source="degraded",
                fallback_reason=exc.code,
                degraded=True,
                mid_answer=True,
            )
        else:
            await writer.emit(
                self.name, "status", "generate", answer_source="degraded", fallback_reason=exc.code, degraded=True
            )
        composed = await self._compose(state)
        notice = messages.text("degraded", state.language)
        text = f"{notice}\n\n{composed.text}"
        if streamed:
            text = f"\n\n{text}"
        self._set(state, answers.ComposedAnswer(text, composed.sources, composed.attachments))
        state.degraded = True
        self._stats.degraded()
        await stream_text(writer, self.name, state.answer, chunk_chars=self._chunk_chars)
        state.answer = streamed + state.answer

    async def _stream(
        self,
        state: PipelineState,
        writer: StreamWriter,
        prompt_messages: list[dict[str, str]],
        options: dict[str, Any],
        parts: list[str],
    ) -> str:
        """Stream the model's answer and reasoning as they come into `parts`; the answer text. Leaving early
        (cancellation, an upstream failure) closes the upstream stream and frees the slot at once."""
        usage: Usage | None = None
        stream = self._llm.stream_answer(backend=state.backend, node=NAME, messages=prompt_messages, **options)
        async with contextlib.aclosing(stream) as deltas:
            async for delta in deltas:
                if delta.kind == "answer" and delta.text:
                    parts.append(delta.text)
                    await writer.answer(self.name, delta.text)
                elif delta.kind == "reasoning" and delta.text:
                    await writer.reasoning(self.name, delta.text)
                elif delta.kind == "usage" and delta.usage is not None:
                    usage = delta.usage
        await calls.record_usage(state, writer, self.name, usage, call="answer")
        return "".join(parts)

    async def _offline_answer(self, state: PipelineState, writer: StreamWriter, task: str) -> None:
        if task in (TRANSLATE, REWRITE):
            result = await transform_previous_answer(
                state.previous_answer,
                canonical_instruction(state.followup_instruction),
                language=state.language,
                summary_chars=200,
                shorten_chars=400,
                previous_question=previous_question(state.history),
            )
            self._set(state, answers.ComposedAnswer(result.text, result.sources))
        else:
            self._set(state, await self._compose(state))
        await stream_text(writer, self.name, state.answer, chunk_chars=self._chunk_chars)

    async def _document(self, doc_id: str) -> list[RetrievedChunk]:
        """The article's chunks in order; [] when there is no reader or it fails (the answer then uses the chunks
        retrieved)."""
        if self._documents is None or not doc_id:
            return []
        try:
            return await asyncio.wait_for(
                self._documents.document_chunks(doc_id, limit=MAX_DOCUMENT_CHUNKS), self._document_timeout
            )
        except TimeoutError:
            logger.warning("reading a document's chunks timed out after %.1f s", self._document_timeout)
        except Exception:
            logger.exception("reading a document's chunks failed; answering from the retrieved ones")
        return []

    async def _with_steps(self, state: PipelineState) -> list[RetrievedChunk]:
        """The retrieved chunks, with a procedure written as step sections read whole from its article (in the
        place of its first chunk, each step under its heading) when the best passage is one of its steps."""
        retrieved = state.retrieved
        doc_id = answers.steps_to_fetch(state.normalized_question, retrieved, language=state.language)
        document = await self._document(doc_id)
        if not document:
            return retrieved
        first = next((i for i, chunk in enumerate(retrieved) if chunk.doc_id == doc_id), 0)
        others = [chunk for chunk in retrieved if chunk.doc_id != doc_id]
        return [*others[:first], *(answers.with_heading(chunk) for chunk in document), *others[first:]]

    async def _compose(self, state: PipelineState) -> answers.ComposedAnswer:
        question = state.normalized_question
        language = state.language
        words = (await self._organisation.get()).texts(language)
        contact = self._contact[messages.reply_language(language)] or words.contact
        if state.intent == OUT_OF_SCOPE or not state.should_retrieve:
            return answers.out_of_scope_answer(language, words.out_of_scope)
        relevant = _relevant(state)
        chunks = state.retrieved if relevant else []
        if state.intent == FORM_EXPORT:
            # Without a match the export still works: it lists every form.
            return answers.export_answer(question, chunks, language=language, export_url=self._forms_export_url)
        if state.intent == FORM_DOWNLOAD:
            return answers.forms_answer(
                question, chunks, language=language, forms_base_url=self._forms_base_url, contact=contact
            )
        if relevant:
            extra = _ELABORATE_EXTRA_SENTENCES if state.followup_instruction == ELABORATE else 0
            # Sentences are picked by the question's words and the search's: "tell me more" and "那要多久？"
            # carry their topic only in the query built from the conversation.
            # A follow-up's context ("How long do I have to confirm?" after the waiting list) is in the pass's
            # other queries when the question itself was searched first.
            searched = [q for q in dict.fromkeys([state.search_query, *state.queries]) if q and q != question]
            wanted = " ".join([question, *searched])
            asking = titles_asking(wanted)  # read once for both
            document = await self._document(answers.steps_to_fetch(wanted, chunks, language=language, asking=asking))
            composed = answers.extractive_answer(
                wanted,
                chunks,
                language=language,
                max_sentences=self._max_sentences + extra,
                min_sentences=self._min_sentences,
                document=document,
                asking=asking,
            )
            if composed is not None:
                return composed
        state.refused = True  # recorded as a refusal: the content team sees what it could not answer
        return answers.no_answer(question, state.retrieved, language=language, contact=contact)


def _relevant(state: PipelineState) -> bool:
    """Whether retrieval found something to answer from: the checker said so, or (a workflow without a checker)
    something was retrieved."""
    return state.retrieval_verdict == RELEVANT or (not state.retrieval_verdict and bool(state.retrieved))


def _user_message(state: PipelineState, task: str) -> str:
    # A question in another language was translated for the search; the model reads the original and answers
    # in its language.
    question = state.question.strip() if state.language == OTHER else state.normalized_question
    if task != REWRITE:
        return question
    instruction = _INSTRUCTION_SENTENCES.get(state.followup_instruction, state.followup_instruction)
    if not instruction or instruction == question:
        return question
    return f"{question}\n\n({instruction})"


def _build(deps: PipelineDeps, params: dict[str, Any]) -> ResponseSynth:
    config = deps.config
    return ResponseSynth(
        stream_chunk_chars=config.stream_chunk_chars,
        forms_base_url=config.forms_base_url,
        forms_export_url=config.forms_export_url,
        max_sentences=params["max_sentences"],
        min_sentences=params["min_sentences"],
        contact_zh=params["contact_zh"],
        contact_en=params["contact_en"],
        llm=deps.llm,
        prompts=deps.prompts,
        max_sources=params["max_sources"],
        llm_summary=params["llm_summary"],
        summary_when=params["summary_when"],
        summary_timeout=params["summary_timeout"],
        summary_slot_wait=params["summary_slot_wait"],
        degraded_answers=config.degraded_answers,
        stats=deps.answer_stats,
        documents=deps.retriever if isinstance(deps.retriever, DocumentReader) else None,
        document_timeout=config.retrieval_timeout,
        organisation=deps.organisation,
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Writes the answer with citations and sources (form links, CSV export) and streams it; with an LLM, "
        "generates it token by token from the numbered sources and updates the conversation summary.",
        "zh-hant": "撰寫附引用與資料來源的回答（含表單下載連結、CSV 匯出）並以串流送出；設定語言模型時，"
        "依編號資料來源逐字產生回答，並更新對話摘要。",
    },
    inputs=INPUTS,
    optional_inputs=OPTIONAL_INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    params={
        "max_sentences": ParamSpec("int", 5, "Most sentences in an extractive answer", minimum=1, maximum=12),
        "min_sentences": ParamSpec("int", 2, "Fewest sentences in an extractive answer", minimum=1, maximum=12),
        "contact_zh": ParamSpec("str", "", "How to reach a person (Chinese replies)"),
        "contact_en": ParamSpec("str", "", "How to reach a person (English replies)"),
        "max_sources": ParamSpec(
            "int", 5, "With an LLM: most documents given to the model as numbered sources", minimum=1, maximum=20
        ),
        "llm_summary": ParamSpec("bool", True, "With an LLM: write the running conversation summary with it"),
        "summary_when": ParamSpec(
            "str",
            WINDOW_FULL,
            "With an LLM: write the model's summary once a turn leaves the history the model sees word for word "
            "(window_full, one call fewer per short conversation), or after every turn (every_turn)",
            choices=(WINDOW_FULL, EVERY_TURN),
        ),
        "summary_timeout": ParamSpec(
            "float",
            10.0,
            "Seconds the summary call may take, once it holds a slot, before the offline summary is kept",
            minimum=0.1,
        ),
        "summary_slot_wait": ParamSpec(
            "float",
            30.0,
            "Seconds the summary call may wait for a slot (behind every answer) before it is skipped",
            minimum=0.0,
            maximum=45.0,
        ),
    },
)
