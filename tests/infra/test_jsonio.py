"""The one way a JSON request body is read: depth, lone surrogates and NUL refused, naming the field."""

from __future__ import annotations

import pytest

from infra.jsonio import MAX_DEPTH, JsonInputError, json_decode


@pytest.mark.parametrize(
    ("raw", "field", "why"),
    [
        (b'{"a": {"b": ["ok", "x\\ud800y"]}}', "a.b[1]", "surrogate"),
        (b'{"a": "x\\u0000y"}', "a", "NUL"),
        (b'{"x\\udfff": 1}', "body", "surrogate"),
        (b"[" * 100_000 + b"]" * 100_000, "body", "nested deeper"),
        (b"[" * (MAX_DEPTH + 2) + b"]" * (MAX_DEPTH + 2), "body", "nested deeper"),
        (b"\xff\xfe{}", "body", "UTF-8"),
        (b"{", "body", "not valid JSON"),
    ],
)
def test_bad_bodies_are_refused_naming_the_field(raw: bytes, field: str, why: str) -> None:
    with pytest.raises(JsonInputError) as refused:
        json_decode(raw)
    assert refused.value.field == field and why in refused.value.message and refused.value.status == 400


def test_a_body_past_the_limit_is_413_and_good_bodies_pass() -> None:
    with pytest.raises(JsonInputError) as refused:
        json_decode(b"[1, 2]", max_bytes=5)
    assert refused.value.status == 413
    assert json_decode('{"q": "如何重設密碼？ ok"}') == {"q": "如何重設密碼？ ok"}
    assert json_decode(b"  ", empty={}) == {}
    nested = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert json_decode(nested) is not None
