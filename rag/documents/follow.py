"""What the reindex and backfill commands share: deciding who runs the job, running it here, following it.

Qdrant local mode lets one process open the store. A command that can open it runs its job in-process (on a
thread, while the main thread follows the row). When another process holds it, the job is left to that
process's job runner, and the command follows the row: a text progress bar, then the outcome. Ctrl-C asks the
job to cancel and waits for it to stop (a second Ctrl-C stops waiting).
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TextIO
from urllib.parse import urljoin

import httpx
from django.conf import settings
from django.core.management.base import CommandError
from django.db import OperationalError, connections
from django.utils import timezone

from rag.documents.models import Job, JobRunnerHeartbeat, JobStatus
from rag.documents.services import (
    ABANDONED_AFTER,
    RUNNER_ALIVE_WITHIN,
    job_cancel,
    job_claim,
    job_heartbeat,
    jobs_abandoned_fail,
)

SERVICE_NAME = "helpcentre-chatbot"
PROBE_TIMEOUT = 2.0
# after a server answers, its job runner starts (on that request) and beats within this long
RUNNER_START_WAIT = 6.0
# a queued job nobody claims for this long, while no runner is alive, is cancelled rather than waited on forever
CLAIM_TIMEOUT = 15.0
_BAR_WIDTH = 28
_DRAW_INTERVAL = 0.25


def server_answers(base_url: str) -> bool:
    """Whether our own server (not just anything) listens at `base_url`. The request also starts its job
    runner, which a server without a start-up hook does on its first connection."""
    try:
        response = httpx.get(urljoin(base_url.rstrip("/") + "/", "api/v1/health"), timeout=PROBE_TIMEOUT)
        return response.status_code == 200 and response.json().get("service") == SERVICE_NAME
    except (httpx.HTTPError, ValueError, AttributeError):
        return False


def runner_alive(*, exclude: str = "") -> bool:
    recent = JobRunnerHeartbeat.objects.filter(seen_at__gte=timezone.now() - RUNNER_ALIVE_WITHIN)
    if exclude:
        recent = recent.exclude(runner=exclude)
    return recent.exists()


def server_runner_available(*, probe: bool = True) -> bool:
    """A job runner in another process is alive, or a server answers and its runner comes up shortly."""
    if runner_alive():
        return True
    if not probe or not server_answers(settings.ASK_SERVER_URL):
        return False
    deadline = time.monotonic() + RUNNER_START_WAIT
    while time.monotonic() < deadline:
        if runner_alive():
            return True
        time.sleep(0.2)
    return False


def progress_line(job: Job, *, label: str) -> str:
    total = max(job.progress_total, 0)
    done = min(job.progress_done, total) if total else job.progress_done
    filled = round(_BAR_WIDTH * done / total) if total else 0
    bar = "#" * filled + "." * (_BAR_WIDTH - filled)
    percent = f"{round(100 * done / total):3d}%" if total else "   -"
    stage = job.stage or job.status
    return f"{label} [{bar}] {done}/{total} {percent} {stage}"


class InProcess:
    """A job this command runs itself: a thread running `body(stop)` once the job is claimed."""

    def __init__(self, job: Job, *, runner: str, store_owner: bool, body: Callable[[threading.Event], Any]) -> None:
        self.job = job
        self.runner = runner
        self.store_owner = store_owner
        self.body = body
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._main, name=f"rag-job-{job.pk}", daemon=True)

    def start(self) -> InProcess:
        self.thread.start()
        return self

    def _main(self) -> None:
        try:
            # another process may be running a job on a shared (server) store: wait for our turn
            while not job_claim(job=self.job, runner=self.runner, store_owner=self.store_owner):
                self.job.refresh_from_db()
                if self.job.status != JobStatus.PENDING or self.stop.wait(0.5):
                    return
            self.body(self.stop)
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()

    def join(self) -> None:
        self.thread.join()
        if self.error is not None:
            raise self.error


def job_follow(
    job: Job,
    *,
    out: TextIO,
    label: str,
    local: InProcess | None = None,
    interval: float = _DRAW_INTERVAL,
    beat_interval: float = 5.0,
) -> Job:
    """Poll the job row until it finishes, drawing a progress bar; returns the finished row.

    Ctrl-C requests a cancel and keeps following until the job stops; a second Ctrl-C raises CommandError.
    Without `local`, a job that nobody claims (no runner alive) or whose runner stops beating is given up.
    """
    started = time.monotonic()
    cancelling = False
    width = max(40, min(shutil.get_terminal_size((100, 20)).columns - 1, 120))
    last_beat = 0.0
    drawn = ""
    while True:
        try:
            job.refresh_from_db()
            line = progress_line(job, label=label)
            if line != drawn:
                out.write("\r" + line[:width].ljust(min(width, max(len(drawn), len(line)))))
                out.flush()
                drawn = line
            if job.finished:
                out.write("\n")
                return job
            now = time.monotonic()
            if local is not None:
                if now - last_beat >= beat_interval:
                    # the job's thread may sit in one long step (a big file, an LLM call): beat for it
                    job_heartbeat(job=job)
                    last_beat = now
                if not local.thread.is_alive() and not job.finished:
                    job.refresh_from_db()
                    if not job.finished:
                        raise CommandError(f"{label} stopped without finishing ({local.error or 'no error'})")
            else:
                _check_remote(job, started=started, label=label)
            time.sleep(interval)
        except OperationalError as exc:
            # a busy database (SQLite's single writer) is no reason to stop following
            if "locked" not in str(exc):
                raise
            time.sleep(interval)
        except KeyboardInterrupt:
            if cancelling:
                raise CommandError(
                    f"stopped following {label}; it is being cancelled (see the admin or the API)", returncode=130
                ) from None
            cancelling = True
            if local is not None:
                local.stop.set()
            job_cancel(job=job)
            out.write(f"\nCancelling {label}… (Ctrl-C again to stop waiting)\n")
            drawn = ""


def _check_remote(job: Job, *, started: float, label: str) -> None:
    if job.status == JobStatus.PENDING:
        if time.monotonic() - started > CLAIM_TIMEOUT and not runner_alive():
            job_cancel(job=job)
            raise CommandError(
                f"{label} was not picked up: no process runs jobs (the server holding the vector store runs "
                "them when it has the job runner, see rag.documents.runner). The job was cancelled."
            )
    elif (
        job.status == JobStatus.RUNNING
        and job.heartbeat_at is not None
        and timezone.now() - job.heartbeat_at > ABANDONED_AFTER + timedelta(seconds=5)
    ):
        jobs_abandoned_fail()


def describe_outcome(job: Job, *, label: str) -> str:
    if job.status == JobStatus.CANCELLED:
        return f"{label} was cancelled: {job.error or 'on request'}"
    return f"{label} failed: {job.error or 'see its log'}"
