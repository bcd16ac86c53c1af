"""``manage.py simulate_llm`` rejects bad flags by name, and prints the base URL once serving."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command

from devtools.simulator.testing import SimulatorProcess, free_port
from tests.devtools.simulator.fixtures import SimulatorFactory


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--rate-429", "1.5"], "--rate-429"),
        (["--rate-500", "-0.1"], "--rate-500"),
        (["--hang-rate", "2"], "--hang-rate"),
        (["--max-num-seqs", "0"], "--max-num-seqs"),
        (["--tpot-ms", "-1"], "--tpot-ms"),
        (["--stall-after", "-3"], "--stall-after"),
        (["--retry-after", "-1"], "--retry-after"),
        (["--fail-next", "429,teapot"], "--fail-next"),
        (["--fault-endpoints", "chat,images"], "--fault-endpoints"),
        (["--port", "70000"], "--port"),
    ],
)
def test_bad_flags_name_the_flag(args: list[str], flag: str) -> None:
    with pytest.raises(CommandError, match=f"^{flag}"):
        call_command("simulate_llm", *args)


def test_startup_prints_base_url(shared_simulator: SimulatorProcess) -> None:
    assert f"LLM_BASE_URL={shared_simulator.base_url}" in shared_simulator.output()


def test_stops_cleanly_on_sigterm(simulator_factory: SimulatorFactory) -> None:
    sim = simulator_factory(output_tokens=1)
    process = sim._process
    assert process is not None
    sim.stop()
    assert process.returncode == 0


def test_starts_on_a_chosen_port() -> None:
    port = free_port()
    with SimulatorProcess().start(port=port, output_tokens=1) as sim:
        assert sim.port == port
        assert sim.base_url == f"http://127.0.0.1:{port}/v1"
        assert sim.stats()["completed"] == 0
