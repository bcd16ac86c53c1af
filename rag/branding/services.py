"""Writes: the organisation's words, and loading or removing the demo organisation.

The demo is data like any organisation's: its documents are copied from the bundled folder
(`rag/corpus/demo`) into CORPUS_DIR and indexed by an ordinary index job, its words replace the Branding row.
Removing it deletes exactly the files it copied (then the index job that drops their documents) and puts the
neutral words back, so nothing of it is left.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from django.conf import settings
from django.db import transaction

from rag.branding.memory import generation_bump
from rag.branding.models import Branding, DemoState
from rag.documents.models import IndexJob
from rag.documents.services import index_job_create

BRANDING_FIELDS = (
    "name", "name_en", "tagline", "tagline_en", "welcome", "welcome_en", "suggestions", "suggestions_en",
    "contact", "contact_en", "out_of_scope", "out_of_scope_en", "logo_url", "color", "privacy_url",
)  # fmt: skip
# A primary text set without its English twin clears the twin, so English replies repeat the new text rather
# than the old English one.
_TWINS = {name: f"{name}_en" for name in ("name", "tagline", "welcome", "suggestions", "contact", "out_of_scope")}


class DemoError(Exception):
    """The demo cannot be loaded or removed here; the message says why."""


def demo_source_dir() -> Path:
    return Path(settings.BASE_DIR) / "rag" / "corpus" / "demo"


def demo_organisation_file() -> Path:
    return Path(settings.BASE_DIR) / "rag" / "corpus" / "demo_organisation.json"


def _check_color(value: str) -> None:
    if len(value) != 7 or not value.startswith("#") or any(c not in "0123456789abcdefABCDEF" for c in value[1:]):
        raise ValueError(f"colour must be #rrggbb, not {value!r}")


def branding_set(*, values: Mapping[str, str]) -> Branding:
    """Set some of the organisation's words (the others are kept); every worker serves them within a second."""
    unknown = sorted(set(values) - set(BRANDING_FIELDS))
    if unknown:
        raise ValueError(f"unknown branding field(s): {', '.join(unknown)}")
    if "color" in values:
        _check_color(values["color"])
    with transaction.atomic():
        row, _created = Branding.objects.select_for_update().get_or_create(pk=1)
        for name, value in values.items():
            setattr(row, name, value)
        for name, twin in _TWINS.items():
            if name in values and twin not in values:
                setattr(row, twin, "")
        row.version += 1
        row.save()
        transaction.on_commit(generation_bump)
    return row


def branding_save(*, row: Branding) -> None:
    """Save a row edited in the admin (bumps its version and tells every worker)."""
    if row.color:
        _check_color(row.color)
    with transaction.atomic():
        row.pk = 1
        row.version += 1
        row.save()
        transaction.on_commit(generation_bump)


def branding_reset() -> None:
    """Back to the neutral words (no organisation named)."""
    with transaction.atomic():
        Branding.objects.filter(pk=1).delete()
        transaction.on_commit(generation_bump)


def _demo_words() -> dict[str, Any]:
    data = json.loads(demo_organisation_file().read_text(encoding="utf-8"))
    return {name: str(value) for name, value in data.items() if name in BRANDING_FIELDS}


def _corpus() -> Path:
    return Path(settings.CORPUS_DIR).resolve()


def _top_level(files: list[str]) -> list[Path]:
    """The top-level entries of the copied files (a form's file and its attachment are read in one call)."""
    corpus = _corpus()
    return sorted({corpus / Path(name).parts[0] for name in files})


def demo_load() -> IndexJob:
    """Copy the demo's documents into CORPUS_DIR (never over a file already there), set its words, and return the
    index job that indexes them."""
    state = DemoState.objects.filter(pk=1).first()
    source, corpus = demo_source_dir(), _corpus()
    copied: list[str] = []
    if corpus != source.resolve():
        for path in sorted(p for p in source.rglob("*") if p.is_file()):
            relative = path.relative_to(source)
            target = corpus / relative
            if target.exists():
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, target)
            copied.append(relative.as_posix())
    with transaction.atomic():
        branding_set(values=_demo_words())
        known = list(state.files) if state is not None and state.loaded else []
        DemoState.objects.update_or_create(pk=1, defaults={"loaded": True, "files": sorted({*known, *copied})})
        shipped = [p.relative_to(source).as_posix() for p in source.rglob("*") if p.is_file()]
        return index_job_create(paths=_top_level(shipped), created_from="demo")


def demo_remove() -> IndexJob | None:
    """Delete the files the demo copied, put the neutral words back, and return the index job that drops the
    demo's documents from the index (None when no file of it is left to drop)."""
    corpus = _corpus()
    if corpus == demo_source_dir().resolve():
        raise DemoError(
            f"CORPUS_DIR is the bundled demo folder ({corpus}); point CORPUS_DIR at your organisation's own folder "
            "to remove the demo"
        )
    state = DemoState.objects.filter(pk=1).first()
    files = list(state.files) if state is not None else []
    for name in files:
        target = (corpus / name).resolve()
        if target.is_relative_to(corpus):
            target.unlink(missing_ok=True)
    for folder in sorted({(corpus / name).parent for name in files}, key=lambda p: len(p.parts), reverse=True):
        if folder != corpus and folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    with transaction.atomic():
        branding_reset()
        DemoState.objects.update_or_create(pk=1, defaults={"loaded": False, "files": []})
        paths = _top_level(files)
        return index_job_create(paths=paths, created_from="demo") if paths else None
