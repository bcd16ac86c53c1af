"""What the reindex and backfill commands share: deciding who runs the job, running it here, following it.

Qdrant local mode lets one process open the store. A command that can open it runs its job in-process (on a
thread with an event loop of its own, while the main thread follows the row). When another process holds it, the
job is left to that process's job runner, and the command follows the row: a text progress bar, then the
outcome. Ctrl-C asks the job to cancel and waits for it to stop (a second Ctrl-C stops waiting).
`job_command_run` is that whole flow; a command gives it how to create its job and how to run it here.

A job run here gets the process's concurrency manager (the deployment's limits) on its loop, set up there by the
command's `on_loop` (`rag.wiring.configure_concurrency_manager`), and its network calls (LLM, embeddings) are
made there; the loop's HTTP clients are closed when the job ends.
"""

from __future__ import annotations

import asyncio
import shutil
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TextIO, TypeVar

from django.core.management.base import CommandError, OutputWrapper
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
    runner_name,
)
from rag.retrieval.store import StoreLockedError, VectorStore, open_store_from_settings
from rag.server_address import server_address, server_answers

# after a server answers, its job runner starts (on that request) and beats within this long
RUNNER_START_WAIT = 6.0
# a queued job nobody claims for this long, while no runner is alive, is cancelled rather than waited on forever
CLAIM_TIMEOUT = 15.0
_BAR_WIDTH = 28
_DRAW_INTERVAL = 0.25


def runner_alive(*, exclude: str = "") -> bool:
    recent = JobRunnerHeartbeat.objects.filter(seen_at__gte=timezone.now() - RUNNER_ALIVE_WITHIN)
    if exclude:
        recent = recent.exclude(runner=exclude)
    return recent.exists()


def server_runner_available(*, probe: bool = True) -> bool:
    """A job runner in another process is alive, or a server answers and its runner comes up shortly."""
    if runner_alive():
        return True
    if not probe or not server_answers(server_address().url):
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
    out: TextIO | OutputWrapper,
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
            # Wherever it lands, the pause after a busy database included.
            if cancelling:
                raise CommandError(
                    f"stopped following {label}; it is being cancelled (see the admin or the API)", returncode=130
                ) from None
            cancelling = True
            if local is not None:
                local.stop.set()
            _cancel_when_free(job, interval)
            out.write(f"\nCancelling {label}… (Ctrl-C again to stop waiting)\n")
            drawn = ""


def _cancel_when_free(job: Job, pause: float, attempts: int = 5) -> None:
    """Record the cancel. SQLite's one writer may be busy past its busy timeout on a loaded machine (the runner's
    own writes, another command's): asking again is better than leaving the job running with the command gone."""
    for attempt in range(attempts):
        try:
            job_cancel(job=job)
            return
        except OperationalError as exc:
            if "locked" not in str(exc) or attempt == attempts - 1:
                raise
            time.sleep(pause)


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


# --- the commands' flow ----------------------------------------------------------------------------------------

T = TypeVar("T")
Execute = Callable[[Job, VectorStore, threading.Event], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class JobCommand:
    """What differs between the job commands: the job's noun, the command's name, the help when the store is
    held by a process that runs no jobs (with `{path}`), and where the API shows the job (optional)."""

    noun: str
    command: str
    locked_help: str
    api_path: str = ""

    def label(self, job: Job) -> str:
        return f"{self.noun} job #{job.pk}"


def command_store(command: JobCommand) -> VectorStore | None:
    """The store when this command should run the job itself; None when another process's runner will."""
    try:
        store = open_store_from_settings()
    except StoreLockedError as exc:
        if not server_runner_available():
            raise CommandError(command.locked_help.format(path=exc.path)) from exc
        return None
    if not store.local and server_runner_available(probe=False):
        # a server's runner is alive on a shared (Qdrant server) store: it runs jobs, this command follows
        store.close()
        return None
    return store


def job_command_run(
    command: JobCommand,
    *,
    out: TextIO | OutputWrapper,
    create: Callable[[], Job],
    execute: Execute,
    on_loop: Callable[[], object],
    no_wait: bool = False,
    before_create: Callable[[VectorStore], bool] | None = None,
) -> Job | None:
    """Create the job and see it through: run here when this process can open the store, else follow the
    server's runner. Returns the finished row, or None when there is nothing to report (queued with
    `no_wait`, or `before_create(store)` answered False after saying why). A job run here calls `on_loop()` on
    its event loop before `execute` (the process's concurrency manager is set up there)."""
    store = command_store(command)
    if store is None:
        job = create()
        if no_wait:
            where = f" ({command.api_path}{job.pk})" if command.api_path else ""
            out.write(f"Queued {command.label(job)}; the server runs it{where}.")
            return None
        out.write(f"{command.label(job).capitalize()} runs in the server; following it (Ctrl-C cancels the job).")
        return job_follow(job, out=out, label=command.label(job))
    with store:
        if before_create is not None and not before_create(store):
            return None
        job = create()
        if no_wait:
            out.write(
                f"Queued {command.label(job)}. No server holds the vector store, so nobody runs it until one "
                f"starts with the job runner; run {command.command} without --no-wait to run it now."
            )
            return None
        return job_run_here(job, store, out=out, label=command.label(job), execute=execute, on_loop=on_loop)


def job_run_here(
    job: Job,
    store: VectorStore,
    *,
    out: TextIO | OutputWrapper,
    label: str,
    execute: Execute,
    on_loop: Callable[[], object],
) -> Job:
    """Run `on_loop()` then `execute(job, store, stop)` on an event loop of its own (on the job's thread),
    following the row."""

    async def main(stop: threading.Event) -> None:
        # the openai SDK loads here, for a job run here, not for every command that only follows the server's
        from rag.llm.client import aclose_clients

        on_loop()  # the process's manager, with the deployment's limits, on this loop
        try:
            await execute(job, store, stop)
        finally:
            await aclose_clients()

    local = InProcess(
        job, runner=runner_name(), store_owner=store.local, body=lambda stop: asyncio.run(main(stop))
    ).start()
    try:
        return job_follow(job, out=out, label=label, local=local)
    finally:
        local.stop.set()
        local.join()


async def in_thread(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """`fn` on a thread of its own, awaited; the thread's database connection is closed at the end."""

    def call() -> T:
        try:
            return fn(*args, **kwargs)
        finally:
            connections.close_all()

    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rag-job-work")
    try:
        return await asyncio.get_running_loop().run_in_executor(executor, call)
    finally:
        executor.shutdown(wait=False)  # never block the loop; a cancelled caller has set the job's stop event
