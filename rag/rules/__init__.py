"""Rules and extractive text work: the whole answer when no LLM is configured (the offline backend), and the
fallbacks and checks the LLM paths use too.

Everything here is pure, synchronous and cheap on question-sized text; nodes call it from `run` and keep the
LLM-powered path beside it.
"""
