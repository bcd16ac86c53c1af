"""What the content team reads: volume, answered rate, satisfaction, hit rates, latency, over a window of days.

Counted over the answers recorded (one per question taken: a refused input, a blocked or a busy request is not
recorded, so not counted), leaving out the background tasks clients run on their own (a title, follow-up
suggestions), which are not questions. "Answered" means the question got an answer: from the passages, the cache,
a curated answer, or degraded; refused, out of scope and errors are not answered. Sync ORM.
"""

from __future__ import annotations

import csv
import io
from collections import Counter
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q
from django.db.models.functions import TruncDate
from django.utils import timezone

from chatbot.gaps import gaps_report
from chatbot.models import Feedback, Message

ANSWERED_OUTCOMES = (
    Message.Outcome.ANSWERED,
    Message.Outcome.CACHED,
    Message.Outcome.CURATED,
    Message.Outcome.DEGRADED,
)
MAX_DAYS = 366


def _rate(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None


def _percentile(sorted_values: list[int], fraction: float) -> int | None:
    if not sorted_values:
        return None
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def questions_in(*, since: datetime, until: datetime) -> Any:
    return Message.objects.filter(
        role=Message.Role.ASSISTANT, background=False, created_at__gte=since, created_at__lt=until
    )


def insights_summary(*, days: int = 30, now: datetime | None = None) -> dict[str, Any]:
    """The figures of the last `days` days (today included), per day and in total."""
    until = now or timezone.now()
    first_day = timezone.localdate(until) - timedelta(days=days - 1)
    since = timezone.make_aware(datetime.combine(first_day, datetime.min.time()))
    answers = questions_in(since=since, until=until)
    outcomes = Counter(dict(answers.values_list("outcome").annotate(n=Count("id")).values_list("outcome", "n")))
    total = sum(outcomes.values())
    answered = sum(outcomes.get(o, 0) for o in ANSWERED_OUTCOMES)
    per_day = {
        row["day"]: row
        for row in answers.annotate(day=TruncDate("created_at"))
        .values("day")
        .annotate(
            questions=Count("id"),
            answered=Count("id", filter=Q(outcome__in=ANSWERED_OUTCOMES)),
            refused=Count("id", filter=Q(outcome=Message.Outcome.REFUSED)),
        )
    }
    thumbs = Feedback.objects.filter(kind=Feedback.Kind.THUMBS, message__in=answers.values("id")).aggregate(
        up=Count("id", filter=Q(score=1)), down=Count("id", filter=Q(score=0))
    )
    latencies = sorted(v for v in answers.values_list("latency_ms", flat=True) if v is not None)
    return {
        "from": first_day.isoformat(),
        "to": timezone.localdate(until).isoformat(),
        "questions": total,
        "answered": answered,
        "answered_rate": _rate(answered, total),
        "outcomes": {outcome: outcomes.get(outcome, 0) for outcome in Message.Outcome.values},
        "cache_hit_rate": _rate(outcomes.get(Message.Outcome.CACHED, 0), total),
        "curated_hit_rate": _rate(outcomes.get(Message.Outcome.CURATED, 0), total),
        "degraded": outcomes.get(Message.Outcome.DEGRADED, 0),
        "satisfaction": {
            "thumbs_up": thumbs["up"],
            "thumbs_down": thumbs["down"],
            "rate": _rate(thumbs["up"], thumbs["up"] + thumbs["down"]),
        },
        "languages": dict(answers.values_list("language").annotate(n=Count("id")).values_list("language", "n")),
        "latency_ms": {"p50": _percentile(latencies, 0.5), "p95": _percentile(latencies, 0.95)},
        "per_day": [_day(first_day + timedelta(days=n), per_day) for n in range(days)],
        "top_gap_topics": [
            {"topic": t["topic"], "count": t["count"], "impact": t["impact"]} for t in gaps_report(limit=5)
        ],
    }


def _day(day: date, rows: dict[Any, dict[str, Any]]) -> dict[str, Any]:
    row = rows.get(day, {})
    return {
        "date": day.isoformat(),
        "questions": row.get("questions", 0),
        "answered": row.get("answered", 0),
        "refused": row.get("refused", 0),
    }


def csv_cell(value: Any) -> str:
    """A cell a spreadsheet shows as text: one starting like a formula (=, +, -, @, tab, CR) gets a leading quote."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


def insights_csv(summary: dict[str, Any]) -> str:
    """The per-day figures and the totals as CSV (UTF-8 with a BOM for Excel), every cell guarded."""
    buffer = io.StringIO()
    buffer.write("\ufeff")
    writer = csv.writer(buffer)
    writer.writerow(["date", "questions", "answered", "refused"])
    for day in summary["per_day"]:
        writer.writerow([csv_cell(day[key]) for key in ("date", "questions", "answered", "refused")])
    writer.writerow([])
    writer.writerow(["figure", "value"])
    for key in ("questions", "answered", "answered_rate", "cache_hit_rate", "curated_hit_rate", "degraded"):
        writer.writerow([csv_cell(key), csv_cell(summary[key])])
    writer.writerow([csv_cell("satisfaction_rate"), csv_cell(summary["satisfaction"]["rate"])])
    for key, value in summary["latency_ms"].items():
        writer.writerow([csv_cell(f"latency_{key}_ms"), csv_cell(value)])
    writer.writerow([])
    writer.writerow(["language", "questions"])
    for language, count in summary["languages"].items():
        writer.writerow([csv_cell(language or "-"), csv_cell(count)])
    writer.writerow([])
    writer.writerow(["content gap", "questions"])
    for topic in summary["top_gap_topics"]:
        writer.writerow([csv_cell(topic["topic"]), csv_cell(topic["count"])])
    return buffer.getvalue()
