"""Curated answers from the command line.

    manage.py curated add --question Q --answer A [--language L] [--url URL] [--title T] [--topic UUID]
    manage.py curated list
    manage.py curated delete ID

Every worker serves a change within a second (rag.curated.index, kept in step through the change feed by rag.replica).
"""

from __future__ import annotations

import uuid
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from rag.curated.models import CuratedAnswer
from rag.curated.services import CuratedInputError, curated_answer_create, curated_answers_delete


class Command(BaseCommand):
    help = "Add, list or delete curated answers (staff-approved answers served before anything generated)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        add = actions.add_parser("add", help="approve an answer for a question")
        add.add_argument("--question", required=True)
        add.add_argument("--answer", required=True)
        add.add_argument("--language", default="zh-hant", help="zh-hant (default), zh-hans or en")
        add.add_argument("--url", default="", help="the page the answer comes from, shown as its source")
        add.add_argument("--title", default="", help="the source's title (default: the URL)")
        add.add_argument("--topic", default="", help="add a language variant of this topic's answer")
        actions.add_parser("list", help="list the curated answers")
        delete = actions.add_parser("delete", help="delete a curated answer")
        delete.add_argument("id")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "add":
            self._add(options)
        elif action == "list":
            for row in CuratedAnswer.objects.order_by("topic", "language"):
                self.stdout.write(f"{row.pk}  topic={row.topic}  [{row.language}]  hits={row.hits}  {row.question}")
        else:
            try:
                curated_id = uuid.UUID(options["id"])
            except ValueError:
                raise CommandError(f"not a curated answer id: {options['id']!r}") from None
            if not curated_answers_delete(ids=[curated_id]):
                raise CommandError(f"no curated answer {curated_id}")
            self.stdout.write(f"deleted {curated_id}")

    def _add(self, options: dict[str, Any]) -> None:
        topic = None
        if options["topic"]:
            try:
                topic = uuid.UUID(options["topic"])
            except ValueError:
                raise CommandError(f"--topic is not a topic id: {options['topic']!r}") from None
        try:
            curated = curated_answer_create(
                question=options["question"],
                answer=options["answer"],
                language=options["language"],
                url=options["url"],
                title=options["title"],
                topic=topic,
                approved_by="manage.py curated",
            )
        except CuratedInputError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(f"added {curated.pk} (topic {curated.topic}, {curated.language})")
