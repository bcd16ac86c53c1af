"""The admin's prompt form: the fields of a new version, checked by the same rules as the services."""

from __future__ import annotations

from typing import Any

from django import forms
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from prompts.catalogue import CATALOGUE, PRODUCTION, STAGING
from prompts.errors import PromptValidationError
from prompts.models import Prompt
from prompts.validation import validate_config, validate_template

ASSIGNABLE_LABELS = (PRODUCTION, STAGING)


def _variables_help(name: str) -> str:
    return ", ".join("{{%s}}" % v for v in sorted(CATALOGUE[name].variables))  # noqa: UP031 - literal braces


class PromptVersionForm(forms.ModelForm):
    """Saving never modifies a row: `PromptAdmin.save_model` turns the cleaned data into a new version."""

    name = forms.ChoiceField(choices=[(name, name) for name in sorted(CATALOGUE)])
    also_label = forms.MultipleChoiceField(
        label=_("Labels for the new version"),
        choices=[(label, label) for label in ASSIGNABLE_LABELS],
        required=False,
        widget=forms.CheckboxSelectMultiple,
        help_text=_("Moved from the version that holds them now. 'latest' follows the newest version by itself."),
    )

    class Meta:
        model = Prompt
        fields = ["name", "template", "config", "note"]
        widgets = {"template": forms.Textarea(attrs={"rows": 28, "cols": 110, "spellcheck": "false"})}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Remembered before validation copies the submitted values onto the instance.
        self._edited = (self.instance.template, self.instance.config) if self.instance.pk else None
        template_field = self.fields.get("template")
        if isinstance(template_field, forms.CharField):
            template_field.strip = False  # whitespace is part of a prompt; so is its final newline
        if self.instance.pk:
            self.fields.pop("name", None)  # a version's name is fixed; it is shown read-only
            self.initial["note"] = ""  # the note describes the new version, not the edited one
            if "template" in self.fields:
                self.fields["template"].help_text = gettext("Allowed variables: %(variables)s.") % {
                    "variables": _variables_help(self.instance.name)
                }
        elif "template" in self.fields:
            self.fields["template"].help_text = gettext("Allowed variables: %(variables)s.") % {
                "variables": "; ".join(f"{name}: {_variables_help(name)}" for name in sorted(CATALOGUE))
            }

    def prompt_name(self) -> str | None:
        return self.instance.name if self.instance.pk else self.cleaned_data.get("name")

    def clean_template(self) -> str:
        return self.cleaned_data["template"].replace("\r\n", "\n")  # browsers submit CRLF line ends

    def clean(self) -> dict[str, Any]:
        super().clean()
        cleaned = self.cleaned_data
        name, template = self.prompt_name(), cleaned.get("template")
        if name and template is not None:
            try:
                validate_template(name=name, template=template)
            except PromptValidationError as exc:
                self.add_error("template", exc.message)
        if "config" in cleaned:
            try:
                cleaned["config"] = validate_config(cleaned["config"])
            except PromptValidationError as exc:
                self.add_error("config", exc.message)
        return cleaned

    def changes_version(self) -> bool:
        """Whether saving needs a new version (the template or the config differ from the edited one)."""
        if self._edited is None:
            return True
        return (self.cleaned_data.get("template"), self.cleaned_data.get("config")) != self._edited
