"""`manage.py apikey create|list|revoke`: API keys for the OpenAI-compatible API and the concurrency APIs.

    manage.py apikey create --name "Open WebUI" [--owner alice] [--scopes chat,admin-read] [--rate-limit 60]
                            [--expires-in-days 90 | --expires 2027-01-31T00:00:00+00:00]
    manage.py apikey list [--active]
    manage.py apikey revoke hc-AbCd1234

`create` prints the key once; only its hash is stored.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from chatbot.apikeys.selectors import api_key_list
from chatbot.apikeys.services import api_key_create, api_key_revoke


class Command(BaseCommand):
    help = "Create, list and revoke API keys (OpenAI-compatible API, concurrency APIs)."

    def add_arguments(self, parser: CommandParser) -> None:
        actions = parser.add_subparsers(dest="action", required=True)
        create = actions.add_parser("create", help="make a key and print it (shown this once)")
        create.add_argument("--name", required=True, help="what the key is for")
        create.add_argument("--owner", default="", help="username of the key's owner")
        create.add_argument("--scopes", default="chat", help="comma-separated: chat, admin-read, admin-write")
        create.add_argument("--rate-limit", type=int, default=60, help="requests per minute (0: no limit)")
        expiry = create.add_mutually_exclusive_group()
        expiry.add_argument("--expires-in-days", type=float, default=None)
        expiry.add_argument("--expires", default="", help="ISO 8601 date and time, with its time zone")
        listing = actions.add_parser("list", help="every key with its usage")
        listing.add_argument("--active", action="store_true", help="leave revoked keys out")
        revoke = actions.add_parser("revoke", help="stop a key at once, on every worker")
        revoke.add_argument("prefix", help="the key's prefix, as `list` shows it (hc-xxxxxxxx)")

    def handle(self, *args: Any, **options: Any) -> None:
        action = options["action"]
        if action == "create":
            self._create(options)
        elif action == "list":
            self._list(active=options["active"])
        else:
            try:
                key = api_key_revoke(prefix=options["prefix"])
            except LookupError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"revoked {key.prefix} ({key.name}) at {key.revoked_at:%Y-%m-%d %H:%M:%S %Z}")

    def _create(self, options: dict[str, Any]) -> None:
        owner = None
        if options["owner"]:
            owner = get_user_model().objects.filter(username=options["owner"]).first()
            if owner is None:
                raise CommandError(f"no user named {options['owner']!r}")
        try:
            created = api_key_create(
                name=options["name"],
                owner=owner,
                scopes=options["scopes"].split(","),
                rate_limit_per_minute=options["rate_limit"],
                expires_at=self._expiry(options),
            )
        except ValueError as exc:
            raise CommandError(str(exc)) from None
        key = created.key
        self.stderr.write(f"created {key.prefix} ({key.name}), scopes {','.join(key.scopes)}; the key (shown once):")
        self.stdout.write(created.secret)

    @staticmethod
    def _expiry(options: dict[str, Any]) -> datetime | None:
        if options["expires_in_days"] is not None:
            return timezone.now() + timedelta(days=options["expires_in_days"])
        if not options["expires"]:
            return None
        moment = parse_datetime(options["expires"])
        if moment is None or timezone.is_naive(moment):
            raise CommandError(
                f"--expires must be an ISO 8601 date and time with a time zone, not {options['expires']!r}"
            )
        return moment

    def _list(self, *, active: bool) -> None:
        header = f"{'prefix':<12} {'name':<24} {'scopes':<28} {'rpm':>5} {'requests':>9} {'tokens':>10}  status"
        self.stdout.write(header)
        for key in api_key_list(include_revoked=not active):
            if key.revoked_at is not None:
                status = f"revoked {key.revoked_at:%Y-%m-%d}"
            elif key.expires_at is not None and key.expires_at <= timezone.now():
                status = f"expired {key.expires_at:%Y-%m-%d}"
            else:
                used = f"last used {key.last_used_at:%Y-%m-%d %H:%M}" if key.last_used_at else "never used"
                status = f"active, {used}"
            self.stdout.write(
                f"{key.prefix:<12} {key.name[:24]:<24} {','.join(key.scopes):<28} {key.rate_limit_per_minute:>5} "
                f"{key.requests:>9} {key.tokens:>10}  {status}"
                + (f" ({key.estimated_tokens} tokens estimated)" if key.estimated_tokens else "")
            )
