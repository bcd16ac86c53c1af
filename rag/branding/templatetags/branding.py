from __future__ import annotations

from typing import Any

from django import template

from rag.branding.selectors import demo_loaded

register = template.Library()


@register.inclusion_tag("admin/rag_branding/demo_notice.html", takes_context=True)
def demo_notice(context: Any) -> dict[str, Any]:
    """On the admin home: the demo organisation is loaded, with one button to remove it."""
    return {"demo_loaded": demo_loaded(), "csrf_token": context.get("csrf_token")}
