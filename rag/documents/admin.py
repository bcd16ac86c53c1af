"""Admin pages: documents (with their chunks and descriptions, file uploads) and index/backfill jobs (start,
follow, cancel).

Rows here mirror the vector store, so they are read-only but for a document's link (saving it queues the job that
writes it into the index): documents change through index jobs, jobs through their runner. Staff act with buttons
(upload, start a reindex or a backfill, cancel) that call the services; a job's page follows its progress through
the job API.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django import forms
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.text import format_lazy
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_POST

from rag.documents.models import (
    BackfillJob,
    Chunk,
    Document,
    DocumentStatus,
    IndexFormat,
    IndexJob,
    Job,
    JobStatus,
    Source,
    SourceKind,
    SourcePage,
)
from rag.documents.services import (
    MAX_UPLOAD_BYTES,
    UploadBatch,
    UploadItem,
    backfill_job_create,
    document_link_set,
    document_sources_delete,
    index_job_create,
    job_cancel,
    source_pause,
    source_sync_request,
    uploads_job_create,
    uploads_save,
    uploads_source_base_url_set,
)
from rag.documents.sources import UPLOAD_SUFFIXES, PathNotAllowed, corpus_dir, path_allowed, uploads_dir
from rag.text.links import http_link

if TYPE_CHECKING:
    from django_stubs_ext import StrOrPromise

# --- forms ----------------------------------------------------------------------------------------------------


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"accept": ",".join(sorted(UPLOAD_SUFFIXES))}))
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> Any:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


class FolderInput(MultipleFileInput):
    """A file input that picks a whole folder (its files keep their relative paths, see upload.js)."""

    def __init__(self) -> None:
        super().__init__(attrs={"webkitdirectory": "", "directory": ""})


class UploadForm(forms.Form):
    # The form's metaclass moves declared fields off the class, so this does not shadow `BaseForm.files` (the
    # uploaded files) at run time; the stubs see a class attribute.
    files = MultipleFileField(  # type: ignore[assignment]
        label=_("Files"),
        required=False,
        help_text=format_lazy(
            _(
                "Markdown, text, HTML, PDF, Word, Excel, PowerPoint or SQuAD JSON; at most {megabytes} MB each. A "
                "file with the path of an earlier upload replaces it."
            ),
            megabytes=MAX_UPLOAD_BYTES // (1024 * 1024),
        ),
    )
    folder = MultipleFileField(
        label=_("Folder"),
        required=False,
        widget=FolderInput(),
        help_text=_("A whole folder: its files keep their folder paths (en/fees.html and zh/fees.html stay two)."),
    )
    relative_paths = forms.CharField(required=False, widget=forms.HiddenInput)
    base_url = forms.CharField(
        label=_("Base URL of uploads"),
        required=False,
        max_length=1000,
        widget=forms.URLInput(attrs={"size": 60, "placeholder": "https://help.example.edu/"}),
        help_text=_(
            "Each upload links to this + its path in the uploads folder (https://help.example.edu/ + en/fees.html) "
            "unless it names its own link (url front matter) or staff set one. Changing it re-links every upload; "
            "empty: uploads have no link of their own."
        ),
    )
    index_now = forms.BooleanField(required=False, initial=True, label=_("Start an index job for these files"))

    class Media:
        js = ("rag_documents/upload.js",)

    def clean_base_url(self) -> str:
        base_url = (self.cleaned_data.get("base_url") or "").strip()
        if base_url and not http_link(base_url):
            raise forms.ValidationError(gettext("Give an http(s) link (http:// or https://)."), code="scheme")
        return base_url

    def items(self) -> list[UploadItem]:
        """The uploaded files with their relative paths (sent by upload.js in the files' order)."""
        uploads = [*(self.cleaned_data.get("files") or []), *(self.cleaned_data.get("folder") or [])]
        uploads = [upload for upload in uploads if upload is not None]
        try:
            paths = json.loads(self.cleaned_data.get("relative_paths") or "[]")
        except ValueError:
            paths = []
        if not isinstance(paths, list) or len(paths) != len(uploads):
            paths = [""] * len(uploads)
        return [
            UploadItem(name=upload.name, relative_path=str(path or ""), chunks=upload.chunks())
            for upload, path in zip(uploads, paths, strict=True)
        ]


class ReindexForm(forms.Form):
    paths = forms.CharField(
        label=_("Paths"),
        required=False,
        widget=forms.Textarea(attrs={"rows": 4, "cols": 80}),
        help_text=_(
            "One file or folder per line, absolute or relative to the corpus folder; empty means the whole "
            "corpus folder. Only the corpus and uploads folders can be indexed."
        ),
    )
    format = forms.ChoiceField(label=_("Format"), choices=IndexFormat.choices, initial=IndexFormat.AUTO)
    full = forms.BooleanField(label=_("Full"), required=False, help_text=_("Re-embed every document, changed or not."))

    def clean_paths(self) -> list[str]:
        lines = [line.strip() for line in self.cleaned_data["paths"].splitlines() if line.strip()]
        try:
            return [str(path_allowed(line)) for line in lines]
        except PathNotAllowed as exc:
            raise forms.ValidationError(str(exc)) from None


class BackfillForm(forms.Form):
    limit = forms.IntegerField(
        label=_("Limit"),
        required=False,
        min_value=1,
        help_text=_("Describe at most this many chunks (empty: every chunk without one)."),
    )


# --- documents ------------------------------------------------------------------------------------------------


class DocumentLinkForm(forms.ModelForm):
    """The one thing staff change on a document: the link its answers cite."""

    class Meta:
        model = Document
        fields = ("url",)
        labels = {"url": _("link")}
        help_texts = {
            "url": _(
                "The http(s) link answers cite for this document. A link set here wins over the source's own, for "
                "a website page too, and later syncs keep it; empty the field to go back to the source's link (the "
                "page's URL, url front matter, or the source's base URL + the file's path). Saving queues the job "
                "that writes it into the index."
            )
        }
        widgets = {"url": forms.URLInput(attrs={"size": 80})}

    def clean_url(self) -> str:
        url = (self.cleaned_data.get("url") or "").strip()
        if url and not http_link(url):
            raise forms.ValidationError(gettext("Give an http(s) link (http:// or https://)."), code="scheme")
        return url


class ChunkInline(admin.TabularInline):
    model = Chunk
    fields = ("ordinal", "heading", "text_preview", "description_zh", "description_en", "described_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(Document)
class DocumentAdmin(admin.ModelAdmin):
    change_list_template = "admin/rag_documents/document/change_list.html"
    list_display = ("doc_id", "title", "language", "kind", "status", "chunk_count", "described", "indexed_at")
    list_filter = ("language", "kind", "status", "source_format")
    search_fields = ("doc_id", "title", "source", "form_id", "url")
    form = DocumentLinkForm
    readonly_fields = (
        "doc_id",
        "title",
        "url_override",
        "language",
        "kind",
        "tags",
        "form_id",
        "form_file",
        "source",
        "source_format",
        "content_hash",
        "chunk_count",
        "status",
        "status_detail",
        "indexed_at",
        "updated_at",
        "last_job",
    )
    inlines = (ChunkInline,)
    actions = ("reindex_sources", "delete_documents")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Document]:
        return (
            super()
            .get_queryset(request)
            .annotate(described_n=Count("chunks", filter=Q(chunks__described_at__isnull=False)))
        )

    @admin.display(description=_("described"), ordering="described_n")
    def described(self, obj: Document) -> str:
        return f"{getattr(obj, 'described_n', 0)}/{obj.chunk_count}"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # only the link is editable, and saving it queues an index job
        return super().has_change_permission(request, obj) and request.user.has_perm("rag_documents.add_indexjob")

    def get_fields(self, request: HttpRequest, obj: Any = None) -> list[Any]:
        return ["doc_id", "title", "url", *self.readonly_fields[2:]]

    def save_model(self, request: HttpRequest, obj: Document, form: Any, change: bool) -> None:
        # Not obj.save(): the other fields mirror the index and are written by jobs only.
        if "url" not in form.changed_data:
            return
        job = document_link_set(document=obj, url=form.cleaned_data["url"], created_by=request.user)
        if job is None:
            notice = gettext("The link is saved; it reaches the index the next time this document is indexed.")
            self.message_user(request, notice, messages.WARNING)
        else:
            notice = gettext("Index job #%(job)d writes the new link into the index.") % {"job": job.pk}
            self.message_user(request, notice, messages.INFO)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A row is bookkeeping of the index: deleting it alone would leave the document searchable. The
        # `delete_documents` action deletes the way the index understands (the file, then a reindex).
        return False

    def get_urls(self) -> list[URLPattern]:
        return [
            path("upload/", self.admin_site.admin_view(self.upload_view), name="rag_documents_document_upload"),
            *super().get_urls(),
        ]

    @admin.action(description=_("Reindex the sources of the selected documents"))
    def reindex_sources(self, request: HttpRequest, queryset: QuerySet[Document]) -> HttpResponse | None:
        paths: list[str] = []
        for source in sorted(set(queryset.values_list("source", flat=True))):
            if "://" in source:
                continue  # a page of a website source, not a file
            try:
                paths.append(str(path_allowed(source)))
            except PathNotAllowed:
                continue
        # a website page is re-read from the site: its source is synced (one job per source)
        names = {doc_id.split("/")[1] for doc_id in queryset.values_list("doc_id", flat=True) if doc_id.count("/") > 1}
        synced = [
            source_sync_request(source=source, created_by=request.user, created_from="admin")
            for source in Source.objects.filter(name__in=names, kind__in=(SourceKind.WEBSITE, SourceKind.SITEMAP))
            if queryset.filter(doc_id__startswith=f"web/{source.name}/").exists()
        ]
        if synced and not paths:
            return HttpResponseRedirect(reverse("admin:rag_documents_indexjob_change", args=[synced[0].pk]))
        if not paths:
            self.message_user(
                request, gettext("None of the selected documents has a source in an indexable folder."), messages.ERROR
            )
            return None
        job = index_job_create(paths=paths, created_by=request.user, created_from="admin")
        return HttpResponseRedirect(reverse("admin:rag_documents_indexjob_change", args=[job.pk]))

    @admin.action(description=_("Delete the selected documents (their files, then a reindex)"))
    def delete_documents(self, request: HttpRequest, queryset: QuerySet[Document]) -> HttpResponse | None:
        if not request.user.has_perm("rag_documents.add_indexjob"):
            raise PermissionDenied
        # Rows already deleted (kept as history) have nothing left to delete: a selection holding them deletes the
        # others, and one holding only them says so.
        sources = sorted(set(queryset.exclude(status=DocumentStatus.DELETED).values_list("source", flat=True)))
        if not sources:
            self.message_user(request, gettext("The selected documents are already deleted."), messages.WARNING)
            return None
        # One file may hold several documents (a SQuAD file, a page of sections): all of them go with it.
        affected = (
            Document.objects.filter(source__in=sources)
            .exclude(status=DocumentStatus.DELETED)
            .order_by("source", "doc_id")
        )
        refused = [source for source in sources if not _deletable(source)]
        if request.POST.get("confirm") == "yes" and not refused:
            try:
                job = document_sources_delete(sources=sources, created_by=request.user, created_from="admin")
            except PathNotAllowed as exc:
                self.message_user(request, str(exc), messages.ERROR)
                return None
            self.message_user(
                request,
                _("Deleted %(files)d file(s); index job #%(job)d removes their documents from the index.")
                % {"files": len(sources), "job": job.pk},
                messages.SUCCESS,
            )
            return HttpResponseRedirect(reverse("admin:rag_documents_indexjob_change", args=[job.pk]))
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Delete documents"),
            "files": [(source, [d for d in affected if d.source == source]) for source in sources],
            "refused": refused,
            "selected": queryset.values_list("pk", flat=True),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/rag_documents/document/delete_confirmation.html", context)

    def _uploaded(self, request: HttpRequest, batch: UploadBatch, form: UploadForm) -> HttpResponse:
        _, relink = uploads_source_base_url_set(base_url=form.cleaned_data["base_url"])
        index_now = form.cleaned_data["index_now"]
        names = ", ".join(
            (gettext("added %(path)s") if o.outcome == "added" else gettext("updated %(path)s")) % {"path": o.path}
            for o in batch.outcomes
        )
        if not index_now:
            uploaded = gettext("Uploaded %(names)s into %(folder)s.") % {"names": names, "folder": uploads_dir()}
            self.message_user(request, uploaded, messages.SUCCESS)
            return HttpResponseRedirect(reverse("admin:rag_documents_document_changelist"))
        job = uploads_job_create(saved=batch.saved, relink=relink, created_by=request.user, created_from="admin")
        uploaded = gettext("Uploaded %(names)s; index job #%(job)d indexes them.") % {"names": names, "job": job.pk}
        self.message_user(request, uploaded, messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:rag_documents_indexjob_change", args=[job.pk]))

    def upload_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request) or not request.user.has_perm("rag_documents.add_indexjob"):
            raise PermissionDenied
        current = Source.objects.filter(kind=SourceKind.UPLOADS).values_list("base_url", flat=True).first()
        form = UploadForm(request.POST or None, request.FILES or None, initial={"base_url": current or ""})
        if request.method == "POST" and form.is_valid():
            items = form.items()
            batch = uploads_save(items=items) if items else None
            if batch is None:
                form.add_error("files", gettext("Choose files or a folder to upload."))
            elif batch.refused:
                # nothing was saved: say which files and why
                for refused in batch.refused:
                    form.add_error("files", f"{refused.path}: {refused.reason}")
                form.add_error(None, gettext("Nothing was saved: fix or leave out the files named below."))
            else:
                return self._uploaded(request, batch, form)
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": _("Upload documents"),
            "form": form,
            "multipart": True,
            "submit_label": _("Upload"),
            "intro": gettext("Files are saved in %(uploads)s and indexed with the corpus (%(corpus)s).")
            % {"uploads": uploads_dir(), "corpus": corpus_dir()},
        }
        return TemplateResponse(request, "admin/rag_documents/form_page.html", context)


def _report_value(value: Any) -> str:
    """One value of a job's report as text: lists as their items (a long one shortened), numbers as they are."""
    if isinstance(value, list):
        if not value:
            return "-"
        items = [
            ", ".join(f"{k}: {v}" for k, v in item.items()) if isinstance(item, dict) else str(item) for item in value
        ]
        shown = "; ".join(items[:10])
        return shown + (f"; … {len(items) - 10} more" if len(items) > 10 else "")
    if isinstance(value, dict):
        return ", ".join(f"{k}: {v}" for k, v in value.items()) or "-"
    if isinstance(value, float):
        return f"{value:.2f}"
    return "-" if value in (None, "") else str(value)


def _job_name(job: Job) -> str:
    """A job as messages name it: its kind in the page's language and its number ("index job #7")."""
    return gettext("%(kind)s #%(id)d") % {"kind": job._meta.verbose_name, "id": job.pk}


def _job_words() -> dict[str, Any]:
    """The texts the job page's script rewrites as the job runs, in the page's language."""
    return {
        "pathsRead": gettext("paths read"),
        "chunks": gettext("chunks"),
        "cancelling": gettext("cancelling"),
        "counts": gettext(
            "added {added}, updated {updated}, unchanged {unchanged}, deleted {deleted}, skipped {skipped}, "
            "failed {failed}"
        ),
        # the job's state by the value the status API answers, named as the job list names it
        "statuses": {value: str(label) for value, label in JobStatus.choices},
    }


def _deletable(source: str) -> bool:
    try:
        path_allowed(source)
    except PathNotAllowed:
        return False
    return True


# --- jobs -----------------------------------------------------------------------------------------------------


class JobAdmin(admin.ModelAdmin):
    kind = ""
    change_form_template = "admin/rag_documents/job_change_form.html"
    change_list_template = "admin/rag_documents/job_change_list.html"
    list_filter = ("status", "created_from")
    date_hierarchy = "created_at"
    actions = ("cancel_jobs",)
    # Status, progress, counts, error and log are the summary panel at the top of a job's page (live while it
    # runs); the fields below it add what the panel does not show, and the report as a list, not raw JSON.
    common_readonly = (
        "report_shown",
        "cancel_requested",
        "created_by",
        "created_from",
        "created_at",
        "started_at",
        "finished_at",
        "runner",
        "heartbeat_at",
    )

    @admin.display(description=_("progress"))
    def progress(self, obj: Job) -> str:
        return format_html(
            '<progress max="100" value="{}" style="width:8em"></progress> {}/{}',
            obj.percent,
            obj.progress_done,
            obj.progress_total,
        )

    @admin.display(description=_("report"))
    def report_shown(self, obj: Job) -> str:
        report = obj.report or {}
        if not report:
            return "-"
        rows = format_html_join(
            "",
            "<dt>{}</dt><dd>{}</dd>",
            ((key.replace("_", " "), _report_value(value)) for key, value in report.items()),
        )
        return format_html('<dl class="rag-report">{}</dl>', rows)

    @admin.display(description=_("outcome"))
    def outcome(self, obj: Job) -> str:
        labels = {field.name: field.verbose_name for field in obj._meta.concrete_fields}
        counts = [(name, getattr(obj, name)) for name in ("added", "updated", "deleted", "skipped", "failed")]
        return ", ".join(f"{labels[name]} {count}" for name, count in counts if count) or "-"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # jobs are started with the "Start" button, which goes through the service

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return super().has_delete_permission(request, obj) and (obj is None or obj.finished)

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            path("start/", self.admin_site.admin_view(self.start_view), name="{}_{}_start".format(*info)),
            path(
                "<int:object_id>/cancel/",
                self.admin_site.admin_view(require_POST(self.cancel_view)),
                name="{}_{}_cancel".format(*info),
            ),
            *super().get_urls(),
        ]

    @admin.action(description=_("Cancel the selected jobs"))
    def cancel_jobs(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        cancelled = sum(job_cancel(job=job) for job in queryset if not job.finished)
        requested = ngettext(
            "Cancel requested for %(count)d job.", "Cancel requested for %(count)d jobs.", cancelled
        ) % {"count": cancelled}
        self.message_user(request, requested, messages.SUCCESS)

    def cancel_view(self, request: HttpRequest, object_id: int) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        job = get_object_or_404(self.model, pk=object_id)
        if job_cancel(job=job):
            self.message_user(
                request, gettext("Cancel requested for %(job)s.") % {"job": _job_name(job)}, messages.SUCCESS
            )
        else:
            self.message_user(
                request, gettext("%(job)s has already finished.") % {"job": _job_name(job)}, messages.WARNING
            )
        return HttpResponseRedirect(
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[job.pk])
        )

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> HttpResponse:
        busy = self.model.objects.filter(status__in=(JobStatus.PENDING, JobStatus.RUNNING)).exists()
        start_url = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_start")
        extra = {"auto_refresh": busy, "start_url": start_url, "start_label": self.start_label, **(extra_context or {})}
        return super().changelist_view(request, extra)

    def change_view(
        self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        info = self.opts.app_label, self.opts.model_name
        extra = {
            "status_url": reverse(f"rag-{self.kind}-job", kwargs={"job_id": int(object_id)}),
            "cancel_url": reverse("admin:{}_{}_cancel".format(*info), args=[int(object_id)]),
            "job_object": self.model.objects.filter(pk=object_id).first(),
            "job_words_json": json.dumps(_job_words(), ensure_ascii=False),
            **(extra_context or {}),
        }
        return super().change_view(request, object_id, form_url, extra)

    start_label = _("Start")

    def start_view(self, request: HttpRequest) -> HttpResponse:
        raise NotImplementedError

    def _form_page(
        self, request: HttpRequest, form: forms.Form, *, title: StrOrPromise, intro: StrOrPromise = ""
    ) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "form": form,
            "submit_label": _("Start"),
            "intro": intro,
        }
        return TemplateResponse(request, "admin/rag_documents/form_page.html", context)

    def _started(self, request: HttpRequest, job: Job) -> HttpResponse:
        self.message_user(
            request, gettext("%(job)s is queued; this page follows it.") % {"job": _job_name(job)}, messages.SUCCESS
        )
        return HttpResponseRedirect(
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[job.pk])
        )

    def _may_start(self, request: HttpRequest) -> None:
        if not request.user.has_perm(f"{self.opts.app_label}.add_{self.opts.model_name}"):
            raise PermissionDenied


@admin.register(IndexJob)
class IndexJobAdmin(JobAdmin):
    kind = "index"
    start_label = _("Start a reindex")
    list_display = ("__str__", "status", "progress", "outcome", "paths_short", "full", "created_by", "created_at")
    readonly_fields = (
        "paths",
        "format",
        "full",
        "if_empty",
        "chunks",
        "chunks_embedded",
        "collection",
        *JobAdmin.common_readonly,
    )
    fields = readonly_fields

    @admin.display(description=_("paths"))
    def paths_short(self, obj: IndexJob) -> str:
        paths = list(obj.paths or [])
        if not paths:
            return gettext("(corpus folder)")
        return ", ".join(paths[:2]) + (f" +{len(paths) - 2}" if len(paths) > 2 else "")

    def start_view(self, request: HttpRequest) -> HttpResponse:
        self._may_start(request)
        form = ReindexForm(request.POST or None)
        if request.method == "POST" and form.is_valid():
            job = index_job_create(
                paths=form.cleaned_data["paths"],
                format=form.cleaned_data["format"],
                full=form.cleaned_data["full"],
                created_by=request.user,
                created_from="admin",
            )
            return self._started(request, job)
        intro = _(
            "Only changed documents are embedded again; documents removed from these paths are removed from the "
            "index. The index switches at once when the job has finished."
        )
        return self._form_page(request, form, title=_("Start a reindex"), intro=intro)


@admin.register(BackfillJob)
class BackfillJobAdmin(JobAdmin):
    kind = "backfill"
    start_label = _("Start a backfill")
    list_display = ("__str__", "status", "progress", "outcome", "limit", "created_by", "created_at")
    readonly_fields = ("limit", *JobAdmin.common_readonly)
    fields = readonly_fields

    def start_view(self, request: HttpRequest) -> HttpResponse:
        self._may_start(request)
        form = BackfillForm(request.POST or None)
        if not settings.LLM_BASE_URL:
            self.message_user(
                request,
                gettext("No LLM is configured (LLM_BASE_URL): backfill needs one to write descriptions."),
                messages.ERROR,
            )
            return HttpResponseRedirect(reverse("admin:rag_documents_backfilljob_changelist"))
        if request.method == "POST" and form.is_valid():
            job = backfill_job_create(limit=form.cleaned_data["limit"], created_by=request.user, created_from="admin")
            return self._started(request, job)
        intro = _(
            "The LLM writes a short Traditional Chinese and English description of every chunk that has none; "
            "descriptions become searchable text of their chunk."
        )
        return self._form_page(request, form, title=_("Start a backfill"), intro=intro)


# --- sources --------------------------------------------------------------------------------------------------


class SourceForm(forms.ModelForm):
    """What staff set on a source, checked as `source_create` checks it; a folder must be one the admin may
    index (the corpus or uploads folder), the URL and base URL http(s)."""

    class Meta:
        model = Source
        fields = (
            "name",
            "kind",
            "url",
            "folder",
            "include",
            "exclude",
            "max_pages",
            "every",
            "base_url",
            "internal",
            "rate",
            "concurrency",
            "paused",
        )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        kind = data.get("kind") or getattr(self.instance, "kind", "")
        if kind in (SourceKind.WEBSITE, SourceKind.SITEMAP) and not _is_http(data.get("url", "")):
            self.add_error("url", gettext("Give an http(s) URL."))
        if kind == SourceKind.UPLOADS:
            # the uploads folder, whatever was typed: there is one, and its base URL links every upload
            data["folder"] = str(uploads_dir().resolve())
            others = Source.objects.filter(kind=SourceKind.UPLOADS).exclude(pk=self.instance.pk)
            if others.exists():
                self.add_error("kind", gettext("There is an uploads source already."))
        if kind == SourceKind.FOLDER:
            try:
                data["folder"] = str(path_allowed(data.get("folder", "")))
            except PathNotAllowed as exc:
                self.add_error("folder", str(exc))
        if data.get("base_url") and not _is_http(data["base_url"]):
            self.add_error("base_url", gettext("Give an http(s) URL."))
        rate = data.get("rate")
        if rate is not None and not 0 < rate <= 100:
            self.add_error("rate", gettext("Between 0 and 100 requests per second."))
        return data


def _is_http(value: str) -> bool:
    parts = urlsplit((value or "").strip())
    return parts.scheme in ("http", "https") and bool(parts.hostname)


class SourcePageInline(admin.TabularInline):
    """The URLs the last sync could not index as they are (errors, 404s, refusals), with the reason."""

    model = SourcePage
    verbose_name_plural = _("pages with problems in the last sync")
    fields = ("url", "outcome", "status_code", "detail", "gone_count", "fetched_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    max_num = 0

    def get_queryset(self, request: HttpRequest) -> QuerySet[SourcePage]:
        return super().get_queryset(request).exclude(outcome__in=("fetched", "not_modified"))


@admin.register(Source)
class SourceAdmin(admin.ModelAdmin):
    form = SourceForm
    list_display = ("name", "kind", "where", "schedule", "last_sync_at", "next_sync_at", "last_outcome", "pages_n")
    list_filter = ("kind", "paused")
    search_fields = ("name", "url", "folder")
    inlines = (SourcePageInline,)
    actions = ("sync_now", "pause", "resume", "remove_sources")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Source]:
        return super().get_queryset(request).select_related("last_job").annotate(pages_count=Count("pages"))

    def get_readonly_fields(self, request: HttpRequest, obj: Source | None = None) -> tuple[str, ...]:
        shown = ("last_sync_at", "next_sync_at", "last_job", "created_at")
        # the name is the documents' id prefix and the kind decides how they are read: fixed once added
        return ("name", "kind", *shown) if obj is not None else shown

    def save_model(self, request: HttpRequest, obj: Source, form: Any, change: bool) -> None:
        if obj.every is not None and not obj.paused and (not change or "every" in form.changed_data):
            obj.next_sync_at = timezone.now()
        super().save_model(request, obj, form, change)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # deleting the row alone would leave its documents searchable: the remove action goes through a job
        return False

    @admin.display(description=_("URL or folder"))
    def where(self, obj: Source) -> str:
        return obj.url or obj.folder

    @admin.display(description=_("schedule"))
    def schedule(self, obj: Source) -> str:
        if obj.paused:
            return gettext("paused")
        return gettext("every %(every)s") % {"every": obj.every} if obj.every else gettext("on request")

    @admin.display(description=_("last job"))
    def last_outcome(self, obj: Source) -> str:
        job = obj.last_job
        if job is None:
            return "-"
        link = reverse("admin:rag_documents_indexjob_change", args=[job.pk])
        return format_html('<a href="{}">#{} {}</a>', link, job.pk, job.get_status_display())

    @admin.display(description=_("pages"), ordering="pages_count")
    def pages_n(self, obj: Source) -> int:
        return int(getattr(obj, "pages_count", 0))

    def _check_jobs(self, request: HttpRequest) -> None:
        if not request.user.has_perm("rag_documents.add_indexjob"):
            raise PermissionDenied

    @admin.action(description=_("Sync the selected sources now"))
    def sync_now(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        self._check_jobs(request)
        jobs = [source_sync_request(source=s, created_by=request.user, created_from="admin") for s in queryset]
        self.message_user(
            request,
            gettext("Queued: %(jobs)s.") % {"jobs": ", ".join(f"#{job.pk}" for job in jobs)},
            messages.SUCCESS,
        )

    @admin.action(description=_("Pause the selected sources' schedules"))
    def pause(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            source_pause(source=source, paused=True)

    @admin.action(description=_("Resume the selected sources' schedules"))
    def resume(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        for source in queryset:
            source_pause(source=source, paused=False)

    @admin.action(description=_("Remove the selected sources and their documents"))
    def remove_sources(self, request: HttpRequest, queryset: QuerySet[Source]) -> None:
        self._check_jobs(request)
        jobs = [
            source_sync_request(source=s, remove=True, created_by=request.user, created_from="admin") for s in queryset
        ]
        self.message_user(
            request,
            gettext("Removal queued: %(jobs)s.") % {"jobs": ", ".join(f"#{job.pk}" for job in jobs)},
            messages.SUCCESS,
        )
