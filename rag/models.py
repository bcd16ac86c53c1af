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


class IndexBuild(models.Model):
    name = models.CharField(max_length=200, unique=True, help_text="<alias>__<version>")
    dim = models.PositiveIntegerField(help_text="dense vector dimension")
    metadata = models.JSONField(default=dict, blank=True, help_text="what the indexer stored with the build")
    # bumped by writes into the build after it was created (backfilled descriptions written in place)
    revision = models.PositiveBigIntegerField(default=0)
    # the inverted index of the build's points at `postings_revision` (rag.retrieval.memory_index.Postings), saved by
    # the process that built it so that every other worker loads it instead of sorting every posting again
    postings = models.BinaryField(null=True, editable=False)
    postings_revision = models.PositiveBigIntegerField(null=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("name",)

    def __str__(self) -> str:
        return self.name


class IndexPoint(models.Model):
    build = models.ForeignKey(IndexBuild, on_delete=models.CASCADE, related_name="points")
    point_id = models.CharField(max_length=36, help_text="a UUID, the same in every build")
    doc_id = models.CharField(max_length=500, blank=True)
    language = models.CharField(max_length=16, blank=True)
    kind = models.CharField(max_length=16, blank=True)
    # JSON as text: a replica keeps it as text until a hit needs it, and nothing queries inside it
    payload = models.TextField()
    dense = models.BinaryField(help_text="float32 little-endian")
    sparse_indices = models.BinaryField(help_text="int32 little-endian, sorted")
    sparse_values = models.BinaryField(help_text="float32 little-endian")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["build", "point_id"], name="rag_indexpoint_build_point")]
        indexes = [models.Index(fields=["build", "doc_id"], name="rag_indexpoint_build_doc")]

    def __str__(self) -> str:
        return f"{self.build_id}:{self.point_id}"


class IndexAlias(models.Model):
    name = models.CharField(max_length=200, primary_key=True)
    build = models.ForeignKey(IndexBuild, on_delete=models.PROTECT, related_name="aliases")

    def __str__(self) -> str:
        return f"{self.name} -> {self.build_id}"


class StoreRevision(models.Model):
    name = models.CharField(max_length=200, primary_key=True)
    revision = models.PositiveBigIntegerField(default=0)
    # the semantic cache counts deletions apart: a replica then knows when added rows are not the whole story
    deletions = models.PositiveBigIntegerField(default=0)
    # what the counted rows were made with (the cache: its embedder, whose vectors only it can compare)
    tag = models.CharField(max_length=300, blank=True, default="")

    def __str__(self) -> str:
        return f"{self.name}@{self.revision}"


class AnswerEvaluation(models.Model):
    """One run of `manage.py eval_answers`: what was asked of which producer, and how the answers scored.

    The headline figures are columns, so the admin's list sorts and compares runs; everything the command
    printed (settings, per-question outliers, the judge's figures) is kept in `summary`.
    """

    created_at = models.DateTimeField(auto_now_add=True)
    dataset = models.CharField(max_length=300, help_text="the SQuAD file's name")
    producer = models.CharField(max_length=300, help_text="backend / answering model (or offline) / workflow")
    questions = models.PositiveIntegerField()
    containment = models.FloatField(help_text="share of answers that contain a gold answer")
    citation_accuracy = models.FloatField(help_text="share of citing answers whose cited passage holds the gold")
    refusal_rate = models.FloatField(help_text="share of answers that cite nothing (not found, out of scope)")
    answer_chars_median = models.FloatField()
    latency_ms_p50 = models.FloatField()
    latency_ms_p95 = models.FloatField()
    judge_prompt_version = models.PositiveIntegerField(null=True, blank=True)
    faithfulness = models.FloatField(null=True, blank=True, help_text="judge's mean, 1-5")
    relevance = models.FloatField(null=True, blank=True, help_text="judge's mean, 1-5")
    summary = models.JSONField(default=dict, help_text="the command's whole JSON output")

    class Meta:
        ordering = ("-created_at",)

    def __str__(self) -> str:
        return f"{self.dataset} / {self.producer} @ {self.created_at:%Y-%m-%d %H:%M}"
