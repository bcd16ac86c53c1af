from rag.nodes.telemetry import Telemetry
from tests.rag.nodes.support import drain, make_state, make_writer


async def test_passes_through_without_events():
    # Its per-call cost is measured by scripts/bench_hot_paths.py, not asserted here.
    state = make_state()
    writer, channel = make_writer()
    node = Telemetry()
    for _ in range(3):
        assert await node.run(state, writer) is None
    assert await drain(channel) == []
