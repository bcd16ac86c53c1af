"""One LLM call as a node makes it: its prompt, its options, its usage event, and why it fell back."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from rag.deps import PromptProvider, PromptSnapshot
from rag.errors import Busy, PipelineAbort, SlotUnavailable, UpstreamTimeout
from rag.events import StreamWriter
from rag.llm.errors import InvalidLLMOutput
from rag.prompting.prompts import CataloguePrompts
from rag.state import PipelineState, SkippedStep, Turn, Usage

logger = logging.getLogger(__name__)


class PromptUnavailable(Exception):
    """The prompt could not be loaded (registry down, a template that no longer renders...)."""


# What a node with a rule-based fallback catches: the model's answer was unusable, the call failed or timed out,
# or the prompt could not be had. Cancellation is not among them (it is a BaseException).
FALLBACK_ERRORS: tuple[type[Exception], ...] = (InvalidLLMOutput, PipelineAbort, PromptUnavailable, TimeoutError)


def prompt_provider(prompts: PromptProvider | None) -> PromptProvider:
    return prompts if prompts is not None else CataloguePrompts()


async def load_prompt(prompts: PromptProvider, name: str) -> PromptSnapshot:
    try:
        return await prompts.get(name)
    except Exception as exc:
        raise PromptUnavailable(f"prompt {name!r} is unavailable ({type(exc).__name__}: {exc})") from exc


def render(snapshot: PromptSnapshot, name: str, **variables: object) -> str:
    try:
        return snapshot.render(**variables)
    except Exception as exc:
        raise PromptUnavailable(f"prompt {name!r} does not render ({type(exc).__name__}: {exc})") from exc


def fallback_reason(exc: BaseException) -> str:
    """A short code for the status event: what made the node use its rules instead of the model."""
    if isinstance(exc, InvalidLLMOutput):
        return "invalid_output"
    if isinstance(exc, UpstreamTimeout | TimeoutError):
        return "timeout"
    if isinstance(exc, Busy):
        return "busy"
    if isinstance(exc, PipelineAbort):
        return "upstream_error"
    if isinstance(exc, PromptUnavailable):
        return "prompt_unavailable"
    return "error"


def skipped(state: PipelineState, step: str, exc: BaseException) -> dict[str, str]:
    """When ``exc`` says the step's call never started (no slot in its wait bound), record the step as skipped for
    `meta_summary` and return the status event's field saying so; otherwise nothing."""
    if not isinstance(exc, SlotUnavailable):
        return {}
    state.skipped.append(SkippedStep(step, exc.reason))
    return {"skipped": exc.reason}


def fallback_detail(exc: BaseException) -> str:
    if isinstance(exc, InvalidLLMOutput):
        return exc.reason
    return getattr(exc, "message", None) or str(exc) or type(exc).__name__


def call_options(llm: Any, snapshot: PromptSnapshot, *, node: str) -> dict[str, Any]:
    """model / temperature / max_tokens for a call, from the prompt version's config.

    A per-node model or temperature from the deployment (LLM_NODE_MODELS / LLM_NODE_TEMPERATURES) wins over the
    prompt's: the deployment knows which models its server actually serves.
    """
    config: Mapping[str, Any] = snapshot.config or {}
    llm_config = getattr(llm, "config", None)
    options: dict[str, Any] = {}
    model = config.get("model")
    if isinstance(model, str) and model and node not in getattr(llm_config, "node_models", {}):
        options["model"] = model
    temperature = config.get("temperature")
    if (
        isinstance(temperature, int | float)
        and not isinstance(temperature, bool)
        and node not in getattr(llm_config, "node_temperatures", {})
    ):
        options["temperature"] = float(temperature)
    max_tokens = config.get("max_tokens")
    if isinstance(max_tokens, int) and not isinstance(max_tokens, bool) and max_tokens > 0:
        options["max_tokens"] = max_tokens
    return options


async def record_usage(
    state: PipelineState, writer: StreamWriter, node: str, usage: Usage | None, *, call: str
) -> None:
    """Every LLM call the server answered is counted once: one `meta` usage event, added to the request's total."""
    usage = usage or Usage()
    state.usage.add(usage)
    await writer.usage(node, usage.as_dict(), call=call)


async def record_rejected_usage(
    state: PipelineState, writer: StreamWriter, node: str, exc: BaseException, *, call: str
) -> None:
    """The tokens of a reply that was received but rejected (not JSON, wrong shape): spent all the same."""
    usage = getattr(exc, "usage", None) if isinstance(exc, InvalidLLMOutput) else None
    if usage is not None:
        await record_usage(state, writer, node, usage, call=call)


def recent_turns(history: list[Turn], *, turns: int) -> list[Turn]:
    kept = [turn for turn in history if turn.role in ("user", "assistant") and turn.content.strip()]
    return kept[-turns:] if turns > 0 else []


def clip(text: str, max_chars: int) -> str:
    text = text.strip()
    return text if len(text) <= max_chars else text[: max_chars - 1].rstrip() + "…"


def history_messages(history: list[Turn], *, turns: int, max_chars: int) -> list[dict[str, str]]:
    turns_kept = recent_turns(history, turns=turns)
    return [{"role": turn.role, "content": clip(turn.content, max_chars)} for turn in turns_kept]


def history_transcript(history: list[Turn], *, turns: int, max_chars: int) -> str:
    names = {"user": "User", "assistant": "Assistant"}
    return "\n".join(
        f"{names[turn.role]}: {clip(turn.content, max_chars)}" for turn in recent_turns(history, turns=turns)
    )


def one_line(text: str, *, max_chars: int) -> str:
    """The first non-empty line of a model's reply, without surrounding quotes, capped."""
    for line in text.strip().splitlines():
        line = line.strip().strip("\"'`「」“”").strip()
        if line:
            return line[:max_chars].strip()
    return ""


def log_fallback(node: str, exc: BaseException) -> None:
    logger.warning("%s: LLM unusable (%s), using the rules: %s", node, fallback_reason(exc), fallback_detail(exc))
