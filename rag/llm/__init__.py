"""LLM client and call policy: streamed answers, structured (pydantic-model) completions and embeddings from an
OpenAI-compatible server, under one rate-limit / concurrency / retry / timeout policy.

What the composition root (rag.wiring) builds from settings, once per process::

    from rag.llm import CallPolicyConfig, LLMBackend, LLMConfig, OpenAIEmbedder
    llm = LLMBackend(LLMConfig(base_url=..., ...), CallPolicyConfig(rpm={...}, ...))
    deps = PipelineDeps(..., llm=llm)

What nodes call: ``llm.stream_answer(...)`` (inside ``contextlib.aclosing``), ``llm.complete(...)``,
``llm.embed(...)``. See rag.llm.backends for the signatures and rag.llm.policy for the rules.
"""

from rag.llm.backends import LLMBackend
from rag.llm.config import CallPolicyConfig, LLMConfig
from rag.llm.embedder import OpenAIEmbedder
from rag.llm.errors import InvalidLLMOutput
from rag.llm.structured import StructuredOutput, output_schema, parse_output
from rag.llm.types import LLMDelta, LLMResult

__all__ = [
    "CallPolicyConfig",
    "InvalidLLMOutput",
    "LLMBackend",
    "LLMConfig",
    "LLMDelta",
    "LLMResult",
    "OpenAIEmbedder",
    "StructuredOutput",
    "output_schema",
    "parse_output",
]
