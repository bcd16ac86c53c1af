"""The organisation's name and words as the pipeline and the pages use them: plain data, no Django.

`Organisation` is what `rag.branding.selectors.organisation_get` serves from memory; nodes receive it through
`PipelineDeps.organisation`, pages through the chat page's config. The neutral defaults below name no
organisation: an installation says who it is in the admin (or `manage.py branding set`), and the demo's words
are data (`manage.py demo load`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from rag.text.language import is_chinese


@dataclass(frozen=True, slots=True)
class LocalTexts:
    """The organisation's words in one reply language."""

    name: str
    tagline: str
    welcome: str
    contact: str
    out_of_scope: str
    suggestions: tuple[str, ...] = ()


DEFAULT_ZH = LocalTexts(
    name="客服小幫手",
    tagline="常見問題，隨時為您解答",
    welcome="我會從說明文件中找出答案，並附上資料來源。",
    contact="請使用本網站公布的聯絡方式與我們聯繫。",
    out_of_scope="抱歉，我只能回答說明文件涵蓋的問題。請問有什麼相關的問題需要協助嗎？",
)
DEFAULT_EN = LocalTexts(
    name="Help assistant",
    tagline="Answers from the help centre, any time",
    welcome="I answer from the help documents and show you the sources.",
    contact="please use the contact details published on this website.",
    out_of_scope="Sorry, I can only help with questions the help documents cover. What would you like to know?",
)


@dataclass(frozen=True, slots=True)
class Organisation:
    zh: LocalTexts = DEFAULT_ZH
    en: LocalTexts = DEFAULT_EN
    logo_url: str = ""
    color: str = "#0b5cab"
    privacy_url: str = ""
    version: int = 0

    def texts(self, language: str) -> LocalTexts:
        """The words for a reply in `language`: Chinese for zh-*, English otherwise."""
        return self.zh if is_chinese(language) else self.en

    def prompt_variables(self) -> dict[str, str]:
        """What the prompts may say of the organisation (`{{organisation}}`, `{{organisation_contact}}`...)."""
        return {
            "organisation": self.en.name if self.en.name == self.zh.name else f"{self.zh.name} ({self.en.name})",
            "organisation_scope": self.en.out_of_scope,
            "organisation_contact": self.en.contact,
        }

    def page_config(self) -> dict[str, object]:
        """The chat page's and the widget's view: per page language, plus the look."""
        return {
            "texts": {lang: _local_config(self.texts(lang)) for lang in ("zh-hant", "en")},
            "logoUrl": self.logo_url,
            "color": self.color,
            "privacyUrl": self.privacy_url,
        }


def _local_config(texts: LocalTexts) -> dict[str, object]:
    return {
        "name": texts.name,
        "tagline": texts.tagline,
        "welcome": texts.welcome,
        "contact": texts.contact,
        "suggestions": list(texts.suggestions),
    }


PROMPT_VARIABLES = frozenset(Organisation().prompt_variables())


class OrganisationSource(Protocol):
    async def get(self) -> Organisation:
        """The organisation's words as they are now (from memory; a thread hop only when a check is due)."""
        ...


class FixedOrganisation:
    """An `OrganisationSource` that always gives one value (node tests, a pipeline built without Django)."""

    def __init__(self, organisation: Organisation | None = None) -> None:
        self.organisation = organisation or Organisation()

    async def get(self) -> Organisation:
        return self.organisation
