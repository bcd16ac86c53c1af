"""Main-content extraction on help pages: the project's HTML loader against trafilatura.

Twelve help pages in the shapes a university help site has (zh-hant and English; with `<main>`, with only a
`<div id="content">`, with sidebars, cookie banners, breadcrumbs and footers; FAQs, numbered how-tos, a fee table,
a deadline page). Each page lists the sentences a reader comes for (content) and the site furniture around them
(boilerplate). For each extractor:

- content recall: the share of content sentences found in the extracted text;
- boilerplate kept: the share of furniture sentences found in it (lower is better);
- tables whole: the share of tables whose header and every row come out as lines of a pipe table (the format
  the chunker keeps together, rag.retrieval.tables);
- time per page.

    .venv/bin/python scripts/compare_html_extraction.py
"""

from __future__ import annotations

import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

BOILER = [
    "Skip to content",
    "This site uses cookies to improve your experience",
    "Copyright 2026 Example University",
    "Follow us on social media",
    "Related links: library, campus map, alumni",
    "首頁 > 學生服務",
]


Rows = tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class HelpPage:
    name: str
    html: str
    content: tuple[str, ...]
    tables: tuple[Rows, ...] = ()  # each table's rows of cell texts, the header first


def chrome(body: str, *, main: str = "main", lang: str = "en", title: str = "Help") -> str:
    open_main = "<main>" if main == "main" else '<div id="content" class="content">'
    close_main = "</main>" if main == "main" else "</div>"
    return (
        f'<!doctype html><html lang="{lang}"><head><meta charset="utf-8"><title>{title}</title></head><body>'
        f'<a href="#c">{BOILER[0]}</a><div class="cookie">{BOILER[1]}</div>'
        f'<header><div class="crumbs">{BOILER[5]}</div><ul class="menu"><li><a href="/">Home</a></li>'
        f'<li><a href="/a">Admissions</a></li></ul></header>'
        f'<aside class="sidebar"><p>{BOILER[4]}</p></aside>{open_main}{body}{close_main}'
        f"<footer><p>{BOILER[3]}</p><p>{BOILER[2]}</p></footer></body></html>"
    )


def table(rows: Rows, *, th: bool = True) -> str:
    head = "".join(f"<th>{c}</th>" if th else f"<td>{c}</td>" for c in rows[0])
    body = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>" for row in rows[1:])
    return f"<table><tr>{head}</tr>{body}</table>"


FEES_ZH: Rows = (
    ("身分", "每學分費用", "備註"),
    ("本校學生", "免費", "需導師同意"),
    ("校外人士", "新台幣 2,000 元", "含講義"),
)
FEES_EN: Rows = (("Who", "Fee per credit"), ("Students", "free"), ("Visitors", "NT$ 2,000"), ("Alumni", "NT$ 1,000"))


def pages() -> list[HelpPage]:
    zh_fees = "校外人士旁聽每學分收費新台幣二千元，請於開課前完成繳費。"
    en_reset = "Open the reset link in the email within 30 minutes."
    out = [
        HelpPage(
            "zh-fees-main",
            chrome(f"<h1>旁聽收費標準</h1><p>{zh_fees}</p>{table(FEES_ZH)}", lang="zh-Hant", title="旁聽收費"),
            (zh_fees,),
            (FEES_ZH,),
        ),
        HelpPage(
            "zh-fees-div",
            chrome(f"<h1>旁聽收費標準</h1><p>{zh_fees}</p>{table(FEES_ZH, th=False)}", main="div", lang="zh-Hant"),
            (zh_fees,),
            (FEES_ZH,),
        ),
        HelpPage(
            "en-fees-div",
            chrome(f"<h1>Auditing fees</h1><p>Visitors may audit courses.</p>{table(FEES_EN)}", main="div"),
            ("Visitors may audit courses.",),
            (FEES_EN,),
        ),
    ]
    steps = ["Click Forgot password on the sign-in page.", "Enter your student ID and email.", en_reset]
    howto = "<h1>Reset your password</h1><ol>" + "".join(f"<li>{s}</li>" for s in steps) + "</ol>"
    out += [
        HelpPage("en-howto-main", chrome(howto), tuple(steps)),
        HelpPage("en-howto-div", chrome(howto, main="div"), tuple(steps)),
    ]
    zh_steps = ["在登入頁面點選「忘記密碼」。", "輸入學號與電子郵件。", "於 30 分鐘內開啟重設連結。"]
    zh_howto = "<h1>如何重設密碼</h1><ol>" + "".join(f"<li>{s}</li>" for s in zh_steps) + "</ol>"
    out += [
        HelpPage("zh-howto-main", chrome(zh_howto, lang="zh-Hant"), tuple(zh_steps)),
        HelpPage("zh-howto-div", chrome(zh_howto, main="div", lang="zh-Hant"), tuple(zh_steps)),
    ]
    faq = [
        ("When does registration open?", "Registration opens on 1 August at 9:00."),
        ("Can I change my course after registering?", "Yes, until the end of the second week."),
        ("Where do I pick up my student card?", "At the registry office, building A, room 101."),
    ]
    faq_html = "<h1>FAQ</h1>" + "".join(f"<h2>{q}</h2><p>{a}</p>" for q, a in faq)
    out += [
        HelpPage("en-faq-main", chrome(faq_html), tuple(a for _, a in faq)),
        HelpPage("en-faq-div", chrome(faq_html, main="div"), tuple(a for _, a in faq)),
    ]
    deadline = "Applications for the spring term close on 15 March at 17:00."
    short = "<h1>Deadlines</h1><p>" + deadline + "</p>"
    out += [
        HelpPage("en-deadline-main", chrome(short), (deadline,)),
        HelpPage("en-deadline-div", chrome(short, main="div"), (deadline,)),
        HelpPage(
            "zh-deadline-div",
            chrome("<h1>申請截止日</h1><p>春季班申請於三月十五日下午五點截止。</p>", main="div", lang="zh-Hant"),
            ("春季班申請於三月十五日下午五點截止。",),
        ),
    ]
    return out


def squash(text: str) -> str:
    return "".join(text.split())


def table_whole(text: str, rows: Rows) -> bool:
    lines = [squash(line) for line in text.splitlines()]
    wanted = ["|" + "|".join(squash(c) for c in row) + "|" for row in rows]
    try:
        start = lines.index(wanted[0])
    except ValueError:
        return False
    return lines[start + 2 : start + 1 + len(wanted)] == wanted[1:] and "---" in lines[start + 1]


def ours(html: str) -> str:
    from rag.retrieval.loaders.html import html_to_text

    return html_to_text(html)[1]


def trafilatura_text(html: str) -> str:
    import trafilatura

    return trafilatura.extract(html, output_format="markdown", include_tables=True, include_links=False) or ""


def measure(name: str, extract: object) -> dict[str, float]:
    assert callable(extract)
    found = total = boiler = boiler_total = tables_ok = tables_total = 0
    extract(pages()[0].html)  # imports and first-call set-up are not what a crawl pays per page
    started = time.perf_counter()
    for page in pages():
        text = extract(page.html)
        flat = squash(text)
        found += sum(squash(c) in flat for c in page.content)
        total += len(page.content)
        boiler += sum(squash(b) in flat for b in BOILER)
        boiler_total += len(BOILER)
        tables_ok += sum(table_whole(text, rows) for rows in page.tables)
        tables_total += len(page.tables)
    seconds = (time.perf_counter() - started) / len(pages())
    return {
        "content recall": found / total,
        "boilerplate kept": boiler / boiler_total,
        "tables whole": tables_ok / tables_total,
        "ms per page": seconds * 1000,
    }


def main() -> None:
    results = {"project loader": measure("ours", ours), "trafilatura 2.3.1": measure("trafilatura", trafilatura_text)}
    print(f"{platform.node()} {platform.machine()} {os.cpu_count()} cpus, Python {platform.python_version()}")
    print("| extractor | content recall | boilerplate kept | tables whole | ms per page |")
    print("| --- | --- | --- | --- | --- |")
    for name, r in results.items():
        print(
            f"| {name} | {r['content recall']:.2f} | {r['boilerplate kept']:.2f} | {r['tables whole']:.2f} | "
            f"{r['ms per page']:.2f} |"
        )


if __name__ == "__main__":
    main()
