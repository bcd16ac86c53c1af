"""The API key row: the hash of the secret, never the secret itself."""

from __future__ import annotations

from django.conf import settings
from django.db import models

SCOPE_CHAT = "chat"
SCOPE_ADMIN_READ = "admin-read"
SCOPE_ADMIN_WRITE = "admin-write"
SCOPES = (SCOPE_CHAT, SCOPE_ADMIN_READ, SCOPE_ADMIN_WRITE)


class ApiKey(models.Model):
    name = models.CharField(max_length=100, help_text="What the key is for, e.g. 'Open WebUI on intranet'")
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys"
    )
    prefix = models.CharField(max_length=16, unique=True, editable=False, help_text="The key's first characters")
    key_hash = models.CharField(max_length=64, unique=True, editable=False)
    scopes = models.JSONField(default=list, help_text=f"Any of: {', '.join(SCOPES)}")
    rate_limit_per_minute = models.PositiveIntegerField(
        default=60, help_text="Requests per minute with this key, over all workers (0: no limit of its own)"
    )
    expires_at = models.DateTimeField(null=True, blank=True, help_text="Empty: never expires")
    revoked_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)
    requests = models.PositiveBigIntegerField(default=0, editable=False)
    tokens = models.PositiveBigIntegerField(default=0, editable=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)

    class Meta:
        verbose_name = "API key"
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def client_id(self) -> str:
        """Who the key's conversations belong to (the exchange records' client id)."""
        return f"apikey:{self.prefix}"
