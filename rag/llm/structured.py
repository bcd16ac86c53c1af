"""Structured LLM output as pydantic models: the JSON schema sent to the server, and the parsing of the reply.

Even with ``strict`` structured output, an OpenAI-compatible server may ignore the schema (older vLLM, another
guided-decoding backend, a model that stops at max_tokens), so no caller trusts the shape: the reply is parsed
into the caller's model, and one that does not fit raises InvalidLLMOutput (the caller falls back to its rules).

Every output model derives from `StructuredOutput`: unknown keys are refused and values are not coerced (`1` is
not a boolean, `"3"` not a number), as the schema the server was given says. `output_schema` is what goes to
the server: pydantic's schema of the model without its titles and docstring.
"""

from __future__ import annotations

import functools
import re
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, ValidationError

from rag.llm.errors import InvalidLLMOutput

__all__ = ["StructuredOutput", "output_schema", "parse_output"]

M = TypeVar("M", bound=BaseModel)

_FENCE = re.compile(r"^\s*```(?:json)?\s*\n(.*?)\n?\s*```\s*$", re.DOTALL | re.IGNORECASE)
_SHOWN_ERRORS = 3


class StructuredOutput(BaseModel):
    """The base of every structured LLM output."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _without_titles(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {key: _without_titles(value) for key, value in schema.items() if key != "title"}
    if isinstance(schema, list):
        return [_without_titles(item) for item in schema]
    return schema


@functools.cache  # a model's schema never changes: built once, not on every structured call
def output_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of `model` as sent to the server, by alias. Titles and the model's docstring are left out:
    they constrain nothing, and the prompt, not the schema, tells the model what to write."""
    schema: dict[str, Any] = _without_titles(model.model_json_schema(by_alias=True))
    schema.pop("description", None)
    return schema


def _where(location: tuple[int | str, ...]) -> str:
    return "$" + "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in location)


def _problems(exc: ValidationError) -> str:
    errors = exc.errors(include_url=False)
    shown = "; ".join(f"{_where(tuple(e['loc']))}: {e['msg']}" for e in errors[:_SHOWN_ERRORS])
    more = len(errors) - _SHOWN_ERRORS
    return shown + (f" (+{more} more)" if more > 0 else "")


def parse_output(text: str, model: type[M]) -> M:
    """The model's reply `text` as a `model`. Tolerates a Markdown code fence around the JSON (models add one even
    when told not to); anything else that is not exactly one JSON value of the model's shape raises
    InvalidLLMOutput, naming the first problems by their path ("$.intent: ...")."""
    body = text.strip()
    fenced = _FENCE.match(body)
    if fenced:
        body = fenced.group(1).strip()
    if not body:
        raise InvalidLLMOutput("empty output where JSON was expected", text=text)
    try:
        return model.model_validate_json(body)
    except ValidationError as exc:
        if any(error["type"] == "json_invalid" for error in exc.errors()):
            detail = exc.errors()[0]["msg"]
            raise InvalidLLMOutput(f"not valid JSON ({detail})", text=text) from None
        raise InvalidLLMOutput(f"does not match the schema: {_problems(exc)}", text=text) from None
