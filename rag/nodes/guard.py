"""guard: refuse empty, oversized or blocked questions and clients over their rate, before any work is done."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any

from infra.ratelimit import RateRule
from rag.deps import PipelineDeps, RateLimiter
from rag.engine import NodeType, ParamSpec
from rag.events import StreamWriter
from rag.state import PipelineState
from rag.text.tokenize import normalize

NAME = "guard"
INPUTS = ("question", "client_id", "client_address", "client_identified")
OUTPUTS = ("error",)
ROUTE_OK = "default"
ROUTE_BLOCKED = "blocked"

# Conservative prompt-injection markers: phrases no help-centre question needs. Matched on NFKC lower case,
# so full-width look-alikes ("ｉｇｎｏｒｅ") do not slip through.
DEFAULT_BLOCKED_PATTERNS = (
    r"\bignore (?:all |any )?(?:the )?(?:previous|prior|above|earlier) (?:instructions|prompts?|rules)\b",
    r"\bdisregard (?:all |any )?(?:the )?(?:previous|prior|above) (?:instructions|prompts?|rules)\b",
    r"\b(?:reveal|print|show|repeat) (?:me )?(?:your|the) (?:system prompt|hidden instructions)\b",
    r"忽略(?:之前|先前|以上|前面|上述)(?:的)?(?:所有)?(?:指示|指令|規則|规则|提示)",
    r"<\|im_(?:start|end)\|>|<\|(?:system|endoftext)\|>|\[/?inst\]",
)


class Guard:
    name = NAME

    def __init__(
        self,
        *,
        max_chars: int,
        blocked_patterns: Iterable[str],
        rate_limiter: RateLimiter | None,
        per_client: int = 0,
        per_address: int = 0,
    ) -> None:
        self._max_chars = max_chars
        self._blocked = _compile(blocked_patterns)
        self._rate_limiter = rate_limiter
        self._per_client = per_client
        self._per_address = per_address

    async def run(self, state: PipelineState, writer: StreamWriter) -> str | None:
        question = state.question
        if not question or not question.strip():
            state.fail("bad_request", "question is empty")
            return ROUTE_BLOCKED
        if len(question) > self._max_chars:
            state.fail(
                "bad_request", f"question is too long: {len(question)} characters, the limit is {self._max_chars}"
            )
            return ROUTE_BLOCKED
        if self._blocked is not None and self._blocked.search(normalize(question)):
            state.fail("blocked", "the question contains content this service does not accept")
            return ROUTE_BLOCKED
        rules = self._rate_rules(state)
        if self._rate_limiter is not None and rules:
            allowed, retry_after = await self._rate_limiter.admit(rules)
            if not allowed:
                wait = max(1, math.ceil(retry_after))
                state.fail("busy", f"too many questions; try again in {wait} s", retry_after=float(wait))
                return ROUTE_BLOCKED
        return None

    def _rate_rules(self, state: PipelineState) -> list[RateRule]:
        """The client's window (by its id, or by its address when it sent no id: a new id on every request would
        escape any limit) and the address's window. A request with neither (the CLI, tests) is not limited: one
        shared bucket for all of them would let one caller starve the rest."""
        rules = []
        if state.client_id and state.client_identified:
            rules.append(RateRule(f"client:{state.client_id}", self._per_client))
        elif state.client_address:
            rules.append(RateRule(f"anonymous:{state.client_address}", self._per_client))
        if state.client_address:
            rules.append(RateRule(f"address:{state.client_address}", self._per_address))
        return rules  # a limit of 0 (unlimited) is the limiter's to skip


def _compile(patterns: Iterable[str]) -> re.Pattern[str] | None:
    """One alternation for all patterns; a bad one fails when the graph is built, naming the pattern."""
    checked = []
    for pattern in patterns:
        if not isinstance(pattern, str):
            raise ValueError(f"guard: blocked pattern {pattern!r} is not a string")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"guard: blocked pattern {pattern!r} is not a valid regular expression: {exc}") from exc
        checked.append(f"(?:{pattern})")
    return re.compile("|".join(checked), re.IGNORECASE) if checked else None


def _build(deps: PipelineDeps, params: dict[str, Any]) -> Guard:
    # Two sources of limits: the deployment's (PipelineConfig) and the workflow's (params). The stricter limit
    # applies and the blocked patterns add up, so a workflow draft can tighten but never loosen the deployment.
    return Guard(
        max_chars=min(params["max_chars"], deps.config.max_question_chars),
        blocked_patterns=[*deps.config.blocked_patterns, *params["blocked_patterns"]],
        rate_limiter=deps.rate_limiter,
        per_client=deps.config.rate_limit_per_client,
        per_address=deps.config.rate_limit_per_address,
    )


NODE_TYPE = NodeType(
    name=NAME,
    description={
        "en": "Rejects empty, too long or blocked questions and clients over their rate limit.",
        "zh-hant": "檢查問題：拒絕空白、過長或含封鎖內容的問題，以及超過頻率限制的用戶端。",
    },
    inputs=INPUTS,
    outputs=OUTPUTS,
    factory=_build,
    routes=(ROUTE_OK, ROUTE_BLOCKED),
    params={
        "max_chars": ParamSpec("int", 2000, "Longest accepted question, in characters", minimum=1),
        "blocked_patterns": ParamSpec(
            "list", list(DEFAULT_BLOCKED_PATTERNS), "Regular expressions that block a question (case-insensitive)"
        ),
    },
)
