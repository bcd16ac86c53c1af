// A small Markdown renderer for answers that builds DOM nodes only (createElement + text nodes, never innerHTML),
// so HTML written by the model or quoted from the corpus is shown as text and never runs. Links are made only
// for http(s) URLs (relative ones resolve against this page, which is http(s)); anything else stays text.
//
// Supported: ATX headings, paragraphs (single newlines kept as line breaks, as chat answers expect), ordered
// and unordered lists (nested by indentation), block quotes, fenced code blocks, horizontal rules; inline code,
// **bold**, *italic*, [text](url), <https://autolinks>, bare https:// URLs and [n] citations.
"use strict";

(function () {
  const MAX_DEPTH = 6; // nested lists and quotes: enough for answers, bounded against pathological input

  function safeHref(url) {
    if (typeof url !== "string") return null;
    const trimmed = url.trim();
    if (!trimmed) return null;
    try {
      const parsed = new URL(trimmed, window.location.href);
      return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
    } catch (_) {
      return null;
    }
  }

  function el(tag, className) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    return node;
  }

  function link(href, external) {
    const a = el("a");
    a.href = href;
    if (external) {
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
    return a;
  }

  function isExternal(href) {
    try {
      return new URL(href).origin !== window.location.origin;
    } catch (_) {
      return true;
    }
  }

  // --- blocks ----------------------------------------------------------------------------------------------

  const FENCE = /^ {0,3}(`{3,}|~{3,})\s*([\w+#.-]*)/;
  const HEADING = /^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const RULE = /^ {0,3}([-*_])(\s*\1){2,}\s*$/;
  const QUOTE = /^ {0,3}>\s?(.*)$/;
  const ITEM = /^(\s*)([-*+]|\d{1,9}[.)])\s+(.*)$/;

  function indentOf(line) {
    return line.match(/^\s*/)[0].replace(/\t/g, "    ").length;
  }

  function startsBlock(line) {
    return FENCE.test(line) || HEADING.test(line) || RULE.test(line) || QUOTE.test(line) || ITEM.test(line);
  }

  // Split text into blocks, each with `key` (its type and source text) so an unchanged block is not rebuilt.
  function parseBlocks(text) {
    const lines = text.replace(/\r\n?/g, "\n").split("\n");
    const blocks = [];
    let i = 0;
    while (i < lines.length) {
      const line = lines[i];
      if (!line.trim()) {
        i += 1;
        continue;
      }
      let match;
      if ((match = line.match(FENCE))) {
        const fence = match[1];
        const body = [];
        i += 1;
        while (i < lines.length && !lines[i].trim().startsWith(fence)) body.push(lines[i++]);
        const closed = i < lines.length;
        if (closed) i += 1;
        blocks.push({ type: "code", lang: match[2], text: body.join("\n"), closed });
      } else if ((match = line.match(HEADING))) {
        blocks.push({ type: "heading", level: match[1].length, text: match[2] });
        i += 1;
      } else if (RULE.test(line)) {
        blocks.push({ type: "rule", text: "" });
        i += 1;
      } else if (QUOTE.test(line)) {
        const body = [];
        while (i < lines.length && (match = lines[i].match(QUOTE))) {
          body.push(match[1]);
          i += 1;
        }
        blocks.push({ type: "quote", text: body.join("\n") });
      } else if ((match = line.match(ITEM))) {
        const ordered = /\d/.test(match[2]);
        const base = indentOf(line);
        const items = [];
        while (i < lines.length) {
          const current = lines[i];
          const item = current.match(ITEM);
          if (item && indentOf(current) <= base + 1) {
            if (/\d/.test(item[2]) !== ordered) break; // a different kind of list starts
            items.push({ start: ordered ? parseInt(item[2], 10) : null, lines: [item[3]] });
            i += 1;
          } else if (current.trim() && (indentOf(current) > base || !startsBlock(current)) && items.length) {
            // Continuation: deeper lines (a nested list) or lazy text belong to the current item.
            items[items.length - 1].lines.push(current.slice(Math.min(indentOf(current), base + 2)));
            i += 1;
          } else if (!current.trim() && i + 1 < lines.length && indentOf(lines[i + 1]) > base && lines[i + 1].trim()) {
            i += 1; // a blank line inside an item
          } else {
            break;
          }
        }
        blocks.push({ type: ordered ? "ol" : "ul", items, text: items.map((it) => it.lines.join("\n")).join("\n\u0000") });
      } else {
        const body = [];
        while (i < lines.length && lines[i].trim() && !(body.length && startsBlock(lines[i]))) body.push(lines[i++]);
        blocks.push({ type: "p", text: body.join("\n") });
      }
    }
    for (const block of blocks) block.key = `${block.type}:${block.level || block.lang || ""}:${block.closed}:${block.text}`;
    return blocks;
  }

  function renderBlock(block, options, depth) {
    switch (block.type) {
      case "heading": {
        // Answers sit under the page's own headings: # in an answer is a sub-heading (h3..h6).
        const node = el(`h${Math.min(6, block.level + 2)}`, "md-heading");
        renderInline(block.text, node, options);
        return node;
      }
      case "rule":
        return el("hr");
      case "code": {
        const pre = el("pre", "md-code");
        const code = el("code");
        if (block.lang) code.className = `language-${block.lang.replace(/[^\w-]/g, "")}`;
        code.textContent = block.text;
        pre.append(code);
        pre.tabIndex = 0; // scrollable: reachable by keyboard
        return pre;
      }
      case "quote": {
        const node = el("blockquote");
        renderBlocksInto(node, depth < MAX_DEPTH ? parseBlocks(block.text) : [{ type: "p", text: block.text }], options, depth + 1);
        return node;
      }
      case "ol":
      case "ul": {
        const list = el(block.type);
        if (block.type === "ol" && block.items[0] && block.items[0].start !== 1) list.start = block.items[0].start;
        for (const item of block.items) {
          const li = el("li");
          if (item.lines.length === 1 || depth >= MAX_DEPTH) {
            renderInline(item.lines.join("\n"), li, options);
          } else {
            const inner = parseBlocks(item.lines.join("\n"));
            // A single paragraph stays inline (no <p> margins inside a tight list).
            if (inner.length === 1 && inner[0].type === "p") renderInline(inner[0].text, li, options);
            else renderBlocksInto(li, inner, options, depth + 1);
          }
          list.append(li);
        }
        return list;
      }
      default: {
        const p = el("p");
        renderInline(block.text, p, options);
        return p;
      }
    }
  }

  function renderBlocksInto(container, blocks, options, depth) {
    for (const block of blocks) container.append(renderBlock(block, options, depth));
  }

  // --- inline ------------------------------------------------------------------------------------------------

  const BARE_URL = /^https?:\/\/[^\s<>"'`\u3000-\u303f\uff00-\uffef]+/i;
  const TRAILING_PUNCT = /[.,;:!?'")\]]+$/;

  // Where the closing delimiter of an emphasis run starting at `from` is (-1 if none on this text).
  // For `_`, the closing run must also end a word (not be followed by a letter or digit).
  function findClosing(text, delimiter, from) {
    let j = text.indexOf(delimiter, from);
    while (j !== -1) {
      const endsWord = delimiter[0] !== "_" || !/\w/.test(text[j + delimiter.length] || "");
      if (j > from && !/\s/.test(text[j - 1]) && endsWord) return j;
      j = text.indexOf(delimiter, j + 1);
    }
    return -1;
  }

  // Where the `)` closing a link destination starting at `from` is, allowing balanced parentheses inside.
  function findLinkEnd(text, from) {
    let depth = 0;
    for (let j = from; j < text.length; j += 1) {
      const ch = text[j];
      if (ch === "\n" || ch === " ") return -1;
      if (ch === "(") depth += 1;
      else if (ch === ")") {
        if (depth === 0) return j;
        depth -= 1;
      }
    }
    return -1;
  }

  function renderInline(text, parent, options) {
    let buffer = "";
    const flush = () => {
      if (buffer) parent.append(document.createTextNode(buffer));
      buffer = "";
    };
    let i = 0;
    while (i < text.length) {
      const ch = text[i];
      const rest = text.slice(i);
      let match;
      if (ch === "\\" && i + 1 < text.length && /[\\`*_{}[\]()#+\-.!<>~|]/.test(text[i + 1])) {
        buffer += text[i + 1];
        i += 2;
        continue;
      }
      if (ch === "\n") {
        flush();
        parent.append(el("br"));
        i += 1;
        continue;
      }
      if (ch === "`") {
        const ticks = rest.match(/^`+/)[0];
        const end = text.indexOf(ticks, i + ticks.length);
        if (end !== -1) {
          flush();
          const code = el("code", "md-inline-code");
          code.textContent = text.slice(i + ticks.length, end).trim() || text.slice(i + ticks.length, end);
          parent.append(code);
          i = end + ticks.length;
          continue;
        }
      }
      // `_` and `__` only emphasise at word boundaries, so snake_case and __dunder__ names stay as they are.
      const opensWord = ch === "*" || !/\w/.test(text[i - 1] || "");
      if ((ch === "*" || ch === "_") && opensWord && text[i + 1] === ch && text[i + 2] && !/\s/.test(text[i + 2])) {
        const end = findClosing(text, ch + ch, i + 2);
        if (end !== -1) {
          flush();
          const strong = el("strong");
          renderInline(text.slice(i + 2, end), strong, options);
          parent.append(strong);
          i = end + 2;
          continue;
        }
      }
      if ((ch === "*" || (ch === "_" && opensWord)) && text[i + 1] && !/[\s*_]/.test(text[i + 1])) {
        const end = findClosing(text, ch, i + 1);
        if (end !== -1) {
          flush();
          const em = el("em");
          renderInline(text.slice(i + 1, end), em, options);
          parent.append(em);
          i = end + 1;
          continue;
        }
      }
      if (ch === "[") {
        const citation = rest.match(/^\[(\d{1,3})\](?!\()/);
        if (citation && options.citeHref) {
          flush();
          const sup = el("sup", "md-cite");
          const a = link(options.citeHref(citation[1]), false);
          a.textContent = `[${citation[1]}]`;
          a.setAttribute("aria-label", options.citeLabel ? options.citeLabel(citation[1]) : `source ${citation[1]}`);
          sup.append(a);
          parent.append(sup);
          i += citation[0].length;
          continue;
        }
        const close = text.indexOf("](", i + 1);
        if (close !== -1 && !text.slice(i + 1, close).includes("\n")) {
          const end = findLinkEnd(text, close + 2);
          if (end !== -1) {
            const label = text.slice(i + 1, close);
            const href = safeHref(text.slice(close + 2, end).replace(/^<|>$/g, ""));
            flush();
            if (href) {
              const a = link(href, isExternal(href));
              renderInline(label, a, options);
              parent.append(a);
            } else {
              renderInline(label, parent, options); // an unsafe target: the words stay, the link does not
            }
            i = end + 1;
            continue;
          }
        }
      }
      if (ch === "<" && (match = rest.match(/^<(https?:\/\/[^\s<>]+)>/i))) {
        const href = safeHref(match[1]);
        if (href) {
          flush();
          const a = link(href, isExternal(href));
          a.textContent = match[1];
          parent.append(a);
          i += match[0].length;
          continue;
        }
      }
      if ((ch === "h" || ch === "H") && !/\w/.test(text[i - 1] || "") && (match = rest.match(BARE_URL))) {
        const url = match[0].replace(TRAILING_PUNCT, "");
        const href = safeHref(url);
        if (href) {
          flush();
          const a = link(href, isExternal(href));
          a.textContent = url;
          parent.append(a);
          i += url.length;
          continue;
        }
      }
      buffer += ch;
      i += 1;
    }
    flush();
  }

  // --- a live view -----------------------------------------------------------------------------------------

  // Renders a growing text into `container`, rebuilding only the blocks that changed since the last update:
  // while an answer streams, only its last block changes, so earlier paragraphs are left alone (and a screen
  // reader is not handed the whole answer again with every token).
  function createView(container, options) {
    let rendered = []; // [{key, node}]
    let pending = null;
    let frame = 0;

    function apply(text) {
      const blocks = parseBlocks(text);
      let same = 0;
      while (same < blocks.length && same < rendered.length && rendered[same].key === blocks[same].key) same += 1;
      for (const old of rendered.slice(same)) old.node.remove();
      rendered = rendered.slice(0, same);
      for (const block of blocks.slice(same)) {
        const node = renderBlock(block, options || {}, 0);
        container.append(node);
        rendered.push({ key: block.key, node });
      }
    }

    return {
      // Coalesced to one render per animation frame: tokens can arrive far faster than the screen refreshes.
      update(text) {
        pending = text;
        if (!frame) {
          frame = requestAnimationFrame(() => {
            frame = 0;
            apply(pending);
          });
        }
      },
      flush(text) {
        if (frame) cancelAnimationFrame(frame);
        frame = 0;
        apply(text === undefined ? pending || "" : text);
      },
    };
  }

  function render(container, text, options) {
    container.replaceChildren();
    renderBlocksInto(container, parseBlocks(text), options || {}, 0);
  }

  window.HelpMarkdown = { createView, render, safeHref, parseBlocks };
})();
