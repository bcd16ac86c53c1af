"""The search index kept in the database: the source of truth every worker's in-memory replica is loaded from.

Without `QDRANT_URL` the vector store (`rag.retrieval.store`) keeps its builds here (`rag.retrieval.db_backend`):
one `IndexBuild` row per build (what Qdrant calls a collection), its points as `IndexPoint` rows (payload as
JSON, vectors as little-endian float32/int32 bytes), and `IndexAlias` rows naming the live build and the one the
last switch replaced (what Qdrant calls aliases). A switch rewrites the alias rows in one transaction, so every
reader sees the old build or the new one, whole.

`StoreRevision` holds one counter per thing a replica follows (an alias's live build, the semantic cache's
entries): writers bump it in the transaction of their write, and a worker that sees it move reloads what changed.
"""

from __future__ import annotations

from django.db import models
from django.utils.translation import gettext_lazy as _


class IndexBuild(models.Model):
    name = models.CharField(_("name"), max_length=200, unique=True, help_text=_("<alias>__<version>"))
    dim = models.PositiveIntegerField(_("dim"), help_text=_("dense vector dimension"))
    metadata = models.JSONField(
        _("metadata"), default=dict, blank=True, help_text=_("what the indexer stored with the build")
    )
    # bumped by writes into the build after it was created (backfilled descriptions written in place)
    revision = models.PositiveBigIntegerField(_("revision"), default=0)
    # the inverted index of the build's points at `postings_revision` (rag.retrieval.memory_index.Postings), saved by
    # the process that built it so that every other worker loads it instead of sorting every posting again
    postings = models.BinaryField(_("postings"), null=True, editable=False)
    postings_revision = models.PositiveBigIntegerField(_("postings revision"), null=True, editable=False)
    created_at = models.DateTimeField(_("created at"), auto_now_add=True)

    class Meta:
        verbose_name = _("index build")
        verbose_name_plural = _("index builds")
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class IndexPoint(models.Model):
    build = models.ForeignKey(IndexBuild, verbose_name=_("build"), on_delete=models.CASCADE, related_name="points")
    point_id = models.CharField(_("point id"), max_length=36, help_text=_("a UUID, the same in every build"))
    doc_id = models.CharField(_("doc id"), max_length=500, blank=True)
    language = models.CharField(_("language"), max_length=16, blank=True)
    kind = models.CharField(_("kind"), max_length=16, blank=True)
    # JSON as text: a replica keeps it as text until a hit needs it, and nothing queries inside it
    payload = models.TextField(_("payload"))
    dense = models.BinaryField(_("dense"), help_text=_("float32 little-endian"))
    sparse_indices = models.BinaryField(_("sparse indices"), help_text=_("int32 little-endian, sorted"))
    sparse_values = models.BinaryField(_("sparse values"), help_text=_("float32 little-endian"))

    class Meta:
        verbose_name = _("index point")
        verbose_name_plural = _("index points")
        constraints = [models.UniqueConstraint(fields=["build", "point_id"], name="rag_indexpoint_build_point")]
        indexes = [models.Index(fields=["build", "doc_id"], name="rag_indexpoint_build_doc")]

    def __str__(self) -> str:
        return f"{self.build_id}:{self.point_id}"


class IndexAlias(models.Model):
    name = models.CharField(_("name"), max_length=200, primary_key=True)
    build = models.ForeignKey(IndexBuild, verbose_name=_("build"), on_delete=models.PROTECT, related_name="aliases")

    class Meta:
        verbose_name = _("index alias")
        verbose_name_plural = _("index aliases")

    def __str__(self) -> str:
        return f"{self.name} -> {self.build_id}"


class StoreRevision(models.Model):
    name = models.CharField(_("name"), max_length=200, primary_key=True)
    revision = models.PositiveBigIntegerField(_("revision"), default=0)
    # the semantic cache counts deletions apart: a replica then knows when added rows are not the whole story
    deletions = models.PositiveBigIntegerField(_("deletions"), default=0)
    # what the counted rows were made with (the cache: its embedder, whose vectors only it can compare)
    tag = models.CharField(_("tag"), max_length=300, blank=True, default="")

    class Meta:
        verbose_name = _("store revision")
        verbose_name_plural = _("store revisions")

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}"


class AnswerEvaluation(models.Model):
    """One run of `manage.py eval_answers`: what was asked of which producer, and how the answers scored.

    The headline figures are columns, so the admin's list sorts and compares runs; everything the command
    printed (settings, per-question outliers, the judge's figures) is kept in `summary`.
    """

    created_at = models.DateTimeField(_("created at"), auto_now_add=True)
    dataset = models.CharField(_("dataset"), max_length=300, help_text=_("the SQuAD file's name"))
    producer = models.CharField(
        _("producer"), max_length=300, help_text=_("backend / answering model (or offline) / workflow")
    )
    questions = models.PositiveIntegerField(_("questions"))
    containment = models.FloatField(_("containment"), help_text=_("share of answers that contain a gold answer"))
    citation_accuracy = models.FloatField(
        _("citation accuracy"), help_text=_("share of citing answers whose cited passage holds the gold")
    )
    refusal_rate = models.FloatField(
        _("refusal rate"), help_text=_("share of answers that cite nothing (not found, out of scope)")
    )
    answer_chars_median = models.FloatField(_("answer chars median"))
    latency_ms_p50 = models.FloatField(_("latency ms p50"))
    latency_ms_p95 = models.FloatField(_("latency ms p95"))
    judge_prompt_version = models.PositiveIntegerField(_("judge prompt version"), null=True, blank=True)
    faithfulness = models.FloatField(_("faithfulness"), null=True, blank=True, help_text=_("judge's mean, 1-5"))
    relevance = models.FloatField(_("relevance"), null=True, blank=True, help_text=_("judge's mean, 1-5"))
    summary = models.JSONField(_("summary"), default=dict, help_text=_("the command's whole JSON output"))

    class Meta:
        verbose_name = _("answer evaluation")
        verbose_name_plural = _("answer evaluations")
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.dataset} / {self.producer} @ {self.created_at:%Y-%m-%d %H:%M}"
