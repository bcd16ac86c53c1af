"""``manage.py simulate_llm``: serve the vLLM-like OpenAI-compatible simulator with daphne."""

from __future__ import annotations

import argparse
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.simulator import ConfigError, FaultConfig, SimulatorConfig, build_app
from devtools.simulator.server import serve

# Config fields whose flag is not simply "--" + field name with dashes.
_FLAG_FOR_FIELD = {"endpoints": "--fault-endpoints"}


def _csv(value: str) -> list[str]:
    return [item.strip() for item in value.split(",") if item.strip()]


class Command(BaseCommand):
    help = (
        "Run an OpenAI-compatible LLM server simulator that schedules like vLLM (max_num_seqs, FIFO queue, "
        "batch-dependent latency) and injects faults. Point LLM_BASE_URL at the printed URL."
    )
    # The simulator touches no models; skipping checks keeps start-up fast and independent of other apps.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        base, faults = SimulatorConfig(), FaultConfig()
        parser.formatter_class = argparse.ArgumentDefaultsHelpFormatter
        add = parser.add_argument
        add("--host", default="127.0.0.1", help="Interface to bind.")
        add("--port", type=int, default=8001, help="TCP port to bind.")
        add("--model", default=base.model, help="Model name served (any requested name is accepted).")
        add("--embedding-model", default=base.embedding_model, help="Embedding model name listed.")
        add("--max-num-seqs", type=int, default=base.max_num_seqs, help="Sequences decoded at once.")
        add("--max-waiting", type=int, default=base.max_waiting, help="Waiting-queue bound (then 503).")
        add("--ttft-ms", type=float, default=base.ttft_ms, help="Prefill time of a lone request.")
        add("--prefill-ms-per-token", type=float, default=base.prefill_ms_per_token, help="Per prompt token.")
        add("--tpot-ms", type=float, default=base.tpot_ms, help="Time per output token of a lone request.")
        add(
            "--batch-slowdown",
            type=float,
            default=base.batch_slowdown,
            help="Step time x (1 + this * (running-1)/max_num_seqs).",
        )
        add("--output-tokens", type=int, default=base.output_tokens, help="Answer length; 0 = max_tokens.")
        add("--reasoning-tokens", type=int, default=base.reasoning_tokens, help="Reasoning tokens first.")
        add("--embedding-dim", type=int, default=base.embedding_dim, help="Default embedding size.")
        add("--seed", type=int, default=base.seed, help="Seed of the fault-rate RNG.")
        add("--rate-429", type=float, default=faults.rate_429, help="Probability of a 429.")
        add("--retry-after", type=int, default=faults.retry_after, help="Retry-After seconds on a 429.")
        add("--rate-500", type=float, default=faults.rate_500, help="Probability of a 500.")
        add("--hang-rate", type=float, default=faults.hang_rate, help="Probability of a hang before token 1.")
        add("--hang-seconds", type=float, default=faults.hang_seconds, help="Hang length; 0 = until client leaves.")
        add("--stall-after", type=int, default=None, help="Stall streams after K tokens.")
        add("--stall-seconds", type=float, default=faults.stall_seconds, help="Stall length.")
        add("--stall-rate", type=float, default=faults.stall_rate, help="Probability a stream stalls.")
        add("--drop-after", type=int, default=None, help="Drop the connection after K tokens.")
        add("--drop-rate", type=float, default=faults.drop_rate, help="Probability a stream is dropped.")
        add("--fail-next", type=_csv, default=[], help="Comma list of directives, e.g. 429,500,drop:3.")
        add(
            "--fault-endpoints",
            type=_csv,
            default=list(faults.endpoints),
            help="Endpoints faults apply to: chat,responses,embeddings.",
        )
        add(
            "--refuse",
            type=_csv,
            default=[],
            help="Act as a less capable server: json_schema,json_object,stream_options,responses,stream_usage.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = self.build_config(options)
        host, port = options["host"], options["port"]
        if not 1 <= port <= 65535:
            raise CommandError(f"--port must be in 1..65535, got {port}")
        shown_host = f"[{host}]" if ":" in host else host
        base_url = f"http://{shown_host}:{port}/v1"

        def ready() -> None:
            self.stdout.write(
                f"LLM simulator: model={config.model} max_num_seqs={config.max_num_seqs} "
                f"ttft={config.ttft_ms}ms tpot={config.tpot_ms}ms output_tokens={config.output_tokens}"
            )
            self.stdout.write(f"LLM_BASE_URL={base_url}")
            self.stdout.write(
                "Admin: /admin/stats, /admin/faults, /admin/config, /admin/reset; metrics: /metrics. Ctrl-C stops."
            )
            self.stdout.flush()

        if not serve(build_app(config), host=host, port=port, ready=ready):
            raise CommandError(f"Could not listen on {host}:{port} (in use, or a bad --host?)")
        self.stdout.write("LLM simulator stopped.")

    @staticmethod
    def build_config(options: dict[str, Any]) -> SimulatorConfig:
        faults = FaultConfig(
            rate_429=options["rate_429"],
            retry_after=options["retry_after"],
            rate_500=options["rate_500"],
            hang_rate=options["hang_rate"],
            hang_seconds=options["hang_seconds"],
            stall_after=options["stall_after"],
            stall_seconds=options["stall_seconds"],
            stall_rate=options["stall_rate"],
            drop_after=options["drop_after"],
            drop_rate=options["drop_rate"],
            fail_next=list(options["fail_next"]),
            endpoints=list(options["fault_endpoints"]),
            refuse=list(options["refuse"]),
        )
        config = SimulatorConfig(
            model=options["model"],
            embedding_model=options["embedding_model"],
            max_num_seqs=options["max_num_seqs"],
            max_waiting=options["max_waiting"],
            ttft_ms=options["ttft_ms"],
            prefill_ms_per_token=options["prefill_ms_per_token"],
            tpot_ms=options["tpot_ms"],
            batch_slowdown=options["batch_slowdown"],
            output_tokens=options["output_tokens"],
            reasoning_tokens=options["reasoning_tokens"],
            embedding_dim=options["embedding_dim"],
            seed=options["seed"],
            faults=faults,
        )
        try:
            config.validate()
        except ConfigError as exc:
            flag = _FLAG_FOR_FIELD.get(exc.field, exc.flag)
            raise CommandError(f"{flag}: {exc.message}") from None
        return config
