"""`manage.py run_jobs`: a job runner in a process of its own runs the reindex a command queues, and stops on
SIGTERM. Real processes over a shared database (PostgreSQL in the PostgreSQL run of CI, else a SQLite file)."""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from tests.daphne_workers import PROJECT_DIR, manage, worker_env
from tests.waiting import wait_for

pytestmark = pytest.mark.slow


def runners(env: dict[str, str]) -> int:
    """Job runners with a heartbeat row, read from the database the way an operator would."""
    query = "SELECT count(*) FROM rag_documents_jobrunnerheartbeat"
    if env["DATABASE_URL"]:
        import psycopg

        with psycopg.connect(env["DATABASE_URL"], connect_timeout=5) as connection:
            row = connection.execute(query).fetchone()
            return int(row[0]) if row else 0
    with contextlib.closing(sqlite3.connect(Path(env["DATA_DIR"]) / "db.sqlite3", timeout=5)) as connection:
        return int(connection.execute(query).fetchone()[0])


def test_run_jobs_runs_a_queued_reindex_and_stops_on_sigterm(tmp_path: Path) -> None:
    # not prepared: the index is to be built by the runner's job, so only the database is migrated here
    with worker_env("run-jobs", prepare=False) as env:
        manage(env, "migrate", "--noinput")
        log = (tmp_path / "run_jobs.log").open("w+")
        runner = subprocess.Popen(
            [sys.executable, str(PROJECT_DIR / "manage.py"), "run_jobs"],
            cwd=PROJECT_DIR,
            env=env,
            stdout=log,
            stderr=log,
        )
        try:
            # the command leaves a job to a runner that has beaten its heartbeat; before that it would run it itself
            wait_for(lambda: runners(env), within=60.0, interval=0.2)
            output = manage(env, "reindex", timeout=180)
            # the command followed the runner's job rather than building the index itself
            log.seek(0)
            runner_log = log.read()
            assert "starts index job #1" in runner_log and "index job #1 succeeded" in runner_log, runner_log
            assert "64 documents" in output, output
            runner.send_signal(signal.SIGTERM)
            assert runner.wait(20) == 0
            log.seek(0)
            assert "job runner stopped" in log.read()
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait(10)
            log.close()
