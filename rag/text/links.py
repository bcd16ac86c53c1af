"""Links to where a document lives: http(s) only, wherever they are stored, shown or sent.

A `url: javascript:alert(1)` in front matter, a `data:` URL in a stored payload or a link with a control
character in it would reach the chat, `/v1` citations and the admin as a link. `http_link` is the one check:
the URL as given when it is an absolute http(s) URL with a host and no whitespace or control characters,
otherwise "".
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

_UNSAFE_RE = re.compile(r"[\x00-\x20\x7f]")
MAX_LINK_CHARS = 1000


def http_link(url: object) -> str:
    text = str(url or "").strip()
    if not text or len(text) > MAX_LINK_CHARS or _UNSAFE_RE.search(text):
        return ""
    try:
        parts = urlsplit(text)
    except ValueError:
        return ""
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return ""
    return text
