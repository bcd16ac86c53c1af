"""Every status daphne sends carries its reason phrase."""

from __future__ import annotations

import daphne.server  # noqa: F401  (loads Twisted's web server, as running under daphne does)
from twisted.web import http

from chatbot.http_reasons import reason_phrases_install


def test_statuses_twisted_does_not_know_get_their_phrases_and_known_ones_stay() -> None:
    ok = http.RESPONSES[200]
    reason_phrases_install()

    assert http.RESPONSES[429] == b"Too Many Requests"
    assert http.RESPONSES[422] == b"Unprocessable Content" or http.RESPONSES[422] == b"Unprocessable Entity"
    assert http.RESPONSES[499] == b"Client Closed Request"
    assert http.RESPONSES[200] == ok
    assert reason_phrases_install() == 0, "a second install finds nothing missing"
