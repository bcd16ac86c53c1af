"""The assistant answers end to end through the real servers, configured with the documented variables only."""

from __future__ import annotations

from tests.daphne_workers import Worker
from tests.stream_clients import sse_ask


def test_a_help_question_streams_a_whole_answer_from_passages_the_real_embedder_found(real_worker: Worker) -> None:
    answer = sse_ask(real_worker.url, "How do I reset my password?", read_seconds=300)
    assert answer.status == 200 and answer.whole(), answer.describe()
    summary = answer.terminal
    assert summary is not None and summary["channel"] == "meta_summary", answer.describe()
    text = "".join(e.get("delta", "") for e in answer.events if e.get("channel") == "answer")
    assert text.strip()
    # Retrieval through the real embedder found passages, judged relevant, and the model was given them as its
    # numbered sources. Which of them the answer cites is the model's wording (the summary keeps only the cited
    # ones), so it is not asserted.
    [tool] = [e for e in answer.events if e.get("stage") == "tool"]
    assert tool["hits"] >= 1 and not tool["fallback"], tool
    [checked] = [e for e in answer.events if e.get("node") == "retrieval_checker" and e.get("stage") == "end"]
    assert checked["route"] == "relevant", checked
    [generate] = [e for e in answer.events if e.get("stage") == "generate" and e.get("task") == "answer"]
    assert generate["answer_source"] == "llm" and generate["sources"] >= 1, generate
    assert isinstance(summary["sources"], list)
