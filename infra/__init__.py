"""Shared infrastructure under every app: the JSON error shape and body reading (`jsonio`), the staff APIs' access
check (`access`), per-worker background tasks (`worker_tasks`), the bounded writer thread (`writer_thread`), the
Redis call guard (`redis_calls`) and this worker's identity (`identity`).

The bottom layer: it imports no app of the project (chatbot, rag, concurrency, prompts), and every app may import it.
"""
