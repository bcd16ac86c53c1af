"""Settings of the test run: the project's settings with a private data folder and integrations off.

The environment is set before the project's settings module reads it. Every test run gets its own data folder
(generated secrets, SQLite), so the suite neither needs nor disturbs a developer's `var/` or a
running server that holds it. Optional integrations are switched off explicitly so a developer's `.env` cannot
leak into the suite; REDIS_URL and DATABASE_URL pass through (CI runs the suite a second time against Redis and
PostgreSQL).
"""

import atexit
import os
import shutil
import tempfile

_data_dir = tempfile.mkdtemp(prefix="helpcentre-test-")
os.environ["DATA_DIR"] = _data_dir
# Most tests ask questions of the bundled demo corpus where it lies; the demo command's tests use their own folder.
_repository = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ["CORPUS_DIR"] = os.path.join(_repository, "rag", "corpus", "demo")
# A Qdrant server given to the suite is for the store's contract tests (tests/rag/stores.py); the rest of the suite
# runs on the defaults.
os.environ.setdefault("HELPCENTRE_TEST_QDRANT_URL", os.environ.get("QDRANT_URL", ""))
for _name in ("QDRANT_URL", "LLM_BASE_URL", "EMBEDDING_BASE_URL", "LANGFUSE_PUBLIC_KEY", "LANGFUSE_SECRET_KEY"):
    os.environ[_name] = ""
# Tests ask many questions from one client; the rate limiter has tests of its own.
os.environ["RAG_RATE_LIMIT_PER_MINUTE"] = "0"
os.environ["RAG_RATE_LIMIT_PER_ADDRESS_PER_MINUTE"] = "0"
# The session fixture indexes the store before anything opens it; importing the ASGI app must not take it.
os.environ["RAG_PRELOAD"] = "false"
# Tests ask the same questions many times; the semantic cache has tests of its own that switch it on.
os.environ["RAG_SEMANTIC_CACHE_ENABLED"] = "false"

from chatbot.settings import *  # noqa: E402, F403

# Per-worker background tasks (live settings, workflow sync) start on a worker's first connection. In-process
# tests drive the ASGI app through communicators on a fresh event loop per test: starting them there would only
# add tasks to tear down. Their own tests switch them on; servers started as subprocesses run them as usual.
CONCURRENCY_LIVE_SETTINGS = False
RAG_WORKFLOW_SYNC = False


# The test database of a SQLite run is a file, as the product's is, not Django's in-memory default: threads (the
# replicas' loads, job runners) then see each other's committed writes through WAL and the busy timeout, where an
# in-memory database's shared cache fails their reads with "table is locked".
# Kept in memory all the same where the machine has a RAM disk.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":  # noqa: F405
    _test_db_dir = tempfile.mkdtemp(prefix="helpcentre-test-db-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    DATABASES["default"]["TEST"] = {"NAME": os.path.join(_test_db_dir, "test-db.sqlite3")}  # noqa: F405
    atexit.register(shutil.rmtree, _test_db_dir, True)

# On PostgreSQL the test run's commits do not wait for the disk (nothing of a test run must survive a crash of the
# server): the suite's transactional tests and fixtures commit thousands of times.
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":  # noqa: F405
    DATABASES["default"].setdefault("OPTIONS", {})["options"] = "-c synchronous_commit=off"  # noqa: F405
