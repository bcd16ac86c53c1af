"""Origins as browsers send them: `scheme://host[:port]`, lower case, the default port left out."""

from __future__ import annotations

from urllib.parse import urlsplit


def origin_normalise(value: str) -> str:
    """The canonical form of an origin, or "" for anything that is not one (a path, a wildcard, `null`)."""
    text = value.strip().lower().rstrip("/")
    if not text:
        return ""
    parts = urlsplit(text)
    try:
        port = parts.port
    except ValueError:
        return ""
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.path or parts.query or parts.username:
        return ""
    if "*" in parts.hostname:
        return ""
    default = 443 if parts.scheme == "https" else 80
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    return f"{parts.scheme}://{host}" + (f":{port}" if port and port != default else "")


def origins_parse(values: list[str] | str) -> list[str]:
    """Normalised origins from lines or a list; ValueError naming the first one that is not an origin."""
    items = values.splitlines() if isinstance(values, str) else values
    origins: list[str] = []
    for raw in items:
        if not raw.strip():
            continue
        origin = origin_normalise(raw)
        if not origin:
            raise ValueError(
                f"{raw.strip()!r} is not an origin: write the scheme, host and any port, e.g. https://www.example.edu"
            )
        if origin not in origins:
            origins.append(origin)
    if not origins:
        raise ValueError("give at least one allowed origin, e.g. https://www.example.edu")
    return origins
