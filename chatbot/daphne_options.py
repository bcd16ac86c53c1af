"""WebSocket protocol errors end with a close frame that says why, not a dropped connection.

daphne refuses a message past `--websocket-max-message-size` (1 MiB by default) and a text frame that is not
UTF-8 through autobahn, which by default "fails by drop": it resets the TCP connection without a close frame, so a
client cannot tell "too big" or "not UTF-8" from a network failure (and may simply retry). daphne offers no option
for it; its factory is made when the server starts, after the application is imported, so switching autobahn's
`failByDrop` off here, where the application is assembled, gives every connection the close frame RFC 6455 names:
1009 (message too big) or 1007 (invalid payload), with autobahn's reason.
"""

from __future__ import annotations

from typing import Any

from daphne.ws_protocol import WebSocketFactory

_MARK = "_helpcentre_close_frames"


def websocket_close_frames_on_protocol_errors() -> None:
    """Idempotent: every WebSocket factory made after this call closes with a code instead of dropping TCP."""
    reset = WebSocketFactory.resetProtocolOptions
    if getattr(reset, _MARK, False):
        return

    def reset_with_close_frames(self: Any) -> None:
        reset(self)
        self.failByDrop = False

    setattr(reset_with_close_frames, _MARK, True)
    WebSocketFactory.resetProtocolOptions = reset_with_close_frames
