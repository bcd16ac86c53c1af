"""Dense embeddings from a sentence-transformers model in a local folder (optional: `requirements-st.txt`).

Only a folder already on disk is accepted (SENTENCE_TRANSFORMERS_MODEL=/path/to/model): a hub name would make the
server download weights at start-up, which a self-hosted deployment must not do behind its back. The model is
loaded with `local_files_only=True` and the Hugging Face libraries are put offline (HF_HUB_OFFLINE,
TRANSFORMERS_OFFLINE) before they are imported. Every refusal happens at start-up with a message saying what to
do. Encoding is CPU work: callers run it on a thread (the retriever and the indexer already do), and one lock
keeps two threads from encoding at once (on a few CPUs that only adds contention).
"""

from __future__ import annotations

import importlib.util
import os
import re
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rag.retrieval.embedding import SENTENCE_TRANSFORMERS
from rag.retrieval.prompts import EmbeddingPrompts

__all__ = ["SentenceTransformerEmbedder", "SentenceTransformersUnavailable", "check_model_folder", "check_package"]

INSTALL_HINT = "install the extra with `.venv/bin/pip install -r requirements-st.txt`"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class SentenceTransformersUnavailable(RuntimeError):
    """The model folder or the package is missing; the message says what to do."""


def check_model_folder(raw: str) -> Path:
    """The model folder named by SENTENCE_TRANSFORMERS_MODEL, or a clear refusal (a hub name, a missing folder)."""
    value = raw.strip()
    if not value:
        raise SentenceTransformersUnavailable("SENTENCE_TRANSFORMERS_MODEL is empty")
    path = Path(value).expanduser()
    if not path.is_absolute() and not value.startswith("."):
        raise SentenceTransformersUnavailable(
            f"SENTENCE_TRANSFORMERS_MODEL={value!r} looks like a model hub name; give the absolute path of a local "
            "model folder (download it once with the Hugging Face tools, then point here): nothing is downloaded "
            "at run time"
        )
    if not path.is_dir():
        raise SentenceTransformersUnavailable(f"SENTENCE_TRANSFORMERS_MODEL: no such folder {path}")
    if not (path / "config.json").is_file() and not (path / "modules.json").is_file():
        raise SentenceTransformersUnavailable(
            f"SENTENCE_TRANSFORMERS_MODEL: {path} holds no model (neither modules.json nor config.json)"
        )
    return path.resolve()


def check_package() -> None:
    """The package is importable (without importing it: that loads torch)."""
    if importlib.util.find_spec("sentence_transformers") is None:
        raise SentenceTransformersUnavailable(
            f"SENTENCE_TRANSFORMERS_MODEL is set but the sentence-transformers package is missing: {INSTALL_HINT}"
        )


def _load(path: Path, device: str) -> Any:
    # before the first import: the libraries read these once
    os.environ["HF_HUB_OFFLINE"] = "1"
    os.environ["TRANSFORMERS_OFFLINE"] = "1"
    try:
        # Optional and heavy (PyTorch): requirements-st.txt, only where a local model is configured.
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise SentenceTransformersUnavailable(
            f"SENTENCE_TRANSFORMERS_MODEL is set but the sentence-transformers package is missing: {INSTALL_HINT}"
        ) from exc
    return SentenceTransformer(str(path), device=device, local_files_only=True)


class SentenceTransformerEmbedder:
    kind = SENTENCE_TRANSFORMERS

    def __init__(
        self, model_path: str, *, batch_size: int = 64, device: str = "cpu", prompts: EmbeddingPrompts | None = None
    ) -> None:
        self.path = check_model_folder(model_path)
        given = prompts or EmbeddingPrompts()
        # text prefixes only: there is no server to send an input_type to
        self.prompts = EmbeddingPrompts(given.query_prefix, given.passage_prefix)
        check_package()
        self.batch_size = batch_size
        self._model = _load(self.path, device)
        dim = self._model.get_sentence_embedding_dimension()
        if not isinstance(dim, int) or dim < 1:
            raise SentenceTransformersUnavailable(f"{self.path}: the model does not say its embedding dimension")
        self._dim = dim
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        """The model folder's base name and the dimension: moving the folder keeps the space, another model not."""
        return f"st-{_UNSAFE.sub('_', self.path.name)}-d{self._dim}{self.prompts.tag()}"

    @property
    def dim(self) -> int:
        return self._dim

    def _encode(self, texts: list[str]) -> list[list[float]]:
        if not texts:
            return []
        with self._lock:
            vectors = self._model.encode(
                texts, batch_size=self.batch_size, normalize_embeddings=True, show_progress_bar=False
            )
        return [[float(x) for x in row] for row in vectors]

    def embed_documents(self, texts: Sequence[str]) -> list[list[float]]:
        return self._encode(self.prompts.passages(list(texts)))

    def embed_query(self, text: str) -> list[float]:
        return self._encode([self.prompts.query(text)])[0]
