"""Who this worker is: ``hostname:pid``, and when it first asked. Shared by the stats, the change feed's logs and
every per-worker key in Redis."""

from __future__ import annotations

import os
import socket
from datetime import UTC, datetime

__all__ = ["worker_id", "worker_started_at"]

_started: tuple[int, str] | None = None


def worker_id(pid: int | None = None) -> str:
    """``hostname:pid``: unique per process on a host, readable in the console. This process's, or that of the
    process ``pid`` on this host."""
    return f"{socket.gethostname()}:{os.getpid() if pid is None else pid}"


def worker_started_at() -> str:
    """When this process first asked (ISO 8601, UTC); reset in a forked child."""
    global _started
    pid = os.getpid()
    if _started is None or _started[0] != pid:
        _started = (pid, datetime.now(UTC).isoformat(timespec="seconds"))
    return _started[1]
