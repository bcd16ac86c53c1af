"""The suite's one LLM simulator process, and the views of it that each test folder configures.

The simulator starts on first use (a session-scoped fixture, so a run that asks for none starts none) with the
simulator's defaults. A folder's fixture is a function-scoped view: ``simulator_view(suite_simulator, FLAGS)``
zeroes its counters, restores its start-up configuration and faults, then applies that folder's flags through the
admin API (``/admin/reset``, ``/admin/config``); the test may change faults and configuration further, and the next
test's view undoes it. A test that kills or stops a simulator, or needs a start-up flag the admin API cannot change
(its port), starts a process of its own with ``SimulatorProcess().start(...)``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from devtools.simulator.config import FaultConfig
from devtools.simulator.testing import SimulatorProcess
from tests.waiting import wait_for

# Flags that are faults (``POST /admin/faults``); the others are configuration (``POST /admin/config``).
FAULT_FIELDS = frozenset(field.name for field in dataclasses.fields(FaultConfig))


@pytest.fixture(scope="session")
def suite_simulator() -> Iterator[SimulatorProcess]:
    """The one simulator process of the run; use it through a view (`simulator_view`), never as it is."""
    with SimulatorProcess().start() as simulator:
        yield simulator


def simulator_view(simulator: SimulatorProcess, flags: dict[str, Any]) -> SimulatorProcess:
    """``simulator`` reset to its start-up state and configured with ``flags`` (the start-up flags' names, faults
    among them: ``{"tpot_ms": 2, "fail_next": ["429"]}``), as a process started with those flags would be."""
    _wait_idle(simulator)
    simulator.reset()
    faults = {key: value for key, value in flags.items() if key in FAULT_FIELDS}
    settings = {key: value for key, value in flags.items() if key not in FAULT_FIELDS}
    if settings:
        simulator.configure(**settings)
    if faults:
        simulator.faults(**faults)
    return simulator


def _wait_idle(simulator: SimulatorProcess, within: float = 5.0) -> None:
    """Requests an earlier test left running would hold slots of this one: wait for them to end, or fail."""
    wait_for(
        simulator.stats,
        lambda stats: stats["running"] == stats["waiting"] == 0,
        within=within,
        note="the LLM simulator is still busy with an earlier test's requests",
    )
