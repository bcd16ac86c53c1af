"""Purge the conversations visitors deleted more than CONVERSATION_RETENTION_DAYS ago (every worker also does it
hourly; see chatbot.retention).

    manage.py purge_conversations [--days N]
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandParser

from chatbot.retention import conversations_purge


class Command(BaseCommand):
    help = "Delete conversations their visitors deleted more than CONVERSATION_RETENTION_DAYS ago."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--days", type=int, default=None, help="override CONVERSATION_RETENTION_DAYS")

    def handle(self, *args: Any, **options: Any) -> None:
        days = settings.CONVERSATION_RETENTION_DAYS if options["days"] is None else options["days"]
        if days < 0:
            self.stderr.write("--days must be 0 or more")
            raise SystemExit(2)
        purged = conversations_purge(retention_days=days)
        self.stdout.write(f"purged {purged} conversation(s) deleted by their visitors more than {days} day(s) ago")
