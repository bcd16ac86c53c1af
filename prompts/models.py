from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _


class Prompt(models.Model):
    """One immutable version of a named prompt. Edits create a new version (see `prompts.services`).

    A label (production, staging, latest...) is held by at most one version of a name at a time; the services
    move labels under a row lock, since a JSON list cannot carry a unique constraint portably.
    """

    name = models.SlugField(_("name"), max_length=100, help_text=_("Catalogue name, e.g. planner-system."))
    version = models.PositiveIntegerField(_("version"))
    labels = models.JSONField(_("labels"), default=list, blank=True, help_text=_('e.g. ["production", "latest"]'))
    template = models.TextField(_("template"), help_text=_("Text with {{variable}} placeholders."))
    config = models.JSONField(
        _("config"), default=dict, blank=True, help_text=_("LLM call hints: model, temperature, max_tokens.")
    )
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("author"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
    )
    note = models.CharField(
        _("note"), max_length=500, blank=True, help_text=_("What changed and why (commit message).")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("prompt")
        verbose_name_plural = _("prompts")
        ordering = ["name", "-version"]
        constraints = [
            models.UniqueConstraint(fields=["name", "version"], name="prompts_prompt_name_version_unique"),
            models.CheckConstraint(condition=Q(version__gte=1), name="prompts_prompt_version_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} v{self.version}"
