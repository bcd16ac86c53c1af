"""The organisation's name and words (one row), and what the demo put in place (one row)."""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _

from rag.branding.texts import DEFAULT_EN, DEFAULT_ZH


class Branding(models.Model):
    """Singleton (pk 1). Every text has an English twin used for English replies; an empty twin repeats the
    first text. Edited in the admin or with `manage.py branding set`; workers serve it from memory."""

    name = models.CharField(_("assistant name"), max_length=100, default=DEFAULT_ZH.name)
    name_en = models.CharField(_("assistant name (English)"), max_length=100, blank=True, default=DEFAULT_EN.name)
    tagline = models.CharField(_("tagline"), max_length=200, blank=True, default=DEFAULT_ZH.tagline)
    tagline_en = models.CharField(_("tagline (English)"), max_length=200, blank=True, default=DEFAULT_EN.tagline)
    welcome = models.TextField(_("welcome text"), blank=True, default=DEFAULT_ZH.welcome)
    welcome_en = models.TextField(_("welcome text (English)"), blank=True, default=DEFAULT_EN.welcome)
    suggestions = models.TextField(
        _("suggested questions"), blank=True, default="", help_text=_("One question per line")
    )
    suggestions_en = models.TextField(
        _("suggested questions (English)"), blank=True, default="", help_text=_("One question per line")
    )
    contact = models.TextField(
        _("contact text"),
        default=DEFAULT_ZH.contact,
        help_text=_("How to reach a person; ends every reply that cannot answer"),
    )
    contact_en = models.TextField(_("contact text (English)"), blank=True, default=DEFAULT_EN.contact)
    out_of_scope = models.TextField(
        _("out-of-scope text"),
        default=DEFAULT_ZH.out_of_scope,
        help_text=_("The reply to a question outside what the assistant covers"),
    )
    out_of_scope_en = models.TextField(_("out-of-scope text (English)"), blank=True, default=DEFAULT_EN.out_of_scope)
    logo_url = models.CharField(
        _("logo URL"), max_length=500, blank=True, help_text=_("An https:// or site-relative image; empty: an icon")
    )
    color = models.CharField(_("colour"), max_length=7, default="#0b5cab", help_text=_("#rrggbb"))
    privacy_url = models.CharField(_("privacy notice link"), max_length=500, blank=True)
    version = models.PositiveIntegerField(_("version"), default=0, editable=False)
    updated_at = models.DateTimeField(_("updated at"), auto_now=True)

    class Meta:
        verbose_name = _("name and words")
        verbose_name_plural = _("name and words")

    def __str__(self) -> str:
        return self.name


class DemoState(models.Model):
    """Singleton (pk 1): whether the demo organisation is loaded, and the files it copied into the corpus.
    Its absence means the demo was never loaded here (`demo load --if-new` loads it once, on a first start)."""

    loaded = models.BooleanField(_("loaded"), default=False)
    files = models.JSONField(_("files"), default=list, blank=True, help_text=_("paths inside CORPUS_DIR"))
    changed_at = models.DateTimeField(_("changed at"), auto_now=True)

    class Meta:
        verbose_name = _("demo")
        verbose_name_plural = _("demo")

    def __str__(self) -> str:
        return "loaded" if self.loaded else "not loaded"
