"""Request telemetry: a sampled Langfuse trace per request, exported off the request path.

    telemetry = get_telemetry()                 # process-wide; a no-op without LANGFUSE_* keys
    observer = telemetry.begin(state)           # in the run's task: sampling, trace id, ContextVar
    await graph.run(state, writer, observer=observer)
    telemetry.finish(state)                     # enqueue (sampled) or keep a compact summary (unsampled);
                                                # state.trace_exported records which, stored with the answer

The LLM backend reports each call with `report_generation(...)` (failed calls too, with their error); the feedback
endpoint sends scores with `telemetry.send_score(score, trace_exported=...)`, which sends the trace first when
it was not exported. `telemetry.sampler.set_rate(...)` changes the sample rate at run time (the live settings).
"""

from rag.telemetry.facade import SummaryStore, Telemetry
from rag.telemetry.record import (
    FinishedTrace,
    GenerationRecord,
    NodeSpan,
    ScoreRecord,
    TraceRecord,
    client_ref_for,
    current_trace,
    generation_error,
    report_generation,
    trace_id_for,
    trace_summary_from_exchange,
)
from rag.telemetry.sampler import SamplerStats, TelemetrySampler
from rag.telemetry.settings import build_telemetry_from_settings, current_telemetry, get_telemetry, reset_telemetry

__all__ = [
    "FinishedTrace",
    "GenerationRecord",
    "NodeSpan",
    "SamplerStats",
    "ScoreRecord",
    "SummaryStore",
    "Telemetry",
    "TelemetrySampler",
    "TraceRecord",
    "build_telemetry_from_settings",
    "client_ref_for",
    "current_telemetry",
    "current_trace",
    "generation_error",
    "get_telemetry",
    "report_generation",
    "reset_telemetry",
    "trace_id_for",
    "trace_summary_from_exchange",
]
