"""`manage.py sites add --name NAME --origin ORIGIN [--origin ...]` (prints the site key) / `manage.py sites list`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from chatbot.sites.models import Site
from chatbot.sites.origins import origins_parse
from chatbot.sites.services import site_create


class Command(BaseCommand):
    help = "Add or list the websites allowed to embed the assistant."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        add = sub.add_parser("add", help="allow a website; prints its site key")
        add.add_argument("--name", required=True)
        add.add_argument("--origin", action="append", required=True, help="e.g. https://www.example.edu (repeat)")
        add.add_argument("--language", default="zh-hant", choices=("zh-hant", "en"), help="the widget's language")
        add.add_argument("--daily-limit", type=int, default=2000, help="questions per day (0: no limit)")
        add.add_argument("--visitor-limit", type=int, default=50, help="questions per visitor per day (0: no limit)")
        sub.add_parser("list", help="the websites and their keys")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["action"] == "list":
            for site in Site.objects.order_by("name"):
                state = "on" if site.enabled else "off"
                self.stdout.write(f"{site.key}  {site.name} ({state}): {', '.join(site.origins.splitlines())}")
            return
        try:
            origins = origins_parse(options["origin"])
            site = site_create(
                name=options["name"],
                origins=origins,
                default_language=options["language"],
                daily_limit=max(0, options["daily_limit"]),
                visitor_daily_limit=max(0, options["visitor_limit"]),
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(site.key)
