"""`{{variable}}` templates: parsed once into literal/variable parts, rendered by a single join.

The syntax is Langfuse's (`{{name}}`, spaces inside the braces allowed), so the same text works in either
source. Single braces are literal text (prompts ask for JSON such as `{"intent": "..."}`), but they must
balance; a `{{` without its `}}`, or a placeholder that is not an identifier, is refused.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from prompts.errors import PromptRenderError, PromptValidationError

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


@dataclass(frozen=True, slots=True)
class CompiledTemplate:
    """`parts` alternate literal text and a variable name (None after the last literal)."""

    parts: tuple[tuple[str, str | None], ...]
    variables: frozenset[str]

    def render(self, values: dict[str, object]) -> str:
        out: list[str] = []
        for literal, variable in self.parts:
            out.append(literal)
            if variable is not None:
                value = values[variable]
                out.append("" if value is None else str(value))
        return "".join(out)


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def compile_template(text: str) -> CompiledTemplate:
    """Parse `text`; raise PromptValidationError naming the first syntax problem and its line."""
    parts: list[tuple[str, str | None]] = []
    variables: set[str] = set()
    literal_start = 0
    open_braces: list[int] = []  # positions of single `{` not yet closed
    i, n = 0, len(text)
    while i < n:
        if text.startswith("{{", i):
            end = text.find("}}", i + 2)
            if end == -1:
                raise PromptValidationError(f"unbalanced braces: '{{{{' on line {_line_of(text, i)} is never closed")
            name = text[i + 2 : end].strip()
            if not _IDENTIFIER.match(name):
                shown = text[i : end + 2]
                raise PromptValidationError(
                    f"invalid placeholder {shown!r} on line {_line_of(text, i)}: "
                    "write {{name}} with letters, digits and underscores"
                )
            parts.append((text[literal_start:i], name))
            variables.add(name)
            i = end + 2
            literal_start = i
            continue
        char = text[i]
        if char == "{":
            open_braces.append(i)
        elif char == "}":
            if not open_braces:
                raise PromptValidationError(f"unbalanced braces: '}}' on line {_line_of(text, i)} has no opening '{{'")
            open_braces.pop()
        i += 1
    if open_braces:
        raise PromptValidationError(f"unbalanced braces: '{{' on line {_line_of(text, open_braces[0])} is never closed")
    parts.append((text[literal_start:], None))
    return CompiledTemplate(parts=tuple(parts), variables=frozenset(variables))


def check_render_variables(
    *, label: str, used: frozenset[str], allowed: frozenset[str], given: dict[str, object]
) -> None:
    """Refuse variables the prompt does not allow and variables its template uses but were not given."""
    unknown = sorted(set(given) - allowed)
    if unknown:
        raise PromptRenderError(
            f"{label}: unknown variable(s) {', '.join(unknown)}; allowed: {', '.join(sorted(allowed)) or '(none)'}"
        )
    missing = sorted(used - set(given))
    if missing:
        raise PromptRenderError(f"{label}: missing variable(s) {', '.join(missing)}")
