"""The Langfuse writer in a child process, fed through a bounded queue (telemetry's `Exporter`).

Why a process: building spans and the SDK's own export (media scan, protobuf encoding) cost about 4 ms of CPU per
sampled request (docs/benchmarks/telemetry.md). On a thread of the server process that CPU competes with the
event loop for the GIL, and each time the loop gives the GIL up (every `select`) it may wait up to the
interpreter's switch interval to get it back: at a sample rate of 1.0 the loop's p99 lag grew several-fold. In a
child process none of that touches the loop. What stays here: a `put_nowait` on the request path, and a feeder
thread (the project's `WriterThread`) that pickles each record onto the child's stdin (tens of microseconds per
request).

The child is a fresh interpreter (`python -m rag.telemetry.process_export`), not a fork: it inherits none of the
server's threads, locks or sockets, and unlike multiprocessing's "spawn" it does not re-import the server's main
module. It reports "ready" once the SDK is built (a bad configuration fails at start-up, here), answers flush and
stop commands in order with everything submitted before them, and exports what it has and exits when its stdin
closes (the server went away). Only the SDK's settings cross over; the child never reads Django settings.
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import queue
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from infra.writer_thread import WriterThread
from rag.telemetry.record import FinishedTrace, ScoreJob, ScoreRecord

logger = logging.getLogger(__name__)

_PROJECT_ROOT = Path(__file__).resolve().parents[2]
# The child reports its counters at most this often while it works (and with every reply).
_COUNTS_INTERVAL = 0.5


@dataclass(frozen=True, slots=True)
class _Control:
    command: str  # "flush" | "stop"
    token: int


class LangfuseProcessExporter:
    def __init__(self, *, queue_size: int = 1000, start_timeout: float = 60.0, **writer_options: Any) -> None:
        self.public_key = str(writer_options.get("public_key", ""))
        self.queue_size = queue_size
        self._counts = {"exported_traces": 0, "rebuilt_traces": 0, "scores_sent": 0, "errors": 0}
        # Unbounded on purpose: the child answers one reply per command and counts at most every half second.
        self._replies: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._tokens = 0
        env = {
            **os.environ,
            "PYTHONPATH": os.pathsep.join(filter(None, [str(_PROJECT_ROOT), os.environ.get("PYTHONPATH")])),
        }
        self._child = subprocess.Popen(
            [sys.executable, "-m", "rag.telemetry.process_export"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=_PROJECT_ROOT,
            env=env,
        )
        assert self._child.stdin is not None and self._child.stdout is not None
        pickle.dump(writer_options, self._child.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self._child.stdin.flush()
        self._reader = threading.Thread(
            target=self._read, args=(self._child.stdout,), name="telemetry-export-replies", daemon=True
        )
        self._reader.start()
        try:
            kind, detail = self._replies.get(timeout=start_timeout)
        except queue.Empty:
            self._child.kill()
            raise RuntimeError(f"the telemetry exporter process did not start within {start_timeout:.0f} s") from None
        if kind != "ready":
            self._child.wait(5)
            raise ValueError(detail)
        pipe = self._child.stdin
        self._feeder: WriterThread[Any] = WriterThread(
            lambda item: self._feed(pipe, item),
            name="telemetry-export-feeder",
            queue_size=queue_size,
            # the child went away: telemetry is off from now on (later submits drop and count)
            fatal=(BrokenPipeError, OSError, ValueError),
            on_exit=lambda: self._close_pipe(pipe),
        )

    # --- request side (never blocks) ---------------------------------------------------------------------------
    def submit_trace(self, trace: FinishedTrace) -> bool:
        return self._submit(trace)

    def submit_score(self, score: ScoreRecord, *, trace: FinishedTrace | None) -> bool:
        return self._submit(ScoreJob(score, trace))

    def _submit(self, item: object) -> bool:
        return self._feeder.submit(item)

    @property
    def dropped(self) -> int:
        return self._feeder.dropped

    def stats(self) -> dict[str, int]:
        return {"pending": self._feeder.pending, "queue_size": self.queue_size, "dropped": self.dropped, **self._counts}

    # --- threads of this process -------------------------------------------------------------------------------
    def _feed(self, pipe: IO[bytes], item: object) -> None:
        """Pickle one queued item onto the child's stdin. A write blocks (GIL released) while the child is busy;
        the bounded queue in front of it is what the request path sees."""
        pickle.dump(item, pipe, protocol=pickle.HIGHEST_PROTOCOL)
        if self._feeder.pending == 0 or isinstance(item, _Control):
            pipe.flush()

    @staticmethod
    def _close_pipe(pipe: IO[bytes]) -> None:
        with contextlib.suppress(OSError, ValueError):
            pipe.close()  # EOF: the child exports what it has and exits

    def _read(self, pipe: BinaryIO) -> None:
        try:
            while True:
                kind, detail = pickle.load(pipe)
                if kind == "counts":
                    self._counts = detail
                else:
                    self._replies.put((kind, detail))
        except (EOFError, OSError, pickle.UnpicklingError):
            return

    # --- lifecycle (blocking: call off the event loop) ---------------------------------------------------------
    def _command(self, command: str, timeout: float) -> bool:
        """Queue a command behind everything submitted so far and wait for the child to carry it out."""
        if self._child.poll() is not None:
            return False
        self._tokens += 1
        token = self._tokens
        deadline = time.monotonic() + timeout
        if not self._feeder.put(_Control(command, token), timeout=max(timeout, 0.1)):
            return False
        while (remaining := deadline - time.monotonic()) > 0:
            try:
                kind, detail = self._replies.get(timeout=remaining)
            except queue.Empty:
                return False
            if kind == command and detail == token:
                return True
        return False

    def flush(self, timeout: float = 10.0) -> bool:
        """Everything submitted so far exported (spans) and sent (scores); False if `timeout` ran out."""
        return self._command("flush", timeout)

    def shutdown(self, timeout: float = 10.0) -> None:
        if self._feeder.closed and self._child.poll() is not None:
            return
        stopped = self._command("stop", timeout)
        self._feeder.close(2.0, drain=False)  # the stop command drained it; this ends the thread and closes stdin
        try:
            self._child.wait(timeout if stopped else 1.0)
        except subprocess.TimeoutExpired:
            logger.warning("telemetry exporter process did not stop within %.1f s; killing it", timeout)
            self._child.kill()
            self._child.wait(5)
        self._reader.join(2)

    @property
    def alive(self) -> bool:
        return self._child.poll() is None


# --- the child ---------------------------------------------------------------------------------------------------


def _child_main() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the server decides when its exporter stops.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    logging.basicConfig(level=logging.WARNING, format="telemetry-export %(levelname)s %(name)s: %(message)s")
    source, sink = sys.stdin.buffer, sys.stdout.buffer

    def reply(kind: str, detail: Any) -> None:
        pickle.dump((kind, detail), sink, protocol=pickle.HIGHEST_PROTOCOL)
        sink.flush()

    options = pickle.load(source)
    try:
        # Imported here: the langfuse SDK (~400 ms with OpenTelemetry) belongs in this child, not the server.
        from rag.telemetry.langfuse_export import LangfuseWriter

        writer = LangfuseWriter(**options)
    except Exception as exc:
        reply("error", f"{type(exc).__name__}: {exc}")
        return
    reply("ready", None)
    errors = 0
    reported = time.monotonic()

    def counts() -> dict[str, int]:
        return {
            "exported_traces": writer.exported_traces,
            "rebuilt_traces": writer.rebuilt_traces,
            "scores_sent": writer.scores_sent,
            "errors": errors,
        }

    while True:
        try:
            item = pickle.load(source)
        except (EOFError, OSError):
            break  # the server went away (or stopped feeding): export what we have and leave
        if isinstance(item, _Control):
            if item.command == "flush":
                _quietly(writer.flush)
            else:
                _quietly(writer.shutdown)
            reply("counts", counts())
            reply(item.command, item.token)
            if item.command == "stop":
                return
            continue
        try:
            writer.handle(item)
        except Exception:
            errors += 1
            logging.getLogger(__name__).exception("telemetry export failed")
        if time.monotonic() - reported >= _COUNTS_INTERVAL:
            reported = time.monotonic()
            reply("counts", counts())
    _quietly(writer.shutdown)


def _quietly(action: Any) -> None:
    try:
        action()
    except Exception:
        logging.getLogger(__name__).exception("telemetry exporter: %s failed", getattr(action, "__name__", action))


if __name__ == "__main__":
    # Run the imported module's function, not this `__main__` copy's: the items arriving are pickled instances of
    # `rag.telemetry.process_export._Control`, which `isinstance` against a `__main__._Control` would not match.
    from rag.telemetry.process_export import _child_main as main

    main()
