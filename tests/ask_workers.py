"""The suite's shared pair of answering workers, for the tests that only ask.

Two daphne workers behind one database (and one Redis when the run has `REDIS_URL`), answering through the suite's
LLM simulator (`tests.llm_simulator`), with the demo corpus indexed and `PUBLIC_BASE_URL` set. They start the
first time a test asks for `ask_workers` (a session-scoped fixture: a run that asks for none starts none) and stop
at the end of the run, so the modules that ask through real workers pay for one start-up instead of one each.

What a sharing test may do: configure the simulator through its view (`simulator_view`), make API keys of its own
(`new_key`), and change the live concurrency settings inside `with ask_workers.settings(...)`, which waits until
both workers run with the change and puts the old values back the same way. What it may not: stop, kill or restart
a worker, or need an environment of its own. Those tests start their own workers
(`tests.daphne_workers.running_workers`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from devtools.simulator.testing import SimulatorProcess
from tests.answer_worker import answer_worker_env
from tests.daphne_workers import Worker, manage, running_workers
from tests.waiting import wait_for

PUBLIC_BASE_URL = "https://help.example.org"
STATUS = "/api/v1/admin/concurrency/status"
SETTINGS = "/api/v1/admin/concurrency/settings"


@dataclass(frozen=True)
class AskWorkers:
    workers: tuple[Worker, Worker]
    env: dict[str, str]
    simulator: SimulatorProcess  # the suite's: configure it through `simulator_view`
    admin_key: str  # scopes chat, admin-read and admin-write; no rate limit

    def new_key(self, *flags: str) -> str:
        """A new API key (`manage.py apikey create` with `flags`: its scopes, its rate limit)."""
        return manage(self.env, "apikey", "create", "--name", "shared workers' test", *flags).strip()

    def manage(self, *command: str) -> str:
        return manage(self.env, *command)

    def status(self, worker: int = 0) -> dict[str, Any]:
        """The concurrency status as `worker` serves it (`worker.manager` is that worker's own)."""
        response = self.workers[worker].http.get(STATUS, headers=self._admin)
        assert response.status_code == 200, response.text[:300]
        body: dict[str, Any] = response.json()
        return body

    @contextlib.contextmanager
    def settings(self, **changes: Any) -> Iterator[None]:
        """The live concurrency settings changed (`PATCH` of the settings API: `limits={"chat": 1}`,
        `max_waiters=0`) until the block ends, then put back; each way, both workers run with the values before
        the block's body or the next test goes on."""
        before = self._settings()
        old = {  # the groups ("limits", "rpm": backend -> value) only for the backends changed
            name: {backend: before[name][backend] for backend in value} if isinstance(value, dict) else before[name]
            for name, value in changes.items()
        }
        self._apply(changes)
        try:
            yield
        finally:
            self._apply(old)

    @property
    def _admin(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin_key}"}

    def _settings(self) -> dict[str, Any]:
        response = self.workers[0].http.get(SETTINGS, headers=self._admin)
        assert response.status_code == 200, response.text[:300]
        settings: dict[str, Any] = response.json()["settings"]
        return settings

    def _apply(self, changes: dict[str, Any]) -> None:
        response = self.workers[0].http.patch(SETTINGS, json=changes, headers=self._admin)
        assert response.status_code == 200, response.text[:300]
        version = response.json()["settings"]["version"]

        for worker in range(len(self.workers)):
            wait_for(
                lambda worker=worker: self.status(worker)["worker"]["settings_version"],  # type: ignore[misc]
                lambda running: running == version,
                within=10.0,
                note=f"worker {worker} never ran the settings' version {version}",
            )


@pytest.fixture(scope="session")
def ask_workers(suite_simulator: SimulatorProcess) -> Iterator[AskWorkers]:
    """The shared pair (see the module's docstring), started on first use."""
    with contextlib.ExitStack() as stack:
        env = stack.enter_context(
            answer_worker_env(
                suite_simulator.base_url,
                redis_url=os.environ.get("REDIS_URL", ""),
                label="ask-workers",
                PUBLIC_BASE_URL=PUBLIC_BASE_URL,
            )
        )
        admin_key = manage(
            env,
            "apikey",
            "create",
            "--name",
            "shared workers",
            "--scopes",
            "chat,admin-read,admin-write",
            "--rate-limit",
            "0",
        ).strip()
        first, second = stack.enter_context(running_workers([env, env]))
        yield AskWorkers(workers=(first, second), env=env, simulator=suite_simulator, admin_key=admin_key)
