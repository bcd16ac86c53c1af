"""`manage.py run_jobs`: run index and backfill jobs in a process of their own until SIGTERM or Ctrl-C.

For deployments that keep index builds off the answering workers: start the workers with `RAG_JOB_RUNNER=false`
and one `run_jobs` process (deploy/systemd/helpcentre-jobs.service). It claims jobs one at a time like a worker's
job runner, beats the same heartbeat (so `manage.py reindex` and the admin know a runner is alive), and on SIGTERM
cancels the job it runs, which ends as cancelled, and exits.
"""

from __future__ import annotations

import asyncio
import signal
from typing import Any

from django.core.management.base import BaseCommand

from rag.documents.runner import job_runner_start, job_runner_stop
from rag.provider import provide_runtime
from rag.wiring import get_runtime


class Command(BaseCommand):
    help = "Run index and backfill jobs in this process until SIGTERM or Ctrl-C."

    def handle(self, *args: Any, **options: Any) -> None:
        provide_runtime(get_runtime)  # the jobs run on the pipeline runtime's store and clients
        asyncio.run(self._serve())
        self.stdout.write("job runner stopped")

    async def _serve(self) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        job_runner_start()
        self.stdout.write("job runner started; SIGTERM or Ctrl-C stops it", ending="\n")
        self.stdout.flush()
        await stop.wait()
        await job_runner_stop()
