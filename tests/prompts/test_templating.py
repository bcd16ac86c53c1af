import pytest

from prompts.catalogue import CATALOGUE
from prompts.errors import PromptRenderError, PromptValidationError
from prompts.snapshot import snapshot_build
from prompts.templating import compile_template


def _snapshot(template: str, name: str = "planner-system"):
    return snapshot_build(name=name, version=3, labels=["production"], template=template, config={}, source="database")


def test_render_replaces_each_placeholder_including_spaced_ones():
    snapshot = _snapshot("Reply in {{language}}.\nSummary: {{ summary }}\nAgain: {{language}}")
    assert snapshot.render(language="en", summary="asked about certificates") == (
        "Reply in en.\nSummary: asked about certificates\nAgain: en"
    )


def test_render_turns_none_into_empty_text_and_values_into_str():
    assert _snapshot("[{{summary}}] {{language}}").render(language=7, summary=None) == "[] 7"


def test_render_refuses_a_variable_the_prompt_does_not_allow():
    with pytest.raises(PromptRenderError, match=r"unknown variable\(s\) question"):
        _snapshot("{{language}}").render(language="en", summary="", question="hi")


def test_render_refuses_a_missing_variable_the_template_uses():
    with pytest.raises(PromptRenderError, match=r"missing variable\(s\) summary"):
        _snapshot("{{language}} {{summary}}").render(language="en")


def test_render_accepts_an_allowed_variable_the_template_does_not_use():
    # The pipeline passes every allowed variable; a version that dropped one must still render.
    assert _snapshot("Only {{language}}").render(language="en", summary="unused") == "Only en"


def test_json_braces_are_literal_text():
    template = 'Reply with {"intent": "simple_faq", "extra": {"a": 1}} in {{language}}'
    assert _snapshot(template).render(language="en", summary="") == (
        'Reply with {"intent": "simple_faq", "extra": {"a": 1}} in en'
    )


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("Hello {{language", "never closed"),
        ("Hello {{lang uage}}", "invalid placeholder"),
        ("Hello {{}}", "invalid placeholder"),
        ("Hello } there", "has no opening"),
        ("Hello { there", "never closed"),
        ("{{{language}}}", "invalid placeholder"),
    ],
)
def test_unbalanced_or_malformed_braces_are_refused_with_the_line(template, message):
    with pytest.raises(PromptValidationError, match=message) as caught:
        compile_template(template)
    assert "line 1" in str(caught.value)


def test_template_is_compiled_once_into_parts():
    compiled = compile_template("a {{x}} b {{y}}")
    assert compiled.parts == (("a ", "x"), (" b ", "y"), ("", None))
    assert compiled.variables == frozenset({"x", "y"})


@pytest.mark.parametrize("name", sorted(CATALOGUE))
def test_every_default_renders_with_its_allowed_variables(name):
    spec = CATALOGUE[name]
    snapshot = _snapshot(spec.template, name=name)
    assert snapshot.variables, f"{name} uses no variable"
    text = snapshot.render(**{variable: f"<{variable}>" for variable in spec.variables})
    assert "{{" not in text
    assert all(f"<{variable}>" in text for variable in snapshot.variables)
