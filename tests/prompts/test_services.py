import pytest

from infra.models import ChangeGeneration
from prompts.catalogue import CATALOGUE
from prompts.errors import PromptNotFoundError, PromptValidationError
from prompts.memory import PROMPTS_TOPIC
from prompts.models import Prompt
from prompts.services import prompt_diff, prompt_label_move, prompt_rollback, prompt_version_create

NAME = "planner-system"
pytestmark = pytest.mark.django_db


def _labels() -> dict[int, list[str]]:
    return dict(Prompt.objects.filter(name=NAME).values_list("version", "labels"))


def _new_version(text: str = "Classify. Language: {{language}}", **kwargs):
    return prompt_version_create(name=NAME, template=text, config={"temperature": 0.0}, **kwargs)


def test_data_migration_seeded_every_catalogue_prompt_as_production():
    rows = {row.name: row for row in Prompt.objects.all()}
    assert set(rows) == set(CATALOGUE)
    for name, spec in CATALOGUE.items():
        assert rows[name].version == 1
        assert rows[name].labels == ["production", "latest"]
        assert rows[name].template == spec.template
        assert rows[name].config == dict(spec.config)


def test_new_version_increments_and_takes_latest(admin_user):
    created = _new_version(author=admin_user, note="shorter rules")
    assert (created.version, created.author, created.note) == (2, admin_user, "shorter rules")
    assert _labels() == {1: ["production"], 2: ["latest"]}
    assert _new_version().version == 3
    assert _labels() == {1: ["production"], 2: [], 3: ["latest"]}


def test_new_version_can_take_production_at_once():
    _new_version(labels=["production"])
    assert _labels() == {1: [], 2: ["production", "latest"]}


def test_promote_then_roll_back_moves_production():
    _new_version()
    _new_version()
    prompt_label_move(name=NAME, label="production", version=3)
    assert _labels() == {1: [], 2: [], 3: ["latest", "production"]}
    rolled = prompt_rollback(name=NAME)
    assert rolled.version == 2
    assert _labels() == {1: [], 2: ["production"], 3: ["latest"]}
    prompt_label_move(name=NAME, label="production", version=1)  # roll back to a chosen version
    assert _labels() == {1: ["production"], 2: [], 3: ["latest"]}


def test_staging_is_independent_of_production():
    _new_version()
    prompt_label_move(name=NAME, label="staging", version=2)
    assert _labels() == {1: ["production"], 2: ["latest", "staging"]}


def test_rollback_from_the_first_version_is_refused():
    with pytest.raises(PromptValidationError, match="nothing to roll back"):
        prompt_rollback(name=NAME)


def test_label_move_refuses_latest_and_missing_versions():
    with pytest.raises(PromptValidationError, match="latest"):
        prompt_label_move(name=NAME, label="latest", version=1)
    with pytest.raises(PromptNotFoundError, match="no version 9"):
        prompt_label_move(name=NAME, label="production", version=9)
    with pytest.raises(PromptValidationError, match="invalid label"):
        prompt_label_move(name=NAME, label="Prod uction", version=1)


def test_unknown_variable_is_refused_and_named():
    with pytest.raises(PromptValidationError) as caught:
        _new_version("Answer {{question}} in {{language}} for {{user_id}}")
    assert caught.value.variables == ("question", "user_id")
    assert "{{question}}" in str(caught.value) and "{{user_id}}" in str(caught.value)
    assert (
        "allowed: {{language}}, {{organisation}}, {{organisation_contact}}, {{organisation_scope}}, {{summary}}"
        in str(caught.value)
    )
    assert Prompt.objects.filter(name=NAME).count() == 1


def test_unbalanced_braces_unknown_names_and_bad_config_are_refused():
    with pytest.raises(PromptValidationError, match="unbalanced braces"):
        _new_version("Language: {{language")
    with pytest.raises(PromptValidationError, match="unknown prompt") as caught:
        prompt_version_create(name="no-such-prompt", template="x", config={})
    assert caught.value.field == "name"
    with pytest.raises(PromptValidationError, match="temperature"):
        prompt_version_create(name=NAME, template="{{language}}", config={"temperature": 9})
    with pytest.raises(PromptValidationError, match="JSON object"):
        prompt_version_create(name=NAME, template="{{language}}", config=["x"])  # type: ignore[arg-type]
    assert Prompt.objects.filter(name=NAME).count() == 1


def test_diff_shows_template_and_config_changes():
    original = Prompt.objects.get(name=NAME, version=1)
    edited = original.template.replace("choose simple_faq.", "choose out_of_scope.")
    prompt_version_create(name=NAME, template=edited, config={**original.config, "temperature": 0.3})
    diff = prompt_diff(name=NAME, version_a=1, version_b=2)
    assert diff.startswith(f"--- {NAME} v1 template\n+++ {NAME} v2 template\n")
    assert "\n-- When unsure between simple_faq and out_of_scope, choose simple_faq.\n" in diff
    assert "\n+- When unsure between simple_faq and out_of_scope, choose out_of_scope.\n" in diff
    assert f"--- {NAME} v1 config" in diff and '+  "temperature": 0.3' in diff
    assert prompt_diff(name=NAME, version_a=1, version_b=1) == ""
    with pytest.raises(PromptNotFoundError):
        prompt_diff(name=NAME, version_a=1, version_b=5)


def published() -> int:
    return ChangeGeneration.objects.filter(topic=PROMPTS_TOPIC).values_list("generation", flat=True).first() or 0


def test_every_change_is_published_on_the_change_feed_after_commit(django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        _new_version()
    assert len(callbacks) == 2 and published() == 0  # nothing before commit (this worker's drop, the publish)
    for callback in callbacks:
        callback()
    assert published() == 1
    with django_capture_on_commit_callbacks(execute=True):
        prompt_label_move(name=NAME, label="production", version=2)
    assert published() == 2
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        prompt_label_move(name=NAME, label="production", version=2)  # already there: no change, no publish
    assert callbacks == [] and published() == 2
