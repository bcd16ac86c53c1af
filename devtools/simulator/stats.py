"""Counters behind ``GET /admin/stats`` (JSON) and ``GET /metrics`` (Prometheus text, vLLM metric names)."""

from __future__ import annotations

import bisect
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

ENDPOINTS = ("chat", "responses", "embeddings")
_RECENT_REQUESTS = 100
# vLLM's bucket edges for these two histograms (seconds).
_TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
_E2E_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0)


@dataclass
class EndpointStats:
    attempts: int = 0
    completed: int = 0
    aborted: int = 0
    dropped: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: Counter[str] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {
            "attempts": self.attempts,
            "completed": self.completed,
            "aborted": self.aborted,
            "dropped": self.dropped,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "status": dict(sorted(self.status.items())),
        }


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def render(self, name: str, labels: str) -> list[str]:
        lines = [f"# TYPE {name} histogram"]
        cumulative = 0
        for edge, count in zip(self.buckets, self.counts, strict=True):
            cumulative += count
            lines.append(f'{name}_bucket{{{labels},le="{edge}"}} {cumulative}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


class Stats:
    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.endpoints = {name: EndpointStats() for name in ENDPOINTS}
        self.finished_reasons: Counter[str] = Counter()
        self.ttft = Histogram(_TTFT_BUCKETS)
        self.e2e = Histogram(_E2E_BUCKETS)
        self.recent: deque[dict[str, Any]] = deque(maxlen=_RECENT_REQUESTS)
        self.started_at = time.time()

    def attempt(self, endpoint: str, body: Any) -> None:
        self.endpoints[endpoint].attempts += 1
        self.recent.append({"endpoint": endpoint, "time": time.time(), "body": body})

    def status(self, endpoint: str, code: int) -> None:
        self.endpoints[endpoint].status[str(code)] += 1

    def completed(self, endpoint: str, *, prompt_tokens: int, completion_tokens: int, reason: str) -> None:
        stats = self.endpoints[endpoint]
        stats.completed += 1
        stats.prompt_tokens += prompt_tokens
        stats.completion_tokens += completion_tokens
        self.finished_reasons[reason] += 1

    def aborted(self, endpoint: str) -> None:
        self.endpoints[endpoint].aborted += 1

    def dropped(self, endpoint: str) -> None:
        self.endpoints[endpoint].dropped += 1

    def snapshot(self, *, running: int, waiting: int) -> dict[str, Any]:
        per_endpoint = {name: stats.to_dict() for name, stats in self.endpoints.items()}
        totals: Counter[str] = Counter()
        status: Counter[str] = Counter()
        for stats in self.endpoints.values():
            totals.update(
                attempts=stats.attempts, completed=stats.completed, aborted=stats.aborted, dropped=stats.dropped
            )
            status.update(stats.status)
        return {
            "running": running,
            "waiting": waiting,
            **{key: totals[key] for key in ("attempts", "completed", "aborted", "dropped")},
            "status": dict(sorted(status.items())),
            "endpoints": per_endpoint,
        }

    def prometheus(self, *, model: str, running: int, waiting: int, max_num_seqs: int) -> str:
        label = f'model_name="{_escape(model)}"'
        lines = [
            "# HELP vllm:num_requests_running Number of requests in model execution batches.",
            "# TYPE vllm:num_requests_running gauge",
            f"vllm:num_requests_running{{{label}}} {float(running)}",
            "# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
            "# TYPE vllm:num_requests_waiting gauge",
            f"vllm:num_requests_waiting{{{label}}} {float(waiting)}",
            "# HELP vllm:kv_cache_usage_perc KV-cache usage (simulated as running / max_num_seqs).",
            "# TYPE vllm:kv_cache_usage_perc gauge",
            f"vllm:kv_cache_usage_perc{{{label}}} {running / max_num_seqs}",
            "# TYPE vllm:request_success_total counter",
        ]
        for reason, count in sorted(self.finished_reasons.items()):
            lines.append(f'vllm:request_success_total{{finished_reason="{reason}",{label}}} {float(count)}')
        prompt = sum(s.prompt_tokens for s in self.endpoints.values())
        generated = sum(s.completion_tokens for s in self.endpoints.values())
        lines += [
            "# TYPE vllm:prompt_tokens_total counter",
            f"vllm:prompt_tokens_total{{{label}}} {float(prompt)}",
            "# TYPE vllm:generation_tokens_total counter",
            f"vllm:generation_tokens_total{{{label}}} {float(generated)}",
        ]
        lines += self.ttft.render("vllm:time_to_first_token_seconds", label)
        lines += self.e2e.render("vllm:e2e_request_latency_seconds", label)
        lines += self._simulator_counters()
        return "\n".join(lines) + "\n"

    def _simulator_counters(self) -> list[str]:
        lines = ["# HELP llm_sim_requests_total Requests received (attempts), per endpoint."]
        lines.append("# TYPE llm_sim_requests_total counter")
        for name, stats in self.endpoints.items():
            lines.append(f'llm_sim_requests_total{{endpoint="{name}"}} {float(stats.attempts)}')
        lines.append("# TYPE llm_sim_responses_total counter")
        for name, stats in self.endpoints.items():
            for code, count in sorted(stats.status.items()):
                lines.append(f'llm_sim_responses_total{{endpoint="{name}",status="{code}"}} {float(count)}')
        simple = {
            "llm_sim_rate_limited_total": lambda s: s.status["429"],
            "llm_sim_server_errors_total": lambda s: sum(c for k, c in s.status.items() if k.startswith("5")),
            "llm_sim_aborted_total": lambda s: s.aborted,
            "llm_sim_dropped_total": lambda s: s.dropped,
        }
        for metric, getter in simple.items():
            lines.append(f"# TYPE {metric} counter")
            for name, stats in self.endpoints.items():
                lines.append(f'{metric}{{endpoint="{name}"}} {float(getter(stats))}')
        return lines


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
