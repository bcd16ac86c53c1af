"""The offline backend: rules and extractive text work that stand in for an LLM when none is configured.

Everything here is pure, synchronous and cheap on question-sized text; nodes call it from `run` and keep the
LLM-powered path beside it.
"""
