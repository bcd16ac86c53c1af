"""`manage.py loadtest URL`: drive concurrent chat users at a deployment and report what it sustains.

    manage.py loadtest http://127.0.0.1:8080 --users 32 --duration 60 --transport sse \
        --metrics-url http://127.0.0.1:8001/metrics --llm-capacity 8 --json run.json --plot run.svg

Closed loop by default (`--users` users, each asking again when its answer ends); `--rate R` makes it an open
loop (R new asks per second). Questions are distinct so the semantic cache does not serve them (`--cached` lets
it). Prints a progress line every two seconds, then the result as JSON: completed answers/s, TTFT and total
latency p50/p95/p99 (ms), errors by code, and with `--metrics-url` (the simulator's or vLLM's `/metrics`) the LLM
server's running/waiting requests and, with `--llm-capacity` (its `--max-num-seqs` x replicas), its utilisation.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from devtools.loadtest.driver import DEFAULT_QUESTIONS, LoadConfig, Run, run_load
from devtools.loadtest.report import progress_line, summary, write_svg


class Command(BaseCommand):
    help = "Drive concurrent SSE or WebSocket chat users at a deployment and report throughput and latency."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("url", help="the deployment's base URL, e.g. http://127.0.0.1:8080")
        parser.add_argument("--transport", choices=("sse", "ws"), default="sse")
        parser.add_argument("--users", type=int, default=10, help="closed loop: concurrent users (default 10)")
        parser.add_argument("--rate", type=float, default=0.0, help="open loop: new asks per second instead")
        parser.add_argument("--max-in-flight", type=int, default=1000, help="open loop: bound on asks in flight")
        parser.add_argument("--duration", type=float, default=30.0, help="seconds during which asks start")
        parser.add_argument("--answer-timeout", type=float, default=120.0, help="seconds an answer may take")
        parser.add_argument("--backend", choices=("chat", "responses"), default="chat")
        parser.add_argument("--questions", type=Path, help="a text file, one question per line")
        parser.add_argument("--cached", action="store_true", help="repeat questions as they are (cache hits)")
        parser.add_argument("--metrics-url", default="", help="the LLM server's Prometheus /metrics")
        parser.add_argument("--llm-capacity", type=int, default=0, help="its --max-num-seqs x replicas")
        parser.add_argument("--json", type=Path, help="write the result here too")
        parser.add_argument("--plot", type=Path, help="write an SVG plot of the run here")
        parser.add_argument("--title", default="", help="the plot's title")

    def handle(self, *args: Any, **options: Any) -> None:
        config = self._config(options)
        run = asyncio.run(run_load(config, progress=self._progress))
        result = summary(run, llm_capacity=options["llm_capacity"])
        text = json.dumps(result, ensure_ascii=False, indent=2)
        if options["json"]:
            options["json"].write_text(text + "\n", encoding="utf-8")
        if options["plot"]:
            write_svg(run, options["plot"], title=options["title"] or f"{config.transport} load on {config.url}")
        self.stdout.write(text)

    def _config(self, options: dict[str, Any]) -> LoadConfig:
        for name in ("users", "max_in_flight"):
            if options[name] < 1:
                raise CommandError(f"--{name.replace('_', '-')} must be at least 1")
        for name in ("duration", "answer_timeout"):
            if options[name] <= 0:
                raise CommandError(f"--{name.replace('_', '-')} must be positive")
        if options["rate"] < 0:
            raise CommandError("--rate must not be negative")
        questions: tuple[str, ...] = DEFAULT_QUESTIONS
        if options["questions"]:
            try:
                lines = options["questions"].read_text(encoding="utf-8").splitlines()
            except OSError as exc:
                raise CommandError(f"cannot read --questions: {exc}") from exc
            questions = tuple(line.strip() for line in lines if line.strip())
            if not questions:
                raise CommandError(f"{options['questions']} holds no question")
        return LoadConfig(
            url=options["url"].rstrip("/"),
            transport=options["transport"],
            users=options["users"],
            rate=options["rate"],
            max_in_flight=options["max_in_flight"],
            duration=options["duration"],
            answer_timeout=options["answer_timeout"],
            questions=questions,
            cached=options["cached"],
            backend=options["backend"],
            metrics_url=options["metrics_url"],
        )

    async def _progress(self, run: Run) -> None:
        self.stderr.write(progress_line(run))
