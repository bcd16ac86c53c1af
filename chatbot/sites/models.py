"""A website staff allow to embed the assistant (`/widget.js` or the iframe), with its own look and limits."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

LANGUAGES = (("zh-hant", "繁體中文"), ("en", "English"))
POSITIONS = (("right", _("bottom right")), ("left", _("bottom left")))


class Site(models.Model):
    name = models.CharField(_("name"), max_length=100)
    key = models.CharField(
        _("site key"), max_length=40, unique=True, editable=False, help_text=_("The data-site value of the script tag")
    )
    origins = models.TextField(
        _("allowed origins"),
        help_text=_("One per line, as the browser sends it: https://www.example.edu (scheme, host and any port)"),
    )
    enabled = models.BooleanField(_("on"), default=True)
    greeting = models.TextField(_("greeting"), blank=True, help_text=_("Empty: the organisation's welcome text"))
    suggestions = models.TextField(
        _("suggested questions"), blank=True, help_text=_("One per line; empty: the organisation's")
    )
    default_language = models.CharField(_("default language"), max_length=8, choices=LANGUAGES, default="zh-hant")
    color = models.CharField(_("colour"), max_length=7, blank=True, help_text=_("#rrggbb; empty: the organisation's"))
    position = models.CharField(_("position"), max_length=8, choices=POSITIONS, default="right")
    daily_limit = models.PositiveIntegerField(
        _("questions per day"), default=2000, help_text=_("From this site, over all workers (0: no limit)")
    )
    visitor_daily_limit = models.PositiveIntegerField(
        _("questions per visitor per day"), default=50, help_text=_("0: no limit")
    )
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("website")
        verbose_name_plural = _("websites")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name
