"""The assistant answers end to end through the real servers, configured with the documented variables only."""

from __future__ import annotations

from tests.daphne_workers import Worker
from tests.stream_clients import sse_ask


def test_a_help_question_streams_a_whole_answer_with_sources_from_the_real_servers(real_worker: Worker) -> None:
    answer = sse_ask(real_worker.url, "How do I reset my password?", read_seconds=300)
    assert answer.status == 200 and answer.whole(), answer.describe()
    summary = answer.terminal
    assert summary is not None and summary["channel"] == "meta_summary", answer.describe()
    text = "".join(e.get("delta", "") for e in answer.events if e.get("channel") == "answer")
    assert text.strip()
    assert summary["sources"], "retrieval through the real embedder found no source for a question the demo answers"
