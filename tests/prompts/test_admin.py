from typing import Any

import pytest
from django.urls import reverse

from prompts.forms import PromptVersionForm
from prompts.models import Prompt

NAME = "translator-system"
TEMPLATE = "Translate the user's message into {{target_language}}. Reply with the translation only.\n"

pytestmark = [pytest.mark.django_db, pytest.mark.urls("tests.prompts.urls")]


@pytest.fixture(autouse=True)
def english_admin(settings: Any) -> None:
    """The admin speaks the browser's language, zh-hant when it names none: these tests read it in English."""
    settings.LANGUAGE_CODE = "en"


def _v1() -> Prompt:
    return Prompt.objects.get(name=NAME, version=1)


def _labels() -> dict[int, list[str]]:
    return dict(Prompt.objects.filter(name=NAME).values_list("version", "labels"))


def _change_data(template: str, **extra) -> dict:
    return {"template": template, "config": '{"temperature": 0.0}', "note": "simpler", **extra}


def test_changelist_lists_versions_with_labels(admin_client):
    response = admin_client.get(reverse("admin:prompts_prompt_changelist"))
    assert response.status_code == 200
    body = response.content.decode()
    assert "planner-system" in body and NAME in body and "production" in body
    filtered = admin_client.get(reverse("admin:prompts_prompt_changelist"), {"label": "production"})
    assert filtered.status_code == 200 and "8 prompts" in filtered.content.decode()


@pytest.mark.parametrize(
    "url",
    [
        lambda: reverse("admin:prompts_prompt_changelist"),
        lambda: reverse("admin:prompts_prompt_add"),
        lambda: reverse("admin:prompts_prompt_change", args=[_v1().pk]),
        lambda: reverse("admin:prompts_prompt_compare") + f"?name={NAME}",
    ],
)
def test_anonymous_users_are_sent_to_the_login_page(client, url):
    response = client.get(url())
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("admin:login"))


def test_anonymous_users_cannot_move_labels(client):
    response = client.post(reverse("admin:prompts_prompt_label", args=[_v1().pk, "staging"]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("admin:login"))
    assert _labels() == {1: ["production", "latest"]}


def test_add_creates_the_next_version_authored_by_the_request_user(admin_client, admin_user):
    assert admin_client.get(reverse("admin:prompts_prompt_add")).status_code == 200
    prefilled = admin_client.get(reverse("admin:prompts_prompt_add"), {"name": NAME})
    assert "Keep the meaning and tone" in prefilled.content.decode()  # starts from the newest template
    response = admin_client.post(
        reverse("admin:prompts_prompt_add"), {"name": NAME, **_change_data(TEMPLATE), "also_label": ["staging"]}
    )
    assert response.status_code == 302
    created = Prompt.objects.get(name=NAME, version=2)
    assert (created.template, created.author, created.note) == (TEMPLATE, admin_user, "simpler")
    assert _labels() == {1: ["production"], 2: ["staging", "latest"]}


def test_add_refuses_an_unknown_variable_with_a_form_error(admin_client):
    response = admin_client.post(
        reverse("admin:prompts_prompt_add"), {"name": NAME, **_change_data("Into {{target_language}} for {{user}}")}
    )
    assert response.status_code == 200
    assert "{{user}}" in response.context["adminform"].form.errors["template"][0]
    assert Prompt.objects.filter(name=NAME).count() == 1


def test_change_page_offers_compare_and_promotion(admin_client):
    response = admin_client.get(reverse("admin:prompts_prompt_change", args=[_v1().pk]))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Compare with production" in body and "Make v1 staging" in body and "Make v1 production" not in body
    assert "{{target_language}}" in body  # allowed variables shown beside the template


def test_editing_creates_a_new_version_and_leaves_the_row_alone(admin_client, admin_user):
    v1 = _v1()
    response = admin_client.post(reverse("admin:prompts_prompt_change", args=[v1.pk]), _change_data(TEMPLATE))
    assert response.status_code == 302
    unchanged = _v1()
    assert (unchanged.template, unchanged.note, unchanged.config) == (v1.template, v1.note, v1.config)
    created = Prompt.objects.get(name=NAME, version=2)
    assert (created.template, created.author, created.config) == (TEMPLATE, admin_user, {"temperature": 0.0})
    assert _labels() == {1: ["production"], 2: ["latest"]}


def test_saving_an_unchanged_form_creates_no_version(admin_client):
    v1 = _v1()
    data = {"template": v1.template, "config": '{"temperature": 0.0, "max_tokens": 2048}', "note": ""}
    response = admin_client.post(reverse("admin:prompts_prompt_change", args=[v1.pk]), data)
    assert response.status_code == 302
    assert _labels() == {1: ["production", "latest"]}


def test_change_form_refuses_an_unknown_variable():
    form = PromptVersionForm(instance=_v1(), data=_change_data("Into {{language}}"))
    assert not form.is_valid()
    assert "{{language}}" in form.errors["template"][0] and "{{target_language}}" in form.errors["template"][0]
    form = PromptVersionForm(instance=_v1(), data=_change_data("Into {{target_language"))
    assert not form.is_valid() and "unbalanced braces" in form.errors["template"][0]


def test_label_buttons_promote_and_roll_back(admin_client):
    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    v2 = Prompt.objects.get(name=NAME, version=2)
    response = admin_client.post(reverse("admin:prompts_prompt_label", args=[v2.pk, "production"]))
    assert response.status_code == 302
    assert _labels() == {1: [], 2: ["latest", "production"]}
    admin_client.post(reverse("admin:prompts_prompt_label", args=[_v1().pk, "production"]))  # roll back
    assert _labels() == {1: ["production"], 2: ["latest"]}
    assert admin_client.get(reverse("admin:prompts_prompt_label", args=[v2.pk, "production"])).status_code == 405


def test_actions_promote_staging_and_roll_back_production(admin_client):
    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    v2 = Prompt.objects.get(name=NAME, version=2)
    changelist = reverse("admin:prompts_prompt_changelist")
    for action in ("promote_staging", "promote_production"):
        response = admin_client.post(changelist, {"action": action, "_selected_action": [v2.pk]})
        assert response.status_code == 302
    assert _labels() == {1: [], 2: ["latest", "staging", "production"]}
    admin_client.post(changelist, {"action": "rollback_production", "_selected_action": [v2.pk]})
    assert _labels() == {1: ["production"], 2: ["latest", "staging"]}


def test_compare_view_shows_the_diff_of_two_versions(admin_client):
    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    url = reverse("admin:prompts_prompt_compare")
    response = admin_client.get(url, {"name": NAME, "a": 1, "b": 2})
    assert response.status_code == 200
    body = response.content.decode()
    assert '<span class="removed">-- Do not answer, explain' in body
    assert '<span class="added">+Translate the user&#x27;s message into {{target_language}}.' in body
    assert "translator-system: v1 &rarr; v2" in body
    assert "<title>Compare prompt versions" in body  # the admin's own layout
    default = admin_client.get(url, {"name": NAME})  # production against the newest
    assert default.context["version_a"] == 1 and default.context["version_b"] == 2
    assert admin_client.get(url).status_code == 200
    missing = admin_client.get(url, {"name": NAME, "a": 1, "b": 9})
    assert "has no version 9" in missing.content.decode()


def test_compare_action_redirects_to_the_compare_view(admin_client):
    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    pks = list(Prompt.objects.filter(name=NAME).values_list("pk", flat=True))
    response = admin_client.post(
        reverse("admin:prompts_prompt_changelist"), {"action": "compare_selected", "_selected_action": pks}
    )
    assert response.status_code == 302
    assert response["Location"] == reverse("admin:prompts_prompt_compare") + f"?name={NAME}&a=1&b=2"


@pytest.mark.parametrize(
    ("language", "saved", "django_words"),
    [
        ("en", f"Saved as {NAME} v2; v1 is unchanged. Labels of the new version: latest.", "changed successfully"),
        ("zh-hant", f"已另存為 {NAME} v2；v1 保持不變。新版本的標籤：latest。", "成功修改"),
    ],
)
def test_the_saved_message_speaks_the_admin_language(admin_client, language, saved, django_words):
    url = reverse("admin:prompts_prompt_change", args=[_v1().pk])
    response = admin_client.post(url, _change_data(TEMPLATE), HTTP_ACCEPT_LANGUAGE=language, follow=True)
    shown = [str(message) for message in response.context["messages"]]
    assert saved in shown
    assert any(django_words in message for message in shown)  # Django's own message, in the same language


def test_with_publish_tests_production_needs_a_run_or_a_recorded_reason(admin_client):
    from rag.workflows.models import PromptCheck, PublishTest

    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    v2 = Prompt.objects.get(name=NAME, version=2)
    label_url = reverse("admin:prompts_prompt_label", args=[v2.pk, "production"])

    refused = admin_client.post(label_url, follow=True)
    assert refused.redirect_chain[-1][0].endswith("?blocked=production")
    body = refused.content.decode()
    assert "v2 has not been run against the publish tests" in body
    assert 'id="publish-override"' in body and 'name="override_reason"' in body
    assert _labels() == {1: ["production"], 2: ["latest"]}

    admin_client.post(label_url, {"override_reason": "wording only"})
    assert _labels() == {1: [], 2: ["latest", "production"]}
    check = PromptCheck.objects.get(prompt_name=NAME, prompt_version=2)
    assert (check.override_reason, check.overridden_by) == ("wording only", "admin")
    # no override form without a refusal to override
    assert (
        'id="publish-override"'
        not in admin_client.get(reverse("admin:prompts_prompt_change", args=[v2.pk])).content.decode()
    )


def test_with_publish_tests_a_new_version_saved_as_production_is_saved_but_not_published(admin_client):
    from rag.workflows.models import PublishTest

    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    response = admin_client.post(
        reverse("admin:prompts_prompt_add"),
        {"name": NAME, **_change_data(TEMPLATE), "also_label": ["production", "staging"]},
        follow=True,
    )
    assert "Not made production: translator-system v2 has not been run" in response.content.decode()
    assert _labels() == {1: ["production"], 2: ["staging", "latest"]}


def test_with_publish_tests_labelling_an_unchanged_version_production_is_refused_with_a_message(admin_client):
    from rag.workflows.models import PublishTest

    admin_client.post(reverse("admin:prompts_prompt_change", args=[_v1().pk]), _change_data(TEMPLATE))
    PublishTest.objects.create(question="How do I reset my password?", must_cite=["en-password-reset"])
    v2 = Prompt.objects.get(name=NAME, version=2)
    data = {"template": v2.template, "config": '{"temperature": 0.0}', "note": "", "also_label": ["production"]}
    response = admin_client.post(reverse("admin:prompts_prompt_change", args=[v2.pk]), data, follow=True)
    assert response.status_code == 200
    assert "Not made production: translator-system v2 has not been run" in response.content.decode()
    assert _labels() == {1: ["production"], 2: ["latest"]}
