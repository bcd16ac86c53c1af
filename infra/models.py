"""The change feed's table: one generation per topic, the truth a worker reads when it may have missed a notice."""

from __future__ import annotations

from django.db import models

__all__ = ["ChangeGeneration"]


class ChangeGeneration(models.Model):
    """How many times `topic` changed (infra.changefeed bumps it after each committed change)."""

    topic = models.CharField(max_length=100, primary_key=True)
    generation = models.BigIntegerField(default=0)
    changed_at = models.DateTimeField(auto_now=True)

    class Meta:
        verbose_name = "change generation"

    def __str__(self) -> str:
        return f"{self.topic} #{self.generation}"
