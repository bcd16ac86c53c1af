// The chat page: one question at a time over WebSocket (default) or SSE, events rendered as they arrive.
//
// Safety: text from the model or the corpus reaches the page only as text nodes (markdown.js builds elements
// with createElement/textContent, never innerHTML), and links only through http(s) URLs.
// Resilience: questions are asked with `on_disconnect: "continue"`, so when the connection drops mid-answer the
// server finishes the answer and keeps its events; the page reconnects with backoff and asks for the events after
// the last seq it has (WebSocket `resume`, SSE `Last-Event-ID`). Events are applied once each, by seq. Leaving
// the page (close, navigation, reload) is no dropped connection: the answer is cancelled then (`cancelOnLeave`).
"use strict";

(function () {
  const config = JSON.parse(document.getElementById("chat-config").textContent);
  const Markdown = window.HelpMarkdown;

  const TEXT = {
    "zh-hant": {
      skipToQuestion: "跳到提問欄",
      settings: "連線設定", transport: "連線方式", backend: "模型介面", conversations: "對話紀錄",
      newConversation: "新對話", messagesTitle: "對話內容", welcomeTitle: "您好，有什麼可以幫您？",
      suggestionsLabel: "建議問題", privacy: "隱私權聲明",
      questionLabel: "您的問題", placeholder: "請輸入您的問題…", send: "送出", stop: "停止",
      hint: "Enter 送出，Shift + Enter 換行", chars: "{n} / {max} 字", you: "您", assistant: "小幫手",
      noConversations: "還沒有對話紀錄。", untitled: "（未命名對話）", loadFailed: "無法載入對話紀錄。",
      stages: "處理進度", steps: "{n} 個步驟", thinking: "正在思考…", done: "完成", stageTime: "{s} 秒",
      reasoning: "推理過程", sources: "資料來源", downloads: "附件下載", download: "下載", source: "資料來源 {n}",
      reconnecting: "連線中斷，正在重新連線…（第 {n} 次）", resumed: "已重新連線，繼續接收回答。",
      answering: "小幫手正在回答…", answered: "回答完成。", stopped: "已停止回答。",
      helpful: "這個回答有幫助嗎？", up: "有幫助", down: "沒有幫助", commentLabel: "想補充說明嗎？（選填）",
      commentPlaceholder: "例如：哪裡不清楚、缺少了什麼", sendComment: "送出意見", thanks: "謝謝您的回饋！",
      thanksComment: "已收到您的意見，謝謝！", feedbackFailed: "回饋沒有送出：{m}",
      retry: "重新提問", retryIn: "{s} 秒後可重試", conversationOpened: "已開啟對話：{t}",
      newConversationStarted: "已開始新對話。", drawerClose: "關閉對話紀錄",
      copy: "複製", copied: "已複製", copyFailed: "無法複製，請手動選取文字。", regenerate: "重新產生",
      regenerateLabel: "重新產生這個回答", preview: "預覽段落", previewOf: "預覽：{t}",
      rename: "重新命名", renameLabel: "對話名稱", renameOf: "重新命名：{t}", deleteOf: "刪除：{t}",
      delete: "刪除", deleteConfirm: "要刪除「{t}」嗎？對話內容將無法復原。", renamed: "已重新命名為「{t}」。",
      deleted: "已刪除對話「{t}」。", actionFailed: "操作沒有完成，請再試一次。",
      errors: {
        bad_request: "無法處理這個問題。", blocked: "很抱歉，這個問題無法回答。",
        busy: "目前使用人數眾多，請稍後再試。", timeout: "回應逾時，請再試一次。",
        upstream_error: "語言模型服務暫時無法使用，請稍後再試。", cancelled: "已停止回答。",
        internal: "系統發生錯誤，請再試一次。", network: "連線中斷，無法取得完整回答。",
        expired: "回答已逾時保存期限，無法續傳，請重新提問。",
        unavailable: "伺服器正在重新啟動，請再問一次。",
      },
      stageNames: {
        guard: "安全檢查", language_normalizer: "語言辨識", cache_lookup: "查詢快取", cache_response: "快取回答",
        planner: "理解問題", followup_transform: "處理追問", query_builder: "建立查詢", tool_executor: "搜尋資料",
        retrieval_checker: "檢查結果", response_synth: "撰寫回答", cache_store: "儲存快取", telemetry: "紀錄",
      },
    },
    en: {
      skipToQuestion: "Skip to the question box", settings: "Connection", transport: "Transport",
      backend: "Model API", conversations: "Conversations", newConversation: "New conversation",
      messagesTitle: "Conversation", welcomeTitle: "Hello! How can I help?",
      suggestionsLabel: "Suggested questions", privacy: "Privacy notice",
      questionLabel: "Your question", placeholder: "Ask a question…", send: "Send",
      stop: "Stop", hint: "Enter to send, Shift + Enter for a new line", chars: "{n} / {max} characters",
      you: "You", assistant: "Assistant", noConversations: "No conversations yet.", untitled: "(untitled)",
      loadFailed: "Could not load your conversations.", stages: "Progress", steps: "{n} steps",
      thinking: "Thinking…", done: "Done", stageTime: "{s} s", reasoning: "Reasoning", sources: "Sources",
      downloads: "Downloads", download: "Download", source: "Source {n}",
      reconnecting: "Connection lost, reconnecting… (attempt {n})", resumed: "Reconnected; the answer continues.",
      answering: "The assistant is answering…", answered: "Answer complete.", stopped: "Answer stopped.",
      helpful: "Was this answer helpful?", up: "Helpful", down: "Not helpful",
      commentLabel: "Anything to add? (optional)", commentPlaceholder: "e.g. what was unclear or missing",
      sendComment: "Send comment", thanks: "Thank you for your feedback!", thanksComment: "Comment received, thank you!",
      feedbackFailed: "Feedback not sent: {m}", retry: "Ask again", retryIn: "You can retry in {s} s",
      conversationOpened: "Opened conversation: {t}", newConversationStarted: "Started a new conversation.",
      drawerClose: "Close conversations",
      copy: "Copy", copied: "Copied", copyFailed: "Could not copy; select the text instead.", regenerate: "Regenerate",
      regenerateLabel: "Regenerate this answer", preview: "Preview passage", previewOf: "Preview: {t}",
      rename: "Rename", renameLabel: "Conversation name", renameOf: "Rename: {t}", deleteOf: "Delete: {t}",
      delete: "Delete", deleteConfirm: "Delete “{t}”? Its messages cannot be recovered.", renamed: "Renamed to “{t}”.",
      deleted: "Deleted the conversation “{t}”.", actionFailed: "That did not work; please try again.",
      errors: {
        bad_request: "This question cannot be handled.", blocked: "Sorry, this question cannot be answered.",
        busy: "The service is busy right now.", timeout: "The answer took too long. Please try again.",
        upstream_error: "The language model service is unavailable. Please try again later.",
        cancelled: "Answer stopped.", internal: "Something went wrong. Please try again.",
        network: "The connection was lost before the answer was complete.",
        expired: "This answer is no longer kept on the server; please ask again.",
        unavailable: "The server is restarting; please ask again.",
      },
      stageNames: {
        guard: "Safety check", language_normalizer: "Language", cache_lookup: "Cache lookup",
        cache_response: "Cached answer", planner: "Understanding", followup_transform: "Follow-up",
        query_builder: "Building the query", tool_executor: "Searching", retrieval_checker: "Checking results",
        response_synth: "Writing the answer", cache_store: "Caching", telemetry: "Logging",
      },
    },
  };
  // The organisation's name and words (admin: Name and words; `manage.py branding set`), per page language.
  for (const [lang, words] of Object.entries((config.organisation || {}).texts || {})) {
    if (!TEXT[lang]) continue;
    Object.assign(TEXT[lang], {
      title: words.name, titleShort: words.name, tagline: words.tagline, welcomeText: words.welcome,
      suggestions: words.suggestions,
    });
  }

  // Codes worth a "try again" button (the others say something about the question itself).
  const RETRYABLE = new Set([
    "busy", "timeout", "upstream_error", "internal", "network", "cancelled", "expired", "unavailable",
  ]);
  const RECONNECT_ATTEMPTS = 8;

  const $ = (id) => document.getElementById(id);
  const els = {
    form: $("ask-form"), question: $("question"), send: $("send"), stop: $("stop"),
    transport: $("transport"), backend: $("backend"), messages: $("messages"), scroller: $("scroller"),
    conversations: $("conversation-list"), newConversation: $("new-conversation"), welcome: $("welcome"),
    suggestions: $("suggestions"), charCount: $("char-count"), announcer: $("announcer"),
    historyToggle: $("history-toggle"), history: $("history"), backdrop: $("backdrop"), main: $("main"),
    messagesTitle: $("messages-title"), settings: $("settings"),
  };

  const state = {
    lang: initialLanguage(),
    conversationId: "",
    conversations: [],
    run: null, // the answer being streamed (see startRun)
    socket: null,
    socketReady: null,
    viewCount: 0,
  };

  function initialLanguage() {
    const saved = localStorage.getItem("hc-lang");
    if (saved && TEXT[saved]) return saved;
    const browser = (navigator.language || config.defaultLanguage || "en").toLowerCase();
    return browser.startsWith("zh") ? "zh-hant" : "en";
  }

  function t(key, values) {
    let text = TEXT[state.lang][key] ?? TEXT.en[key] ?? key;
    if (values && typeof text === "string") {
      for (const [name, value] of Object.entries(values)) text = text.replaceAll(`{${name}}`, String(value));
    }
    return text;
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function icon(path, size) {
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("viewBox", "0 0 24 24");
    svg.setAttribute("width", String(size || 18));
    svg.setAttribute("height", String(size || 18));
    svg.setAttribute("aria-hidden", "true");
    const p = document.createElementNS(ns, "path");
    p.setAttribute("d", path);
    svg.append(p);
    return svg;
  }

  const ICONS = {
    up: "M7 22V11M2 13v7a2 2 0 0 0 2 2h12.4a2 2 0 0 0 2-1.7l1.4-8A2 2 0 0 0 17.8 10H14V5a3 3 0 0 0-3-3l-4 9",
    down: "M17 2v11M22 11V4a2 2 0 0 0-2-2H7.6a2 2 0 0 0-2 1.7l-1.4 8A2 2 0 0 0 6.2 14H10v5a3 3 0 0 0 3 3l4-9",
    download: "M12 3v12m0 0l-5-5m5 5l5-5M4 21h16",
    doc: "M14 3H7a2 2 0 0 0-2 2v14a2 2 0 0 0 2 2h10a2 2 0 0 0 2-2V8zM14 3v5h5",
    check: "M5 12l5 5L20 7",
    copy: "M9 9h10a2 2 0 0 1 2 2v8a2 2 0 0 1-2 2H11a2 2 0 0 1-2-2zM5 15a2 2 0 0 1-2-2V5a2 2 0 0 1 2-2h8a2 2 0 0 1 2 2",
    regenerate: "M21 12a9 9 0 1 1-2.6-6.4M21 3v6h-6",
    rename: "M4 20h4L19 9l-4-4L4 16zM13.5 6.5l4 4",
    trash: "M4 7h16M10 11v6M14 11v6M6 7l1 13a1 1 0 0 0 1 1h8a1 1 0 0 0 1-1l1-13M9 7V4h6v3",
    chat: "M4 5.5A2.5 2.5 0 0 1 6.5 3h11A2.5 2.5 0 0 1 20 5.5v8a2.5 2.5 0 0 1-2.5 2.5H10l-4.5 4v-4A2.5 2.5 0 0 1 4 13.5z",
  };

  function announce(text) {
    // Cleared first so the same words twice are announced twice.
    els.announcer.textContent = "";
    window.setTimeout(() => { els.announcer.textContent = text; }, 50);
  }

  function scrollToEnd(force) {
    const scroller = els.scroller;
    const nearEnd = scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 160;
    if (force || nearEnd) scroller.scrollTop = scroller.scrollHeight;
  }

  // --- language ----------------------------------------------------------------------------------------------

  function applyLanguage() {
    document.documentElement.lang = state.lang === "en" ? "en" : "zh-Hant";
    document.title = `${t("title")} · Help centre`;
    for (const node of document.querySelectorAll("[data-i18n]")) node.textContent = t(node.dataset.i18n);
    for (const node of document.querySelectorAll("[data-i18n-placeholder]")) {
      node.placeholder = t(node.dataset.i18nPlaceholder);
    }
    for (const button of document.querySelectorAll(".lang-switch button")) {
      button.setAttribute("aria-pressed", String(button.dataset.lang === state.lang));
    }
    els.suggestions.setAttribute("aria-label", t("suggestionsLabel"));
    els.suggestions.replaceChildren();
    for (const text of t("suggestions")) {
      const li = el("li");
      const button = el("button", "suggestion", text);
      button.type = "button";
      button.addEventListener("click", () => {
        els.question.value = text;
        updateCharCount();
        els.form.requestSubmit();
      });
      li.append(button);
      els.suggestions.append(li);
    }
    updateCharCount();
    renderConversations();
  }

  function setLanguage(lang) {
    state.lang = lang;
    localStorage.setItem("hc-lang", lang);
    applyLanguage();
  }

  // --- one message on the page -----------------------------------------------------------------------------

  function showConversationArea() {
    els.welcome.hidden = true;
  }

  function addUserMessage(text) {
    showConversationArea();
    const li = el("li", "message user");
    const bubble = el("div", "bubble");
    bubble.append(el("span", "visually-hidden", `${t("you")}: `), el("div", "user-text", text));
    li.append(bubble);
    els.messages.append(li);
    scrollToEnd(true);
    return li;
  }

  function addAnswerView() {
    showConversationArea();
    state.viewCount += 1;
    const id = `answer-${state.viewCount}`;
    const li = el("li", "message assistant");
    li.id = id;
    const avatar = el("div", "avatar");
    avatar.setAttribute("aria-hidden", "true");
    avatar.append(icon(ICONS.chat, 18));
    const bubble = el("div", "bubble");
    const who = el("div", "who", t("assistant"));

    const timeline = el("details", "timeline");
    const summary = el("summary");
    const spinner = el("span", "spinner");
    spinner.setAttribute("aria-hidden", "true");
    const timelineLabel = el("span", "timeline-label", t("thinking"));
    summary.append(spinner, timelineLabel);
    const stages = el("ol", "stages");
    stages.setAttribute("aria-label", t("stages"));
    timeline.append(summary, stages);

    const reasoning = el("details", "reasoning");
    reasoning.hidden = true;
    const reasoningText = el("div", "reasoning-text");
    reasoning.append(el("summary", "", t("reasoning")), reasoningText);

    // The streaming answer is a polite live region; aria-busy keeps screen readers from reading every token.
    const answer = el("div", "answer markdown");
    answer.setAttribute("aria-live", "polite");
    answer.setAttribute("aria-busy", "true");
    const notice = el("p", "notice");
    notice.hidden = true;
    const error = el("div", "error-box");
    error.setAttribute("role", "alert");
    error.hidden = true;
    const sources = el("section", "sources");
    sources.hidden = true;
    const footer = el("div", "answer-footer");

    bubble.append(who, timeline, reasoning, answer, notice, error, sources, footer);
    li.append(avatar, bubble);
    els.messages.append(li);
    scrollToEnd(true);

    const view = {
      id, li, timeline, timelineLabel, spinner, stages, stageItems: new Map(), reasoning, reasoningText,
      answer, notice, error, sources, footer, text: "", reasoningRaw: "", requestId: "", started: performance.now(),
    };
    view.markdown = Markdown.createView(answer, markdownOptions(view));
    return view;
  }

  function markdownOptions(view) {
    return {
      citeHref: (n) => `#${view.id}-source-${n}`,
      citeLabel: (n) => t("source", { n }),
    };
  }

  function stageName(node) {
    return t("stageNames")[node] || node;
  }

  function showStage(view, event) {
    if (event.stage !== "start" && event.stage !== "end") return; // e.g. planner "plan": details, not a stage
    let item = view.stageItems.get(event.node);
    if (!item) {
      item = el("li", "stage");
      item.append(el("span", "stage-dot"), el("span", "stage-name", stageName(event.node)), el("span", "stage-time"));
      item.dataset.node = event.node;
      view.stageItems.set(event.node, item);
      view.stages.append(item);
    }
    if (event.stage === "start") {
      item.className = "stage running";
      view.timelineLabel.textContent = `${stageName(event.node)}…`;
    } else {
      item.className = "stage done";
      const ms = typeof event.ms === "number" ? event.ms : typeof event.elapsed_ms === "number" ? event.elapsed_ms : null;
      if (ms !== null) item.querySelector(".stage-time").textContent = `${Math.round(ms)} ms`;
    }
  }

  function finishTimeline(view, ok, elapsedMs) {
    view.spinner.hidden = true;
    view.timeline.classList.add(ok ? "ok" : "failed");
    for (const item of view.stageItems.values()) {
      if (item.classList.contains("running")) item.className = ok ? "stage done" : "stage failed";
    }
    const seconds = ((elapsedMs ?? performance.now() - view.started) / 1000).toFixed(1);
    const steps = t("steps", { n: view.stageItems.size });
    view.timelineLabel.textContent = ok ? `${t("done")} · ${steps} · ${t("stageTime", { s: seconds })}` : `${t("stages")} · ${steps}`;
  }

  // The offline backend ends its answer with its own "Sources:" list; the page shows sources as a list of
  // links below, so that trailing copy is dropped once the sources are known.
  function withoutTrailingSourceList(text, sources) {
    if (!sources || !sources.length) return text;
    const cut = text.lastIndexOf("\n\n");
    if (cut === -1) return text;
    const lines = text.slice(cut + 2).trim().split("\n");
    const listed = lines.slice(1);
    const isList = /[:：]\s*$/.test(lines[0]) && listed.length > 0 && listed.every((line) => /^\[\d+\]\s/.test(line));
    return isList ? text.slice(0, cut) : text;
  }

  function showSources(view, sources, attachments) {
    view.sources.replaceChildren();
    const list = el("ol", "source-list");
    for (const source of sources || []) {
      const li = el("li", "source");
      li.id = `${view.id}-source-${source.ref}`;
      li.tabIndex = -1; // a citation link moves focus here
      const number = el("span", "source-ref", String(source.ref));
      number.setAttribute("aria-hidden", "true");
      const body = el("div", "source-body");
      const title = source.title || source.doc_id || `#${source.ref}`;
      const href = Markdown.safeHref(source.url);
      if (href) {
        const a = el("a", "source-title", title);
        a.href = href;
        a.target = "_blank";
        a.rel = "noopener noreferrer";
        body.append(a);
        try {
          body.append(el("span", "source-host", new URL(href).host));
        } catch (_) { /* no host to show */ }
      } else {
        body.append(el("span", "source-title", title));
      }
      const download = Markdown.safeHref(source.download_url);
      if (download) body.append(downloadLink(download, `${t("download")}${source.form_id ? ` ${source.form_id}` : ""}`));
      if (source.snippet) body.append(sourcePreview(source.snippet, title));
      li.append(number, body);
      list.append(li);
    }
    const files = (attachments || []).filter((file) => Markdown.safeHref(file.url));
    const listedDownloads = new Set((sources || []).map((s) => Markdown.safeHref(s.download_url)).filter(Boolean));
    const extra = files.filter((file) => !listedDownloads.has(Markdown.safeHref(file.url)));
    if (!list.children.length && !extra.length) return;
    if (list.children.length) view.sources.append(el("h3", "", t("sources")), list);
    if (extra.length) {
      const downloads = el("ul", "download-list");
      for (const file of extra) {
        const li = el("li");
        li.append(downloadLink(Markdown.safeHref(file.url), file.name || t("download")));
        downloads.append(li);
      }
      view.sources.append(el("h3", "", t("downloads")), downloads);
    }
    view.sources.hidden = false;
  }

  // The cited passage, folded under its source: the words the answer was built from, without leaving the page
  // (and the only way to read a source that has no URL).
  function sourcePreview(snippet, title) {
    const details = el("details", "source-preview");
    const summary = el("summary", "", t("preview"));
    summary.setAttribute("aria-label", t("previewOf", { t: title }));
    details.append(summary, el("blockquote", "source-snippet", snippet));
    return details;
  }

  function downloadLink(href, label) {
    const a = el("a", "download-link");
    a.href = href;
    if (new URL(href).origin === window.location.origin) a.setAttribute("download", "");
    else {
      a.target = "_blank";
      a.rel = "noopener noreferrer";
    }
    a.append(icon(ICONS.download, 16), document.createTextNode(label));
    return a;
  }

  function showNotice(view, text) {
    view.notice.textContent = text || "";
    view.notice.hidden = !text;
  }

  function clearError(view) {
    if (view.countdown) window.clearInterval(view.countdown);
    view.countdown = 0;
    view.error.hidden = true;
    view.error.replaceChildren();
  }

  function showError(view, code, message, retryAfter, onRetry) {
    clearError(view);
    const errors = t("errors");
    const box = view.error;
    box.className = `error-box ${code === "cancelled" ? "neutral" : ""}`;
    box.append(el("p", "error-title", errors[code] || errors.internal));
    // The server's own words help when they are about the question; they are English, shown as a detail.
    if (message && (code === "bad_request" || code === "blocked")) box.append(el("p", "error-detail", message));
    if (onRetry && RETRYABLE.has(code)) {
      const retry = el("button", "retry-button", t("retry"));
      retry.type = "button";
      retry.addEventListener("click", onRetry);
      box.append(retry);
      const seconds = Math.ceil(Number(retryAfter) || 0);
      if ((code === "busy" || code === "unavailable") && seconds > 0) {
        let left = seconds;
        retry.disabled = true;
        const countdown = el("span", "countdown", t("retryIn", { s: left }));
        countdown.setAttribute("aria-live", "off"); // the first value is announced with the alert, not each tick
        box.append(countdown);
        view.countdown = window.setInterval(() => {
          left -= 1;
          if (left <= 0) {
            window.clearInterval(view.countdown);
            view.countdown = 0;
            countdown.remove();
            retry.disabled = false;
          } else {
            countdown.textContent = t("retryIn", { s: left });
          }
        }, 1000);
      }
    }
    box.hidden = false;
    scrollToEnd();
  }

  // --- copy and regenerate ----------------------------------------------------------------------------------

  // What "Copy" puts on the clipboard: the answer as written (markdown, with its [n] citations) and, since the
  // citations mean nothing without them, the numbered sources as plain lines.
  function answerText(body, sources) {
    const lines = (sources || []).map((s) => `[${s.ref}] ${s.title || s.doc_id || ""}${s.url ? ` ${s.url}` : ""}`.trim());
    return lines.length ? `${body.trim()}\n\n${t("sources")}:\n${lines.join("\n")}` : body.trim();
  }

  async function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      try {
        await navigator.clipboard.writeText(text);
        return true;
      } catch (_) { /* denied: try the old way below */ }
    }
    // Plain http on another host is no secure context: the selection and execCommand still copy there.
    const area = el("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.className = "visually-hidden";
    document.body.append(area);
    area.select();
    let ok = false;
    try {
      ok = document.execCommand("copy");
    } catch (_) { ok = false; }
    area.remove();
    return ok;
  }

  function actionButton(className, iconPath, label, title) {
    const button = el("button", `answer-action ${className}`);
    button.type = "button";
    const text = el("span", "action-label", label);
    button.append(icon(iconPath, 16), text);
    if (title) button.setAttribute("aria-label", title);
    return button;
  }

  function addAnswerActions(view, question, body, sources) {
    const actions = el("div", "answer-actions");
    const copy = actionButton("copy-button", ICONS.copy, t("copy"));
    copy.addEventListener("click", async () => {
      const ok = await copyText(answerText(body, sources));
      copy.querySelector(".action-label").textContent = ok ? t("copied") : t("copy");
      announce(ok ? t("copied") : t("copyFailed"));
      window.setTimeout(() => { copy.querySelector(".action-label").textContent = t("copy"); }, 2000);
    });
    actions.append(copy);
    if (question) {
      const again = actionButton("regenerate-button", ICONS.regenerate, t("regenerate"), t("regenerateLabel"));
      again.addEventListener("click", () => askAgain(question));
      actions.append(again);
    }
    view.footer.prepend(actions);
  }

  // --- feedback ----------------------------------------------------------------------------------------------

  function addFeedback(view, requestId) {
    if (!requestId) return;
    const group = el("div", "feedback");
    group.setAttribute("role", "group");
    const label = el("span", "feedback-label", t("helpful"));
    label.id = `${view.id}-feedback-label`;
    group.setAttribute("aria-labelledby", label.id);
    const buttons = el("div", "feedback-buttons");
    const form = el("form", "feedback-form");
    form.hidden = true;
    const status = el("p", "feedback-status");
    status.setAttribute("role", "status");
    let score = "";

    for (const kind of ["up", "down"]) {
      const button = el("button", `thumb thumb-${kind}`);
      button.type = "button";
      button.setAttribute("aria-pressed", "false");
      button.append(icon(ICONS[kind], 18), el("span", "visually-hidden", t(kind)));
      button.title = t(kind);
      button.addEventListener("click", async () => {
        score = kind;
        for (const other of buttons.children) other.setAttribute("aria-pressed", String(other === button));
        form.hidden = false;
        const ok = await sendFeedback(requestId, score, "", status);
        if (ok) status.textContent = t("thanks");
      });
      buttons.append(button);
    }

    const commentId = `${view.id}-comment`;
    const commentLabel = el("label", "", t("commentLabel"));
    commentLabel.htmlFor = commentId;
    const comment = el("textarea");
    comment.id = commentId;
    comment.rows = 2;
    comment.maxLength = 2000;
    comment.placeholder = t("commentPlaceholder");
    const submit = el("button", "secondary-button", t("sendComment"));
    submit.type = "submit";
    form.append(commentLabel, comment, submit);
    form.addEventListener("submit", async (event) => {
      event.preventDefault();
      if (!score) return;
      submit.disabled = true;
      const ok = await sendFeedback(requestId, score, comment.value.trim(), status);
      submit.disabled = false;
      if (ok) {
        status.textContent = t("thanksComment");
        form.hidden = true;
      }
    });

    group.append(label, buttons);
    view.footer.append(group, form, status);
  }

  async function sendFeedback(requestId, score, comment, status) {
    status.textContent = "";
    const body = JSON.stringify({ request_id: requestId, score, comment });
    // An answer is written to the database just after its last event: a click in that instant may find it
    // missing, so a 404 is tried once more a moment later.
    for (let attempt = 0; attempt < 2; attempt += 1) {
      try {
        const response = await fetch(config.feedbackPath, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body,
          credentials: "same-origin",
        });
        if (response.ok) return true;
        if (response.status === 404 && attempt === 0) {
          await new Promise((resolve) => window.setTimeout(resolve, 1000));
          continue;
        }
        let message = `HTTP ${response.status}`;
        try {
          message = (await response.json()).error.message || message;
        } catch (_) { /* not JSON */ }
        status.textContent = t("feedbackFailed", { m: message });
        return false;
      } catch (_) {
        status.textContent = t("feedbackFailed", { m: t("errors").network });
        return false;
      }
    }
    return false;
  }

  // --- a run: one answer being streamed ----------------------------------------------------------------------

  function startRun(question, view) {
    const run = {
      question, view, transport: els.transport.value, backend: els.backend.value,
      requestId: "", lastSeq: 0, done: false, attempts: 0, timer: 0, abort: null, stopping: false,
    };
    state.run = run;
    setRunning(true);
    announce(t("answering"));
    return run;
  }

  function setRunning(running) {
    els.send.hidden = running;
    els.stop.hidden = !running;
    els.question.setAttribute("aria-busy", String(running));
  }

  // Every event of both transports goes through here, once per seq, in order.
  function handleEvent(run, event) {
    if (run.done) return;
    if (event.request_id && !run.requestId) run.requestId = event.request_id;
    if (event.request_id && event.request_id !== run.requestId) return; // a refusal of something else
    if (typeof event.seq === "number") {
      if (event.seq <= run.lastSeq) return; // already applied (a resume overlaps by design only in theory)
      run.lastSeq = event.seq;
    }
    if (run.attempts) {
      run.attempts = 0;
      showNotice(run.view, "");
      announce(t("resumed"));
    }
    const view = run.view;
    switch (event.channel) {
      case "status":
        showStage(view, event);
        break;
      case "answer":
        view.text += event.delta || "";
        view.markdown.update(view.text);
        scrollToEnd();
        break;
      case "reasoning":
        view.reasoning.hidden = false;
        view.reasoningRaw += event.delta || "";
        view.reasoningText.textContent = view.reasoningRaw;
        break;
      case "meta_summary":
        endRun(run, event);
        break;
      case "error":
        endRun(run, event);
        break;
      default:
        break;
    }
  }

  function endRun(run, terminal) {
    if (run.done) return;
    run.done = true;
    window.clearTimeout(run.timer);
    const view = run.view;
    view.requestId = run.requestId;
    view.answer.setAttribute("aria-busy", "false");
    showNotice(view, "");
    if (terminal.channel === "meta_summary") {
      view.markdown.flush(withoutTrailingSourceList(view.text, terminal.sources));
      finishTimeline(view, true, terminal.elapsed_ms);
      showSources(view, terminal.sources, terminal.attachments);
      addFeedback(view, run.requestId);
      addAnswerActions(view, run.question, withoutTrailingSourceList(view.text, terminal.sources), terminal.sources);
      if (terminal.conversation_id && terminal.conversation_id !== state.conversationId) {
        state.conversationId = terminal.conversation_id;
      }
      announce(t("answered"));
      loadConversations();
    } else {
      view.markdown.flush(view.text);
      finishTimeline(view, false);
      const retry = () => retryRun(run);
      const code = terminal.code === "bad_request" && /expired/.test(terminal.message || "") ? "expired" : terminal.code;
      showError(view, code || "internal", terminal.message, terminal.retry_after, retry);
      announce(code === "cancelled" ? t("stopped") : t("errors")[code] || t("errors").internal);
      if (state.conversationId) loadConversations();
    }
    scrollToEnd();
    if (state.run === run) {
      state.run = null;
      setRunning(false);
    }
  }

  function retryRun(run) {
    askAgain(run.question);
  }

  // "Ask again" after an error and "Regenerate" after an answer: the same question, asked anew in this conversation.
  function askAgain(question) {
    if (state.run) return;
    els.question.value = question;
    updateCharCount();
    els.form.requestSubmit();
  }

  // The connection broke before the terminal event: come back for the rest, with growing pauses.
  function reconnectLater(run) {
    if (run.done || run.timer) return;
    if (!run.requestId || run.attempts >= RECONNECT_ATTEMPTS) {
      endRun(run, { channel: "error", code: "network" });
      return;
    }
    run.attempts += 1;
    showNotice(run.view, t("reconnecting", { n: run.attempts }));
    const delay = Math.min(8000, 500 * 2 ** (run.attempts - 1)) * (0.8 + Math.random() * 0.4);
    const go = () => {
      window.removeEventListener("online", go);
      window.clearTimeout(run.timer);
      run.timer = 0;
      if (run.done) return;
      if (run.transport === "ws") resumeOverWebSocket(run);
      else resumeOverSse(run);
    };
    run.timer = window.setTimeout(go, delay);
    window.addEventListener("online", go); // back online: no need to wait out the pause
  }

  // --- WebSocket -----------------------------------------------------------------------------------------------

  function openSocket() {
    if (state.socket && state.socket.readyState === WebSocket.OPEN) return Promise.resolve(state.socket);
    if (state.socket && state.socket.readyState === WebSocket.CONNECTING) return state.socketReady;
    const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    const socket = new WebSocket(`${scheme}//${window.location.host}${config.wsPath}`);
    state.socket = socket;
    state.socketReady = new Promise((resolve, reject) => {
      socket.addEventListener("open", () => resolve(socket), { once: true });
      socket.addEventListener("close", () => reject(new Error("websocket closed")), { once: true });
    });
    state.socketReady.catch(() => {}); // a failed connect is handled by whoever awaited it
    socket.addEventListener("message", (message) => {
      let event;
      try {
        event = JSON.parse(message.data);
      } catch (_) {
        return;
      }
      const run = state.run;
      if (run && run.transport === "ws") handleEvent(run, event);
    });
    socket.addEventListener("close", () => {
      if (state.socket === socket) state.socket = null;
      const run = state.run;
      if (run && run.transport === "ws" && !run.done) reconnectLater(run);
    });
    return state.socketReady;
  }

  function sendOnSocket(socket, message) {
    socket.send(JSON.stringify(message));
  }

  async function askOverWebSocket(run) {
    const socket = await openSocket();
    const message = { type: "ask", question: run.question, backend: run.backend, on_disconnect: "continue" };
    if (state.conversationId) message.conversation_id = state.conversationId;
    sendOnSocket(socket, message);
  }

  async function resumeOverWebSocket(run) {
    try {
      const socket = await openSocket();
      if (run.done) return;
      sendOnSocket(socket, { type: "resume", request_id: run.requestId, last_seq: run.lastSeq });
    } catch (_) {
      reconnectLater(run); // the close handler may have scheduled it already; reconnectLater ignores a second
    }
  }

  // --- SSE (fetch + a stream reader: EventSource cannot POST) ------------------------------------------------

  async function readSse(run, response) {
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const frame = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = frame.split("\n").filter((line) => line.startsWith("data:"))
          .map((line) => line.slice(5).replace(/^ /, "")).join("\n");
        if (!data) continue;
        try {
          handleEvent(run, JSON.parse(data));
        } catch (_) { /* a malformed frame is skipped; seq tracking asks for it again on resume */ }
        if (run.done) {
          reader.cancel().catch(() => {});
          return;
        }
      }
    }
  }

  async function errorFromResponse(response) {
    let error = { code: response.status === 429 ? "busy" : "internal", message: `HTTP ${response.status}` };
    try {
      error = { ...error, ...(await response.json()).error };
    } catch (_) { /* not JSON: keep the status */ }
    if (response.status === 410) error.code = "expired";
    error.retry_after = Number(response.headers.get("Retry-After")) || error.retry_after;
    return error;
  }

  async function streamSse(run, request) {
    run.abort = new AbortController();
    let response;
    try {
      response = await fetch(request.url, { ...request.init, credentials: "same-origin", signal: run.abort.signal });
    } catch (_) {
      if (!run.done) reconnectLater(run);
      return;
    }
    if (response.status === 204) {
      endRun(run, { channel: "error", code: "network" }); // the server has nothing more, yet we lack the end
      return;
    }
    if (!response.ok) {
      const error = await errorFromResponse(response);
      if (!run.requestId && error.request_id) run.requestId = error.request_id;
      endRun(run, { channel: "error", ...error });
      return;
    }
    if (!run.requestId) run.requestId = response.headers.get("X-Request-Id") || "";
    try {
      await readSse(run, response);
    } catch (_) { /* the connection broke: resumed below */ }
    if (!run.done) reconnectLater(run);
  }

  function askOverSse(run) {
    const body = { question: run.question, on_disconnect: "continue" };
    if (state.conversationId) body.conversation_id = state.conversationId;
    return streamSse(run, {
      url: config.ssePaths[run.backend],
      init: {
        method: "POST",
        headers: { "Content-Type": "application/json", Accept: "text/event-stream" },
        body: JSON.stringify(body),
      },
    });
  }

  function resumeOverSse(run) {
    return streamSse(run, {
      url: config.streamPath + encodeURIComponent(run.requestId),
      init: { method: "GET", headers: { Accept: "text/event-stream", "Last-Event-ID": String(run.lastSeq) } },
    });
  }

  // --- asking and stopping -----------------------------------------------------------------------------------

  async function ask(event) {
    event.preventDefault();
    const question = els.question.value.trim();
    if (!question || state.run) return;
    addUserMessage(question);
    els.question.value = "";
    updateCharCount();
    autoGrow();
    const run = startRun(question, addAnswerView());
    try {
      if (run.transport === "ws") await askOverWebSocket(run);
      else await askOverSse(run);
    } catch (_) {
      if (!run.done) reconnectLater(run);
    }
  }

  async function stop() {
    const run = state.run;
    if (!run || run.stopping) return;
    run.stopping = true;
    if (run.transport === "ws" && state.socket && state.socket.readyState === WebSocket.OPEN) {
      const message = { type: "cancel" };
      if (run.requestId) message.request_id = run.requestId;
      sendOnSocket(state.socket, message); // the terminal `cancelled` event ends the run
    } else if (run.requestId) {
      // Over SSE (or while reconnecting) the answer keeps running without us: ask the server to stop it.
      try {
        const response = await fetch(`${config.streamPath}${encodeURIComponent(run.requestId)}/cancel`, {
          method: "POST", headers: { "Content-Type": "application/json" }, body: "{}", credentials: "same-origin",
        });
        if (!response.ok) throw new Error(String(response.status)); // e.g. 404: not running here any more
      } catch (_) {
        if (run.abort) run.abort.abort();
        endRun(run, { channel: "error", code: "cancelled" });
      }
    } else if (run.abort) {
      run.abort.abort(); // nothing started yet on the server side that we could name
      endRun(run, { channel: "error", code: "cancelled" });
    }
    // Whatever happens on the wire, the user asked to stop: do not wait for a connection that may not return.
    window.setTimeout(() => {
      if (!run.done) {
        if (run.abort) run.abort.abort();
        endRun(run, { channel: "error", code: "cancelled" });
      }
    }, 5000);
    els.question.focus();
  }

  // --- leaving the page ----------------------------------------------------------------------------------------

  // Answers are asked with `on_disconnect: "continue"` so a dropped connection can resume; a person who closes or
  // leaves the page will never resume, so the answer is cancelled and its LLM slot freed at once. `pagehide` fires
  // for a close, a navigation and a reload, never for a network drop. A keepalive fetch outlives the page (a
  // beacon could not declare the JSON body the cancel endpoint requires); over WebSocket the socket is asked too,
  // which also reaches an answer whose request id has not arrived yet.
  function cancelOnLeave() {
    const run = state.run;
    if (!run || run.done) return;
    run.leftPage = true;
    const socket = state.socket;
    if (run.transport === "ws" && socket && socket.readyState === WebSocket.OPEN) {
      const message = { type: "cancel" };
      if (run.requestId) message.request_id = run.requestId;
      try {
        sendOnSocket(socket, message);
      } catch (_) { /* the keepalive request below still goes */ }
    }
    if (!run.requestId) return;
    try {
      fetch(`${config.streamPath}${encodeURIComponent(run.requestId)}/cancel`, {
        method: "POST", headers: { "Content-Type": "application/json" }, body: "{}", credentials: "same-origin",
        keepalive: true,
      }).catch(() => {});
    } catch (_) { /* nothing more can be done from a page that is going away */ }
  }

  // A page kept in the back/forward cache comes back with its answer cancelled: say so instead of waiting for it.
  function showCancelledOnReturn(event) {
    const run = state.run;
    if (event.persisted && run && run.leftPage && !run.done) {
      if (run.abort) run.abort.abort();
      endRun(run, { channel: "error", code: "cancelled" });
    }
  }

  // --- conversations -----------------------------------------------------------------------------------------

  async function loadConversations() {
    try {
      const response = await fetch(config.conversationsPath, { credentials: "same-origin" });
      if (!response.ok) throw new Error(String(response.status));
      state.conversations = (await response.json()).conversations || [];
      state.conversationsFailed = false;
    } catch (_) {
      state.conversationsFailed = true;
    }
    renderConversations();
  }

  function renderConversations() {
    const list = els.conversations;
    list.replaceChildren();
    if (state.conversationsFailed) {
      list.append(el("li", "muted", t("loadFailed")));
      return;
    }
    if (!state.conversations.length) {
      list.append(el("li", "muted", t("noConversations")));
      return;
    }
    const dateFormat = new Intl.DateTimeFormat(state.lang === "en" ? "en" : "zh-Hant-TW", {
      month: "short", day: "numeric", hour: "2-digit", minute: "2-digit",
    });
    for (const conversation of state.conversations) {
      const li = el("li", "conversation-item");
      li.dataset.id = conversation.id;
      const title = conversation.title || t("untitled");
      const button = el("button", "conversation");
      button.type = "button";
      if (conversation.id === state.conversationId) button.setAttribute("aria-current", "true");
      button.append(el("span", "conversation-title", title));
      const when = new Date(conversation.updated_at);
      if (!Number.isNaN(when.getTime())) {
        const time = el("time", "conversation-time", dateFormat.format(when));
        time.dateTime = conversation.updated_at;
        button.append(time);
      }
      button.addEventListener("click", () => openConversation(conversation.id, conversation.title));
      const actions = el("div", "conversation-actions");
      const rename = iconButton("rename-conversation", ICONS.rename, t("renameOf", { t: title }), t("rename"));
      rename.addEventListener("click", () => startRename(li, conversation));
      const remove = iconButton("delete-conversation", ICONS.trash, t("deleteOf", { t: title }), t("delete"));
      remove.addEventListener("click", () => deleteConversation(conversation));
      actions.append(rename, remove);
      li.append(button, actions);
      list.append(li);
    }
  }

  function iconButton(className, iconPath, label, tooltip) {
    const button = el("button", `icon-button small ${className}`);
    button.type = "button";
    button.title = tooltip;
    button.setAttribute("aria-label", label);
    button.append(icon(iconPath, 16));
    return button;
  }

  async function conversationRequest(id, init) {
    const response = await fetch(`${config.conversationsPath}/${encodeURIComponent(id)}`, {
      credentials: "same-origin", ...init,
    });
    if (!response.ok && response.status !== 404) throw new Error(String(response.status));
    return response;
  }

  // Renaming happens in place: the title becomes a text box; Enter (or leaving it) saves, Escape cancels.
  function startRename(li, conversation) {
    const current = conversation.title || "";
    const form = el("form", "rename-form");
    const input = el("input", "rename-input");
    input.type = "text";
    input.value = current;
    input.maxLength = 200;
    input.required = true;
    input.setAttribute("aria-label", t("renameLabel"));
    form.append(input);
    li.replaceChildren(form);
    input.focus();
    input.select();
    let finished = false;
    const finish = async (save) => {
      if (finished) return;
      finished = true;
      const title = input.value.trim();
      if (save && title && title !== current) {
        try {
          const response = await conversationRequest(conversation.id, {
            method: "PATCH", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ title }),
          });
          if (response.ok) {
            conversation.title = (await response.json()).title;
            announce(t("renamed", { t: conversation.title }));
          }
        } catch (_) {
          announce(t("actionFailed"));
        }
      }
      renderConversations();
      const again = els.conversations.querySelector(`li[data-id="${CSS.escape(conversation.id)}"] .rename-conversation`);
      if (again) again.focus();
    };
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      finish(true);
    });
    input.addEventListener("keydown", (event) => {
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation(); // not the drawer's Escape
        finish(false);
      }
    });
    input.addEventListener("blur", () => finish(true));
  }

  async function deleteConversation(conversation) {
    if (state.run && conversation.id === state.conversationId) return;
    const title = conversation.title || t("untitled");
    if (!window.confirm(t("deleteConfirm", { t: title }))) return;
    try {
      await conversationRequest(conversation.id, { method: "DELETE" });
    } catch (_) {
      announce(t("actionFailed"));
      return;
    }
    state.conversations = state.conversations.filter((c) => c.id !== conversation.id);
    if (conversation.id === state.conversationId) newConversation(false);
    renderConversations();
    announce(t("deleted", { t: title }));
    els.newConversation.focus();
  }

  async function openConversation(id, title) {
    if (state.run) return;
    let messages;
    try {
      const response = await fetch(`${config.conversationsPath}/${encodeURIComponent(id)}`, { credentials: "same-origin" });
      if (!response.ok) throw new Error(String(response.status));
      messages = (await response.json()).messages || [];
    } catch (_) {
      announce(t("loadFailed"));
      return;
    }
    els.messages.replaceChildren();
    let question = "";
    for (const message of messages) {
      if (message.role === "user") {
        addUserMessage(message.content);
        question = message.content;
        continue;
      }
      const view = addAnswerView();
      view.answer.setAttribute("aria-busy", "false");
      view.timeline.hidden = true;
      const body = withoutTrailingSourceList(message.content || "", message.sources);
      view.markdown.flush(body);
      showSources(view, message.sources, []);
      if (message.status === "ok") {
        addFeedback(view, message.request_id);
        addAnswerActions(view, question, body, message.sources);
      } else {
        showError(view, message.status === "cancelled" ? "cancelled" : "internal", "", 0, null);
      }
    }
    state.conversationId = id;
    renderConversations();
    closeDrawer(false);
    // Focus moves to the conversation (a heading that screen readers announce), scrolled to its end.
    els.messagesTitle.focus();
    scrollToEnd(true);
    announce(t("conversationOpened", { t: title || t("untitled") }));
  }

  function newConversation(focusQuestion = true) {
    if (state.run) return;
    state.conversationId = "";
    els.messages.replaceChildren();
    els.welcome.hidden = false;
    renderConversations();
    if (!focusQuestion) return;
    closeDrawer(false);
    els.question.focus();
    announce(t("newConversationStarted"));
  }

  // --- the conversations drawer on narrow screens --------------------------------------------------------

  const narrow = window.matchMedia("(max-width: 860px)");

  function openDrawer() {
    document.body.classList.add("drawer-open");
    els.historyToggle.setAttribute("aria-expanded", "true");
    els.backdrop.hidden = false;
    els.main.inert = true; // keyboard and screen reader stay in the drawer while it covers the page
    els.newConversation.focus();
  }

  function closeDrawer(returnFocus) {
    if (!document.body.classList.contains("drawer-open")) return;
    document.body.classList.remove("drawer-open");
    els.historyToggle.setAttribute("aria-expanded", "false");
    els.backdrop.hidden = true;
    els.main.inert = false;
    if (returnFocus) els.historyToggle.focus();
  }

  // --- the composer --------------------------------------------------------------------------------------

  function updateCharCount() {
    const n = els.question.value.length;
    els.charCount.textContent = n ? t("chars", { n, max: config.maxQuestionChars }) : "";
    els.charCount.classList.toggle("near-limit", n > config.maxQuestionChars * 0.9);
  }

  function autoGrow() {
    els.question.style.height = "auto";
    els.question.style.height = `${Math.min(els.question.scrollHeight, 200)}px`;
  }

  els.form.addEventListener("submit", ask);
  els.stop.addEventListener("click", stop);
  window.addEventListener("pagehide", cancelOnLeave);
  window.addEventListener("pageshow", showCancelledOnReturn);
  els.newConversation.addEventListener("click", () => newConversation());
  els.question.addEventListener("input", () => {
    updateCharCount();
    autoGrow();
  });
  els.question.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      els.form.requestSubmit();
    } else if (event.key === "Escape" && state.run) {
      stop();
    }
  });
  for (const button of document.querySelectorAll(".lang-switch button")) {
    button.addEventListener("click", () => setLanguage(button.dataset.lang));
  }
  els.historyToggle.addEventListener("click", () => {
    if (document.body.classList.contains("drawer-open")) closeDrawer(true);
    else openDrawer();
  });
  els.backdrop.addEventListener("click", () => closeDrawer(true));
  document.addEventListener("keydown", (event) => {
    if (event.key !== "Escape") return;
    if (document.body.classList.contains("drawer-open")) closeDrawer(true);
    else if (els.settings.open) {
      els.settings.open = false;
      els.settings.querySelector("summary").focus();
    }
  });
  narrow.addEventListener("change", () => closeDrawer(false));
  // A citation link moves focus to its source (the list item is focusable), not just the scroll position.
  els.messages.addEventListener("click", (event) => {
    const link = event.target.closest("a.md-cite, .md-cite a");
    if (!link) return;
    const target = document.getElementById(link.getAttribute("href").slice(1));
    if (target) {
      event.preventDefault();
      const preview = target.querySelector("details.source-preview");
      if (preview) preview.open = true;
      target.scrollIntoView({ block: "center", behavior: "smooth" });
      target.focus({ preventScroll: true });
    }
  });

  // The transport and the model API are kept across visits, as the language is.
  for (const [select, key] of [[els.transport, "hc-transport"], [els.backend, "hc-backend"]]) {
    const saved = localStorage.getItem(key);
    if (saved && [...select.options].some((option) => option.value === saved)) select.value = saved;
    select.addEventListener("change", () => localStorage.setItem(key, select.value));
  }

  applyLanguage();
  loadConversations();
})();
