"""Test helper: run ``manage.py simulate_llm`` as a subprocess and drive its admin API.

Standard library only, so any test folder can use it::

    sim = SimulatorProcess().start(max_num_seqs=2, tpot_ms=2, output_tokens=8)
    client = openai.AsyncOpenAI(base_url=sim.base_url, api_key="x", max_retries=0)
    sim.faults(fail_next=["429", "drop:3"])
    ...
    sim.stop()

Blocking methods (``stats``, ``faults``, ``configure``, ``config``, ``reset``, ``metrics``, ``metric``) have
``a``-prefixed awaitable twins that run them in a thread, for use inside async tests. ``configure`` changes at run
time what the start-up flags set but the faults (``faults``) and the port.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any, Self

PROJECT_DIR = Path(__file__).resolve().parents[2]
_PORT_ATTEMPTS = 3


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def command_line_flags(flags: dict[str, Any]) -> list[str]:
    """``{"max_num_seqs": 2, "fail_next": ["429"]}`` -> ``["--max-num-seqs", "2", "--fail-next", "429"]``."""
    args: list[str] = []
    for key, value in flags.items():
        if value is None or value is False:
            continue
        args.append("--" + key.replace("_", "-"))
        if value is True:
            continue
        args.append(",".join(map(str, value)) if isinstance(value, (list, tuple)) else str(value))
    return args


def parse_metric(text: str, name: str) -> float:
    """Sum of all samples of metric ``name`` (any labels) in Prometheus text."""
    total = 0.0
    for line in text.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        sample, _, value = line.rpartition(" ")
        if sample.split("{", 1)[0] == name:
            total += float(value)
    return total


class SimulatorProcess:
    """One simulator subprocess on a free loopback port."""

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        project_dir: Path = PROJECT_DIR,
        settings: str = "chatbot.settings",
        startup_timeout: float = 30.0,
    ) -> None:
        self.host = host
        self.project_dir = project_dir
        self.settings = settings
        self.startup_timeout = startup_timeout
        self.port = 0
        self.flags: dict[str, Any] = {}
        self._process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    # -- life cycle -------------------------------------------------------------------------------------

    @property
    def root_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def base_url(self) -> str:
        """What to use as LLM_BASE_URL / the OpenAI client's base_url."""
        return self.root_url + "/v1"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self, *, port: int = 0, **flags: Any) -> Self:
        """Start with the given command-line flags (underscored names) and wait until /health answers: on `port`,
        else on a free one (a new one again when another process took it first)."""
        if self.running:
            raise RuntimeError("simulator already running")
        self.flags = flags
        attempts = 1 if port else _PORT_ATTEMPTS
        for attempt in range(attempts):
            self.port = port or free_port(self.host)
            self._spawn(flags)
            if self._wait_healthy():
                return self
            output = self.output()
            self.stop()
            # Another process may grab the free port between our probe and the bind: try a new one.
            if "Could not listen" not in output or attempt == attempts - 1:
                raise RuntimeError(f"simulate_llm did not become healthy on port {self.port}:\n{output}")
        raise AssertionError("unreachable")

    def _spawn(self, flags: dict[str, Any]) -> None:
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": self.settings, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, str(self.project_dir / "manage.py"), "simulate_llm"]
        command += ["--host", self.host, "--port", str(self.port), *command_line_flags(flags)]
        # Outlives this call: it collects the process's output until stop() closes it.
        self._log = tempfile.TemporaryFile()  # noqa: SIM115
        self._process = subprocess.Popen(
            command, cwd=self.project_dir, env=env, stdout=self._log, stderr=subprocess.STDOUT
        )

    def _wait_healthy(self) -> bool:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if not self.running:
                return False
            try:
                with urllib.request.urlopen(self.root_url + "/health", timeout=1.0) as response:
                    if response.status == 200:
                        return True
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.05)
        return False

    def output(self) -> str:
        """Everything the process printed so far (stdout and stderr)."""
        if self._log is None:
            return ""
        self._log.flush()
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (daphne shuts down cleanly), then SIGKILL if it does not exit in time."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # -- admin API --------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, payload: Any = None) -> bytes:
        data = None if payload is None else json.dumps(payload).encode()
        request = urllib.request.Request(self.root_url + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=10.0) as response:
                return bytes(response.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path} -> {exc.code}: {exc.read().decode()}") from None

    def stats(self) -> dict[str, Any]:
        """GET /admin/stats: running, waiting, attempts, completed, aborted, dropped, status, endpoints."""
        return dict(json.loads(self._call("GET", "/admin/stats")))

    def faults(self, **changes: Any) -> dict[str, Any]:
        """POST /admin/faults with the given fields (e.g. ``fail_next=["429"]``); returns all faults."""
        return dict(json.loads(self._call("POST", "/admin/faults", changes)))

    def configure(self, **changes: Any) -> dict[str, Any]:
        """POST /admin/config with the given fields (the start-up flags' names but the faults and the port, e.g.
        ``tpot_ms=2, max_num_seqs=4``), for the requests that start from now on; returns the whole configuration.
        A bad value raises RuntimeError naming the field, and changes nothing."""
        return dict(json.loads(self._call("POST", "/admin/config", changes)))

    def config(self) -> dict[str, Any]:
        """GET /admin/config: the configuration new requests get (without the faults)."""
        return dict(json.loads(self._call("GET", "/admin/config")))

    def reset(self) -> dict[str, Any]:
        """POST /admin/reset: zero counters, restore the start-up configuration and faults, reseed the fault RNG."""
        return dict(json.loads(self._call("POST", "/admin/reset", {})))

    def requests(self) -> list[dict[str, Any]]:
        """GET /admin/requests: the last request bodies received, oldest first."""
        return list(json.loads(self._call("GET", "/admin/requests"))["requests"])

    def metrics(self) -> str:
        return self._call("GET", "/metrics").decode()

    def metric(self, name: str) -> float:
        return parse_metric(self.metrics(), name)

    async def astats(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.stats)

    async def afaults(self, **changes: Any) -> dict[str, Any]:
        return await asyncio.to_thread(lambda: self.faults(**changes))

    async def aconfigure(self, **changes: Any) -> dict[str, Any]:
        return await asyncio.to_thread(lambda: self.configure(**changes))

    async def aconfig(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.config)

    async def areset(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.reset)

    async def arequests(self) -> list[dict[str, Any]]:
        return await asyncio.to_thread(self.requests)

    async def ametrics(self) -> str:
        return await asyncio.to_thread(self.metrics)

    async def ametric(self, name: str) -> float:
        return await asyncio.to_thread(self.metric, name)
