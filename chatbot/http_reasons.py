"""Reason phrases for every HTTP status this server sends, under daphne.

daphne hands the status to Twisted (`Request.setResponseCode(status)`), whose phrase table stops at the statuses
of its time: a 429 went out as `HTTP/1.1 429 Unknown Status`, and so would 422, 425 or our 499 (client closed).
Clients and proxies read the code, but people read logs and curl output. The table is completed once, from the
standard library's `http.HTTPStatus` (and 499, nginx's "Client Closed Request", which the API uses for a
cancelled answer); phrases Twisted has already are kept.
"""

from __future__ import annotations

import sys
from http import HTTPStatus

EXTRA_PHRASES = {499: b"Client Closed Request"}


def reason_phrases_install() -> int:
    """Add the missing phrases to Twisted's table when daphne (and so Twisted's web server) is loaded; the number
    added (0 when not under daphne)."""
    http = sys.modules.get("twisted.web.http")  # imported by daphne's server; never imported here otherwise
    if http is None:
        return 0
    phrases = {status.value: status.phrase.encode("ascii") for status in HTTPStatus} | EXTRA_PHRASES
    missing = {code: phrase for code, phrase in phrases.items() if code not in http.RESPONSES}
    http.RESPONSES.update(missing)
    return len(missing)
