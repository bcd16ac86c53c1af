// The embeddable assistant: <script src="https://assistant.example.edu/widget.js" data-site="SITE_KEY" async>.
//
// Everything lives in an open shadow root (styles in neither direction), talks only to the server the script came
// from (no third party), streams over WebSocket with SSE as fallback, and keeps the visitor's conversation in this
// site's localStorage so it continues on the site's other pages. `data-mode="frame"` (the /embed/KEY page) shows
// the panel alone, filling its page. Answer text reaches the page only as text nodes (the chat page's markdown.js,
// bundled in by the server); links only for http(s) URLs.
(function () {
  "use strict";
  const script = document.currentScript || document.querySelector("script[data-site][src*='widget.js']");
  if (!script || script.dataset.hcMounted) return;
  script.dataset.hcMounted = "1";
  const BASE = new URL(script.src, location.href);
  const ORIGIN = BASE.origin;
  const KEY = script.dataset.site || "";
  const FRAME = script.dataset.mode === "frame";
  const Markdown = (function () {
    const window = { location: BASE }; // relative links in answers resolve against the assistant, not this page
    /*MARKDOWN*/
    return window.HelpMarkdown;
  })();

  const UI = {
    "zh-hant": {
      open: "開啟客服小幫手", close: "關閉", placeholder: "請輸入您的問題…", send: "送出", stop: "停止",
      sources: "資料來源", passage: "段落", copy: "複製", copied: "已複製", helpful: "有幫助", unhelpful: "沒有幫助",
      thanks: "謝謝您的回饋！", thinking: "正在思考…", stopped: "已停止回答。", suggestions: "建議問題",
      newChat: "新對話", privacy: "隱私權聲明", question: "您的問題", log: "對話內容", failed: "連線失敗，請再試一次。",
      refused: "這個網站無法使用客服小幫手。", language: "語言",
    },
    en: {
      open: "Open the help assistant", close: "Close", placeholder: "Ask a question…", send: "Send", stop: "Stop",
      sources: "Sources", passage: "Passage", copy: "Copy", copied: "Copied", helpful: "Helpful",
      unhelpful: "Not helpful", thanks: "Thank you for your feedback!", thinking: "Thinking…",
      stopped: "Answer stopped.", suggestions: "Suggested questions", newChat: "New conversation",
      privacy: "Privacy notice", question: "Your question", log: "Conversation",
      failed: "The connection failed; please try again.", refused: "The help assistant is not available on this website.",
      language: "Language",
    },
  };
  const STORE = `hc-widget:${KEY}`;
  const THUMB = "M2 21h4V9H2v12zm20-11a2 2 0 0 0-2-2h-6.3l1-4.6v-.3c0-.4-.2-.8-.4-1.1L13.2 1 6.6 7.6c-.4.4-.6.9-.6 1.4v10a2 2 0 0 0 2 2h9c.8 0 1.5-.5 1.8-1.2l3-7.1c.1-.2.2-.5.2-.7v-2z";

  function load() {
    try {
      return JSON.parse(localStorage.getItem(STORE)) || {};
    } catch (_) {
      return {};
    }
  }
  const saved = load();
  const state = {
    client: /^[0-9a-f]{12}4[0-9a-f]{3}[89ab][0-9a-f]{15}$/.test(saved.client || "") ? saved.client : newClientId(),
    conversation: saved.conversation || "",
    lang: saved.lang || "",
    messages: Array.isArray(saved.messages) ? saved.messages.slice(-40) : [],
    config: null,
    run: null,
    socket: null,
  };

  function newClientId() {
    const bytes = crypto.getRandomValues(new Uint8Array(16));
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  }

  function save() {
    try {
      const messages = state.messages.map(({ role, text, sources, requestId, feedback }) =>
        ({ role, text, sources, requestId, feedback }));
      localStorage.setItem(STORE, JSON.stringify({
        client: state.client, conversation: state.conversation, lang: state.lang, messages,
      }));
    } catch (_) { /* storage full or blocked: the conversation lives as long as this page */ }
  }

  function t(key) {
    return (UI[state.lang] || UI.en)[key];
  }

  function words() {
    const texts = (state.config && state.config.organisation.texts) || {};
    return texts[state.lang] || texts.en || { name: "", tagline: "", welcome: "", suggestions: [] };
  }

  function el(tag, className, text) {
    const node = document.createElement(tag);
    if (className) node.className = className;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  // --- the shadow root ---------------------------------------------------------------------------------------
  const host = document.createElement("div");
  host.setAttribute("data-helpcentre-widget", KEY);
  const root = host.attachShadow({ mode: "open" });
  const style = el("style");
  style.textContent = `/*CSS*/`;
  root.append(style);
  const launcher = el("button", "launcher");
  launcher.type = "button";
  launcher.setAttribute("aria-expanded", "false");
  launcher.setAttribute("aria-controls", "hc-panel");
  launcher.innerHTML = '<svg viewBox="0 0 24 24" aria-hidden="true"><path d="M4 5.5A2.5 2.5 0 0 1 6.5 3h11A2.5 2.5 0 0 1 20 5.5v8a2.5 2.5 0 0 1-2.5 2.5H10l-4.5 4v-4A2.5 2.5 0 0 1 4 13.5z"/></svg>';
  const panel = el("section", "panel");
  panel.id = "hc-panel";
  panel.hidden = !FRAME;
  panel.setAttribute("role", FRAME ? "region" : "dialog");
  const header = el("header", "head");
  const titleBox = el("div", "titles");
  const title = el("h2", "title");
  title.id = "hc-title";
  const tagline = el("p", "tagline");
  titleBox.append(title, tagline);
  const langs = el("div", "langs");
  langs.setAttribute("role", "group");
  const langButtons = [["zh-hant", "繁中"], ["en", "EN"]].map(([code, label]) => {
    const b = el("button", "lang", label);
    b.type = "button";
    b.dataset.lang = code;
    b.lang = code === "en" ? "en" : "zh-Hant";
    b.addEventListener("click", () => setLanguage(code));
    langs.append(b);
    return b;
  });
  const fresh = el("button", "icon fresh");
  fresh.type = "button";
  fresh.textContent = "+";
  fresh.addEventListener("click", newConversation);
  const closer = el("button", "icon close");
  closer.type = "button";
  closer.textContent = "×";
  closer.hidden = FRAME;
  closer.addEventListener("click", () => setOpen(false));
  header.append(titleBox, langs, fresh, closer);
  panel.setAttribute("aria-labelledby", "hc-title");
  const log = el("div", "log");
  log.setAttribute("role", "log");
  log.setAttribute("aria-live", "polite");
  const welcome = el("div", "welcome");
  const messages = el("ol", "messages");
  log.append(welcome, messages);
  const form = el("form", "composer");
  const label = el("label", "hidden");
  label.htmlFor = "hc-question";
  const input = el("textarea", "question");
  input.id = "hc-question";
  input.rows = 1;
  const send = el("button", "send");
  send.type = "submit";
  const stopButton = el("button", "stop");
  stopButton.type = "button";
  stopButton.hidden = true;
  stopButton.addEventListener("click", stop);
  form.append(label, input, stopButton, send);
  const foot = el("p", "foot");
  const status = el("div", "hidden");
  status.setAttribute("role", "status");
  panel.append(header, log, form, foot, status);
  root.append(panel);
  if (!FRAME) root.append(launcher);
  launcher.addEventListener("click", () => setOpen(panel.hidden));
  panel.addEventListener("keydown", (event) => {
    if (event.key === "Escape" && !FRAME) setOpen(false);
  });
  input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      form.requestSubmit();
    }
  });
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const question = input.value.trim();
    if (question && !state.run && state.config) ask(question);
  });

  function setOpen(open) {
    panel.hidden = !open;
    host.classList.toggle("open", open);
    launcher.setAttribute("aria-expanded", String(open));
    try {
      sessionStorage.setItem(`${STORE}:open`, open ? "1" : "");
    } catch (_) { /* private mode */ }
    if (open) {
      input.focus();
      scrollDown();
    } else launcher.focus();
  }

  function setLanguage(lang) {
    state.lang = lang;
    save();
    paint();
  }

  function paint() {
    const w = words();
    root.host.lang = state.lang === "en" ? "en" : "zh-Hant";
    panel.lang = root.host.lang;
    title.textContent = w.name || "";
    tagline.textContent = w.tagline || "";
    launcher.setAttribute("aria-label", w.name ? `${t("open")}: ${w.name}` : t("open"));
    closer.setAttribute("aria-label", t("close"));
    fresh.setAttribute("aria-label", t("newChat"));
    fresh.title = t("newChat");
    langs.setAttribute("aria-label", t("language"));
    for (const b of langButtons) b.setAttribute("aria-pressed", String(b.dataset.lang === state.lang));
    label.textContent = t("question");
    input.placeholder = t("placeholder");
    send.textContent = t("send");
    stopButton.textContent = t("stop");
    log.setAttribute("aria-label", t("log"));
    welcome.replaceChildren();
    welcome.hidden = state.messages.length > 0;
    if (w.welcome) welcome.append(el("p", "", w.welcome));
    if ((w.suggestions || []).length) {
      const list = el("ul", "suggestions");
      list.setAttribute("aria-label", t("suggestions"));
      for (const text of w.suggestions) {
        const li = el("li");
        const b = el("button", "suggestion", text);
        b.type = "button";
        b.addEventListener("click", () => {
          if (!state.run) ask(text);
        });
        li.append(b);
        list.append(li);
      }
      welcome.append(list);
    }
    const privacy = state.config && state.config.organisation.privacyUrl;
    foot.replaceChildren();
    if (privacy && Markdown.safeHref(privacy)) {
      const a = el("a", "", t("privacy"));
      a.href = Markdown.safeHref(privacy);
      a.target = "_blank";
      a.rel = "noopener noreferrer";
      foot.append(a);
    }
    messages.replaceChildren(...state.messages.map(renderMessage));
  }

  function scrollDown() {
    log.scrollTop = log.scrollHeight;
  }

  // --- messages ------------------------------------------------------------------------------------------------
  function renderMessage(message) {
    const li = el("li", `message ${message.role}`);
    const body = el("div", "body");
    li.append(body);
    message.node = li;
    message.body = body;
    if (message.role === "user") {
      body.textContent = message.text;
      return li;
    }
    message.view = Markdown.createView(body, { citeHref: null });
    message.view.flush(message.text || "");
    if (message.done !== false) finishMessage(message);
    return li;
  }

  // An offline answer ends with its own "Sources:" list; the widget shows the sources itself (as the chat page does).
  function withoutSourceList(text, sources) {
    if (!sources || !sources.length) return text;
    const cut = text.lastIndexOf("\n\n");
    if (cut === -1) return text;
    const lines = text.slice(cut + 2).trim().split("\n");
    const listed = lines.slice(1);
    const isList = /[:：]\s*$/.test(lines[0]) && listed.length > 0 && listed.every((line) => /^\[\d+\]\s/.test(line));
    return isList ? text.slice(0, cut) : text;
  }

  function finishMessage(message) {
    const li = message.node;
    for (const old of li.querySelectorAll(".sources, .actions")) old.remove();
    if ((message.sources || []).length) {
      const box = el("div", "sources");
      box.append(el("h3", "", t("sources")));
      const list = el("ol");
      for (const source of message.sources) {
        const item = el("li");
        const href = Markdown.safeHref(source.url);
        const name = source.title || `#${source.ref}`;
        const link = el(href ? "a" : "span", "source-title", `[${source.ref}] ${name}`);
        if (href) {
          link.href = href;
          link.target = "_blank";
          link.rel = "noopener noreferrer";
        }
        item.append(link);
        if (source.snippet) {
          const details = el("details");
          details.append(el("summary", "", t("passage")), el("p", "passage", source.snippet));
          item.append(details);
        }
        list.append(item);
      }
      box.append(list);
      li.append(box);
    }
    if (!message.requestId || message.error) return;
    const actions = el("div", "actions");
    const copy = el("button", "copy", t("copy"));
    copy.type = "button";
    copy.addEventListener("click", async () => {
      try {
        await navigator.clipboard.writeText(message.text);
        copy.textContent = t("copied");
      } catch (_) { /* no clipboard permission: the text can still be selected */ }
    });
    actions.append(copy);
    const verdict = el("span", "verdict");
    for (const [score, key, path] of [["up", "helpful", THUMB], ["down", "unhelpful", THUMB]]) {
      const b = el("button", `vote ${score}`);
      b.innerHTML = `<svg viewBox="0 0 24 24" aria-hidden="true"${score === "down" ? ' transform="rotate(180)"' : ""}><path d="${path}"/></svg>`;
      b.type = "button";
      b.setAttribute("aria-label", t(key));
      b.setAttribute("aria-pressed", String(message.feedback === score));
      b.addEventListener("click", () => feedback(message, score, verdict));
      verdict.append(b);
    }
    actions.append(verdict);
    li.append(actions);
  }

  async function feedback(message, score, verdict) {
    const response = await api("feedback", {
      method: "POST", body: JSON.stringify({ request_id: message.requestId, score }),
    }).catch(() => null);
    if (response && response.ok) {
      message.feedback = score;
      save();
      for (const b of verdict.querySelectorAll("button")) b.setAttribute("aria-pressed", String(b.classList.contains(score)));
      announce(t("thanks"));
    }
  }

  function announce(text) {
    status.textContent = text;
  }

  function api(name, init, suffix) {
    const headers = { "Content-Type": "application/json", "X-Client-Id": state.client, ...(init.headers || {}) };
    return fetch(ORIGIN + state.config.paths[name] + (suffix || ""), { ...init, headers, credentials: "omit", mode: "cors" });
  }

  function newConversation() {
    if (state.run) return;
    state.conversation = "";
    state.messages = [];
    save();
    paint();
    input.focus();
  }

  // --- asking --------------------------------------------------------------------------------------------------
  function ask(question) {
    input.value = "";
    const user = { role: "user", text: question };
    const answer = { role: "assistant", text: "", sources: [], done: false };
    state.messages.push(user, answer);
    welcome.hidden = true;
    messages.append(renderMessage(user), renderMessage(answer));
    answer.body.setAttribute("aria-busy", "true");
    answer.body.dataset.thinking = t("thinking");
    const run = { question, answer, transport: "ws", ended: false };
    state.run = run;
    stopButton.hidden = false;
    send.disabled = true;
    scrollDown();
    askOverWebSocket(run).catch(() => {
      if (!run.ended && !run.requestId) {
        run.transport = "sse";
        askOverSse(run).catch(() => end(run, { channel: "error", message: t("failed") }));
      } else if (!run.ended) end(run, { channel: "error", message: t("failed") });
    });
  }

  function onEvent(run, event) {
    if (run.ended) return;
    if (event.request_id && !run.requestId) run.requestId = event.request_id;
    if (event.channel === "answer" && typeof event.delta === "string") {
      delete run.answer.body.dataset.thinking;
      run.answer.text += event.delta;
      run.answer.view.update(run.answer.text);
      scrollDown();
    } else if (event.channel === "meta_summary" || event.channel === "error") {
      end(run, event);
    }
  }

  function end(run, event) {
    if (run.ended) return;
    run.ended = true;
    const answer = run.answer;
    answer.done = true;
    answer.requestId = run.requestId || event.request_id || "";
    answer.body.removeAttribute("aria-busy");
    delete answer.body.dataset.thinking;
    if (event.channel === "meta_summary") {
      answer.sources = event.sources || [];
      answer.text = withoutSourceList(answer.text, answer.sources);
      if (event.conversation_id) state.conversation = event.conversation_id;
    } else {
      answer.error = true;
      const text = event.code === "cancelled" ? t("stopped") : event.message || t("failed");
      answer.text = answer.text ? `${answer.text}\n\n${text}` : text;
    }
    answer.view.flush(answer.text);
    finishMessage(answer);
    state.run = null;
    stopButton.hidden = true;
    send.disabled = false;
    save();
    scrollDown();
    if (event.channel === "meta_summary") announce(answer.text.slice(0, 200));
  }

  function askBody(run) {
    const body = { question: run.question, backend: "chat" };
    if (state.conversation) body.conversation_id = state.conversation;
    return body;
  }

  function askOverWebSocket(run) {
    return new Promise((resolve, reject) => {
      const url = new URL(state.config.paths.ws, ORIGIN);
      url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
      url.searchParams.set("client", state.client);
      let opened = false;
      const socket = new WebSocket(url);
      state.socket = socket;
      const timer = setTimeout(() => {
        if (!opened) socket.close();
      }, 5000);
      socket.addEventListener("open", () => {
        opened = true;
        clearTimeout(timer);
        socket.send(JSON.stringify({ type: "ask", ...askBody(run) }));
      });
      socket.addEventListener("message", (message) => {
        try {
          onEvent(run, JSON.parse(message.data));
        } catch (_) { /* not an event */ }
        if (run.ended) {
          socket.close();
          resolve();
        }
      });
      socket.addEventListener("close", () => {
        clearTimeout(timer);
        if (run.ended) resolve();
        else reject(new Error(opened ? "closed" : "refused"));
      });
    });
  }

  async function askOverSse(run) {
    run.abort = new AbortController();
    const response = await api("sse", {
      method: "POST", body: JSON.stringify(askBody(run)), headers: { Accept: "text/event-stream" }, signal: run.abort.signal,
    });
    if (!response.ok || !(response.headers.get("content-type") || "").startsWith("text/event-stream")) {
      let message = `HTTP ${response.status}`;
      try {
        message = (await response.json()).error.message || message;
      } catch (_) { /* not JSON */ }
      end(run, { channel: "error", message });
      return;
    }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, { stream: true });
      let cut;
      while ((cut = buffer.indexOf("\n\n")) !== -1) {
        const frame = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        const data = frame.split("\n").filter((line) => line.startsWith("data:")).map((line) => line.slice(5).trim()).join("\n");
        if (data) {
          try {
            onEvent(run, JSON.parse(data));
          } catch (_) { /* not an event */ }
        }
      }
    }
    if (!run.ended) end(run, { channel: "error", message: t("failed") });
  }

  function stop() {
    const run = state.run;
    if (!run) return;
    if (run.transport === "ws" && state.socket && state.socket.readyState === WebSocket.OPEN) {
      state.socket.send(JSON.stringify({ type: "cancel", request_id: run.requestId }));
    } else if (run.requestId) {
      api("stream", { method: "POST", body: "{}" }, `${encodeURIComponent(run.requestId)}/cancel`).catch(() => {});
    }
    setTimeout(() => {
      if (!run.ended) {
        if (run.abort) run.abort.abort();
        end(run, { channel: "error", code: "cancelled" });
      }
    }, 3000);
  }

  // --- start ---------------------------------------------------------------------------------------------------
  function refuse(message) {
    state.config = null;
    welcome.replaceChildren(el("p", "refusal", `${t("refused")} (${message})`));
    welcome.hidden = false;
    welcome.setAttribute("role", "alert");
    input.disabled = true;
    send.disabled = true;
  }

  async function start() {
    document.body.append(host);
    if (FRAME) host.classList.add("frame", "open");
    if (!state.lang) state.lang = (navigator.language || "").toLowerCase().startsWith("en") ? "en" : "zh-hant";
    try {
      const response = await fetch(`${ORIGIN}/api/v1/widget/${encodeURIComponent(KEY)}`, { credentials: "omit", mode: "cors" });
      let body = null;
      try {
        body = await response.json();
      } catch (_) { /* not JSON */ }
      if (!response.ok) {
        paint();
        refuse((body && body.error && body.error.message) || `HTTP ${response.status}`);
        return;
      }
      state.config = body;
      if (!saved.lang) state.lang = body.language;
      host.style.setProperty("--hc-brand", body.color || "#0b5cab");
      host.classList.add(body.position === "left" ? "left" : "right");
      paint();
      let open = false;
      try {
        open = Boolean(sessionStorage.getItem(`${STORE}:open`));
      } catch (_) { /* private mode */ }
      if (open && !FRAME) setOpen(true);
    } catch (error) {
      paint();
      refuse(String(error && error.message ? error.message : error));
    }
  }

  if (document.body) start();
  else document.addEventListener("DOMContentLoaded", start, { once: true });
})();
