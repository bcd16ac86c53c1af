import time

from rag.nodes.telemetry import Telemetry
from tests.rag.nodes.support import drain, make_state, make_writer


async def test_passes_through_cheaply_without_events():
    state = make_state()
    writer, channel = make_writer()
    node = Telemetry()
    started = time.perf_counter()
    for _ in range(1000):
        assert await node.run(state, writer) is None
    assert time.perf_counter() - started < 0.05
    assert await drain(channel) == []
