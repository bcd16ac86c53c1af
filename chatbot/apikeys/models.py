"""The API key row: the hash of the secret, never the secret itself."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils.text import format_lazy
from django.utils.translation import gettext_lazy as _

SCOPE_CHAT = "chat"
SCOPE_ADMIN_READ = "admin-read"
SCOPE_ADMIN_WRITE = "admin-write"
SCOPES = (SCOPE_CHAT, SCOPE_ADMIN_READ, SCOPE_ADMIN_WRITE)


class ApiKey(models.Model):
    name = models.CharField(
        _("name"), max_length=100, help_text=_("What the key is for, e.g. 'Open WebUI on intranet'")
    )
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        verbose_name=_("owner"),
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="api_keys",
    )
    prefix = models.CharField(
        _("prefix"), max_length=16, unique=True, editable=False, help_text=_("The key's first characters")
    )
    key_hash = models.CharField(_("key hash"), max_length=64, unique=True, editable=False)
    scopes = models.JSONField(
        _("scopes"), default=list, help_text=format_lazy(_("Any of: {scopes}"), scopes=", ".join(SCOPES))
    )
    rate_limit_per_minute = models.PositiveIntegerField(
        _("rate limit per minute"),
        default=60,
        help_text=_("Requests per minute with this key, over all workers (0: no limit of its own)"),
    )
    expires_at = models.DateTimeField(_("expires at"), null=True, blank=True, help_text=_("Empty: never expires"))
    revoked_at = models.DateTimeField(_("revoked at"), null=True, blank=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    requests = models.PositiveBigIntegerField(_("requests"), default=0, editable=False)
    tokens = models.PositiveBigIntegerField(_("tokens"), default=0, editable=False)
    # Of `tokens`, those we counted because the LLM server reported none (its tokenizer, or an estimate).
    estimated_tokens = models.PositiveBigIntegerField(
        _("estimated tokens"),
        default=0,
        editable=False,
        help_text=_("Of the tokens, those counted or estimated here because the LLM server reported none"),
    )
    last_used_at = models.DateTimeField(_("last used at"), null=True, blank=True, editable=False)

    class Meta:
        verbose_name = _("API key")
        verbose_name_plural = _("API keys")
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def client_id(self) -> str:
        """Who the key's conversations belong to (the exchange records' client id)."""
        return f"apikey:{self.prefix}"
