"""API keys: who may call the OpenAI-compatible API (`chat` scope) and the concurrency APIs (`admin-read`,
`admin-write`).

A key is shown once when it is made (`manage.py apikey create`, or the admin's add form) and stored as its
SHA-256 hash, with its first characters kept as a prefix to recognise it by. Each key has a name, an owner, an
optional expiry, scopes, a requests-per-minute limit of its own and usage counters. Every request reads the key's
row (one indexed query), so a revoked or expired key stops working at once on every worker: there is no
per-process cache of keys to outlive a revocation.
"""
