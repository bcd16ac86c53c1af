"""`manage.py branding show` / `manage.py branding set --name ... --tagline ... --contact ... --scope ...`.

The organisation's name and words, as the admin's "Name and words" page edits them. A text set without its
English twin (`--name` without `--name-en`) is used for English replies too. Every worker serves the change
within a second.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.branding.selectors import organisation_read
from rag.branding.services import branding_set

# option -> Branding field
OPTIONS = {
    "name": "name",
    "tagline": "tagline",
    "welcome": "welcome",
    "contact": "contact",
    "scope": "out_of_scope",
    "logo": "logo_url",
    "color": "color",
    "privacy": "privacy_url",
}
TWINNED = ("name", "tagline", "welcome", "contact", "scope")


class Command(BaseCommand):
    help = "Show or set the organisation's name and words (assistant name, tagline, contact, out-of-scope text...)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("action", choices=("show", "set"))
        for option, field in OPTIONS.items():
            parser.add_argument(f"--{option}", dest=field, help=f"the {field.replace('_', ' ')}")
        for option in TWINNED:
            field = OPTIONS[option] + "_en"
            parser.add_argument(
                f"--{option}-en", dest=field, help=f"the {OPTIONS[option].replace('_', ' ')} in English"
            )
        parser.add_argument(
            "--suggest", dest="suggestions", action="append", help="a suggested question (repeat for more)"
        )
        parser.add_argument(
            "--suggest-en", dest="suggestions_en", action="append", help="an English suggested question"
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "set":
            values = {
                field: value
                for field in (*OPTIONS.values(), *(OPTIONS[o] + "_en" for o in TWINNED))
                if (value := options.get(field)) is not None
            }
            for field in ("suggestions", "suggestions_en"):
                if options.get(field):
                    values[field] = "\n".join(q.strip() for q in options[field] if q.strip())
            if not values:
                raise CommandError("nothing to set: give at least one of --name, --tagline, --contact, --scope ...")
            try:
                branding_set(values=values)
            except ValueError as exc:
                raise CommandError(str(exc)) from exc
            self.stdout.write(self.style.SUCCESS(f"Set {', '.join(sorted(values))}."))
        organisation = organisation_read()
        for language, texts in (("zh", organisation.zh), ("en", organisation.en)):
            self.stdout.write(f"[{language}] name: {texts.name}")
            self.stdout.write(f"[{language}] tagline: {texts.tagline}")
            self.stdout.write(f"[{language}] contact: {texts.contact}")
            self.stdout.write(f"[{language}] out of scope: {texts.out_of_scope}")
            self.stdout.write(f"[{language}] suggested: {' | '.join(texts.suggestions)}")
