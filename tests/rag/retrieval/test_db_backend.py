"""Points written into the database store come back as they went in: byte for byte, in order, replaced on upsert."""

from __future__ import annotations

import numpy as np
import pytest
from django.db import connection, transaction

from rag.models import IndexBuild, IndexPoint
from rag.retrieval.db_backend import DatabaseBackend, _point_row, copy_rows
from rag.retrieval.sparse import SparseVector
from rag.retrieval.store import StorePoint
from tests.rag.stores import unique_alias

pytestmark = pytest.mark.django_db(transaction=True)


def point(number: int, *, text: str = "") -> StorePoint:
    rng = np.random.default_rng(number)
    return StorePoint(
        point_id=f"00000000-0000-0000-0000-{number:012d}",
        dense=rng.standard_normal(8).astype(np.float32),
        sparse=SparseVector(sorted(rng.choice(2**31 - 1, 5, replace=False).tolist()), rng.random(5).tolist()),
        payload={"doc_id": f"doc/{number}", "language": "zh-hant", "kind": "article", "text": text or f"第{number}段"},
    )


@pytest.fixture
def backend_and_build():
    backend = DatabaseBackend()
    name = f"{unique_alias('points')}__1"
    backend.create_collection(name, dim=8, metadata={})
    yield backend, name
    backend.delete_collection(name)


def stored_rows(name: str) -> list[tuple[object, ...]]:
    rows = IndexPoint.objects.filter(build__name=name).order_by("id")
    fields = ("point_id", "doc_id", "language", "kind", "payload", "dense", "sparse_indices", "sparse_values")
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows.values_list(*fields)]


def test_points_read_back_byte_for_byte_in_the_order_written_and_upsert_replaces(backend_and_build) -> None:
    backend, name = backend_and_build
    build = IndexBuild.objects.get(name=name)
    points = [point(n) for n in range(1, 1201)]  # more than one write batch
    backend.upsert(name, points)
    backend.upsert(name, [point(7, text="改過的第7段")])
    expected = [_point_row(build.pk, p)[1:] for p in points if p.point_id != point(7).point_id]
    expected.append(_point_row(build.pk, point(7, text="改過的第7段"))[1:])
    assert stored_rows(name) == expected
    assert backend.revision(name) == 3  # two batches, then the replacement: a replica reloads after each


def test_copy_writes_the_rows_executemany_would(backend_and_build) -> None:
    if connection.vendor != "postgresql":
        pytest.skip(
            "COPY is PostgreSQL's (SQLite writes with executemany, tested above): run with "
            "DATABASE_URL=postgres://... as CI does"
        )
    _, name = backend_and_build
    build = IndexBuild.objects.get(name=name)
    rows = [_point_row(build.pk, point(n)) for n in range(1, 4)]
    with transaction.atomic():
        copy_rows(connection, rows)
    assert stored_rows(name) == [row[1:] for row in rows]
    with pytest.raises(Exception, match="rag_indexpoint_build_point"), transaction.atomic():
        copy_rows(connection, rows[:1])  # COPY keeps the table's constraints: one point id per build
