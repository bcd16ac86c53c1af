"""No function of the project is longer than one screen (80 lines), so each can be read whole.

Counted from the `def` line to the function's last line, nested functions inside it included. Generated
migrations are not ours to shorten. A long procedure is split into named steps (as `validate_workflow` and the
index job's `_execute` and `reindex` were).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("chatbot", "concurrency", "prompts", "rag", "infra", "devtools")
MAX_LINES = 80


def long_functions(path: Path, limit: int = MAX_LINES) -> list[str]:
    """`path:line name (N lines)` for every function in `path` longer than `limit` lines."""
    found = []
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{shown}:{node.lineno} {node.name} ({length} lines)")
    return found


def sources() -> list[Path]:
    return sorted(
        path for package in PACKAGES for path in (ROOT / package).rglob("*.py") if "migrations" not in path.parts
    )


def test_no_function_is_longer_than_one_screen() -> None:
    too_long = [found for path in sources() for found in long_functions(path)]
    assert not too_long, "split these into steps of at most 80 lines:\n" + "\n".join(too_long)


def test_the_check_sees_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_LINES))
    sample = tmp_path / "sample.py"
    sample.write_text(f"def short():\n    return 1\n\n\nasync def long():\n{body}\n", encoding="utf-8")

    assert [line.split(" ", 1)[1] for line in long_functions(sample)] == [f"long ({MAX_LINES + 1} lines)"]
