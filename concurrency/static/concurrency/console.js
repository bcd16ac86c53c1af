// LLM concurrency console: polls the status API once a second and redraws gauges, inline-SVG charts of the last
// 120 s, per-worker rows and queue heads. Plain DOM; every value from the server is set as text, never as HTML.
(function () {
  "use strict";

  const HISTORY = 120; // samples kept per series: 120 s at one poll a second
  const POLL_MS = 1000;
  const root = document.getElementById("concurrency-console");
  if (!root) return;
  const statusUrl = root.dataset.statusUrl;
  const backends = root.dataset.backends.split(",");
  const SVG = "http://www.w3.org/2000/svg";
  // The page's words in the admin's language, by their English; {name} placeholders are filled here.
  const wordsElement = document.getElementById("concurrency-console-words");
  const WORDS = wordsElement ? JSON.parse(wordsElement.textContent) : {};
  const t = (text, values) => (WORDS[text] || text).replace(/\{(\w+)\}/g, (whole, name) =>
    values && name in values ? String(values[name]) : whole);
  const named = (kind, value) => { const key = kind + " " + value; return key in WORDS ? WORDS[key] : value; };
  const series = {}; // backend -> chart name -> [values]
  let previous = null; // {time, backends: {name: {total_timeout, total_rejected}}}

  backends.forEach((b) => {
    series[b] = { in_progress: [], waiting: [], wait_ms_p95: [], timeouts: [], rejected: [], limit: [] };
  });

  const q = (el, name) => el.querySelector('[data-cc="' + name + '"]');
  const setText = (el, value) => { if (el && el.textContent !== String(value)) el.textContent = String(value); };
  const fmt = (n, digits) =>
    (Number.isInteger(n) || n >= 100 || digits === 0 ? Math.round(n).toString() : n.toFixed(digits === undefined ? 1 : digits));

  function push(list, value) {
    list.push(value);
    if (list.length > HISTORY) list.shift();
  }

  function cell(text, className) {
    const td = document.createElement("td");
    td.textContent = text;
    if (className) td.className = className;
    return td;
  }

  function replaceRows(tbody, rows, columns, emptyText) {
    const fragment = document.createDocumentFragment();
    if (!rows.length) {
      const tr = document.createElement("tr");
      const td = cell(emptyText);
      td.colSpan = columns;
      tr.appendChild(td);
      fragment.appendChild(tr);
    }
    rows.forEach((tr) => fragment.appendChild(tr));
    tbody.replaceChildren(fragment);
  }

  // A sparkline: area + line of `values`, scaled to max(values, floor); an optional dashed limit line.
  function drawChart(figure, values, limits) {
    let svg = figure.querySelector("svg");
    if (!svg) {
      svg = document.createElementNS(SVG, "svg");
      svg.setAttribute("viewBox", "0 0 " + (HISTORY - 1) + " 100");
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("role", "img");
      ["area", "line", "limit"].forEach((cls) => {
        const el = document.createElementNS(SVG, cls === "area" ? "polygon" : "polyline");
        el.setAttribute("class", cls);
        svg.appendChild(el);
      });
      figure.appendChild(svg);
      const caption = figure.querySelector("figcaption");
      caption.appendChild(document.createElement("b"));
    }
    const limitMax = limits && limits.length ? Math.max(...limits) : 0;
    const top = Math.max(1, limitMax, ...values) * 1.1;
    const offset = HISTORY - values.length;
    const y = (v) => (100 - (v / top) * 100).toFixed(2);
    const points = values.map((v, i) => (offset + i) + "," + y(v)).join(" ");
    svg.querySelector(".line").setAttribute("points", points);
    svg.querySelector(".area").setAttribute(
      "points", values.length ? offset + ",100 " + points + " " + (HISTORY - 1) + ",100" : ""
    );
    const limitLine = svg.querySelector(".limit");
    limitLine.setAttribute("points", limits && limits.length
      ? limits.map((v, i) => (HISTORY - limits.length + i) + "," + y(v)).join(" ") : "");
    const last = values.length ? values[values.length - 1] : 0;
    const peak = values.length ? Math.max(...values) : 0;
    setText(figure.querySelector("figcaption b"), t("{now} (max {peak})", { now: fmt(last), peak: fmt(peak) }));
    const chart = figure.querySelector("figcaption").firstChild.textContent.trim() || figure.dataset.chart;
    svg.setAttribute("aria-label", t("{chart}: now {now}, max {peak}", { chart: chart, now: fmt(last), peak: fmt(peak) }));
  }

  function renderBackends(status) {
    const summary = status.summary || {};
    const elapsed = previous ? Math.max(0.001, status.server_time - previous.time) : null;
    backends.forEach((b) => {
      const card = root.querySelector('.cc-card[data-backend="' + b + '"]');
      const s = summary[b];
      if (!card || !s) return;
      ["in_progress", "limit", "waiting", "available", "total_timeout", "total_rejected", "total_acquired"].forEach(
        (key) => setText(q(card, key), s[key])
      );
      setText(q(card, "wait_ms_p95"), fmt(s.wait_ms_p95));
      q(card, "waiting").classList.toggle("alert", s.waiting > 0);
      const ratio = s.limit ? s.in_progress / s.limit : 0;
      const fill = q(card, "fill");
      fill.style.width = Math.min(100, ratio * 100).toFixed(1) + "%";
      fill.classList.toggle("busy", ratio >= 0.75 && ratio < 1);
      fill.classList.toggle("full", ratio >= 1);

      const h = series[b];
      const before = previous && previous.backends[b];
      // Totals only grow within a worker; a worker leaving can lower the sum, hence the clamp at 0.
      const rate = (key) => (before && elapsed ? Math.max(0, (s[key] - before[key]) / elapsed) : 0);
      push(h.in_progress, s.in_progress);
      push(h.limit, s.limit);
      push(h.waiting, s.waiting);
      push(h.wait_ms_p95, s.wait_ms_p95);
      push(h.timeouts, rate("total_timeout"));
      push(h.rejected, rate("total_rejected"));
      card.querySelectorAll("figure[data-chart]").forEach((figure) => {
        const name = figure.dataset.chart;
        drawChart(figure, h[name], name === "in_progress" ? h.limit : null);
      });
    });
    previous = { time: status.server_time, backends: summary };
  }

  // Every time on the page is the viewer's, with its zone named (the admin's pages use the same zone).
  const CLOCK = new Intl.DateTimeFormat(undefined, { hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" });
  const STAMP = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit", hour: "2-digit", minute: "2-digit", second: "2-digit",
    timeZoneName: "short",
  });

  function localTime(iso) {
    const when = new Date(iso || "");
    return Number.isNaN(when.getTime()) ? "–" : STAMP.format(when);
  }

  function renderWorkers(status) {
    const rows = status.workers.map((w) => {
      const tr = document.createElement("tr");
      tr.appendChild(cell(w.worker_id === status.worker.worker_id ? t("{worker} (this one)", { worker: w.worker_id }) : w.worker_id, "cc-id"));
      tr.appendChild(cell(localTime(w.started_at)));
      const behind = w.settings_version !== status.settings.version;
      tr.appendChild(cell(w.settings_version == null ? "–" : "v" + w.settings_version, behind ? "stale" : ""));
      backends.forEach((b) => {
        const s = (w.manager.backends || {})[b];
        tr.appendChild(cell(s ? s.in_progress + "/" + s.limit + (s.waiting ? " " + t("+{count} waiting", { count: s.waiting }) : "") : "–"));
      });
      const age = Math.max(0, status.server_time - w.updated_at);
      tr.appendChild(cell(age < 1 ? t("now") : t("{seconds} s ago", { seconds: fmt(age, 0) }), age > 3 ? "stale" : ""));
      return tr;
    });
    replaceRows(q(root, "worker-rows"), rows, backends.length + 4, t("no worker reported"));
  }

  function renderQueues(status) {
    const manager = status.worker.manager;
    setText(q(root, "mode-note"), manager.mode === "priority"
      ? t("priority mode · starvation boost after {seconds} s", { seconds: manager.starvation_threshold })
      : t("FIFO mode"));
    const rows = [];
    backends.forEach((b) => {
      status.workers.forEach((w) => {
        const s = (w.manager.backends || {})[b];
        (s ? s.queue_head : []).forEach((entry) => {
          const tr = document.createElement("tr");
          tr.appendChild(cell(b));
          tr.appendChild(cell(entry.request_id || t("(no request)"), "cc-id"));
          tr.appendChild(cell(entry.boosted ? t("{priority} boosted", { priority: entry.priority }) : String(entry.priority), entry.boosted ? "cc-boost" : ""));
          tr.appendChild(cell(t("{ms} ms", { ms: fmt(entry.waited_ms, 0) })));
          tr.appendChild(cell(w.worker_id, "cc-id"));
          rows.push(tr);
        });
      });
    });
    replaceRows(q(root, "queue-rows"), rows, 5, t("nobody is waiting"));
  }

  // answers given from the passages alone while the LLM failed, summed over workers (since each one started)
  function degradedAnswers(status) {
    return status.workers.reduce((sum, w) => sum + (((w.extra || {}).answers || {}).degraded || 0), 0);
  }

  // auxiliary LLM calls (planner, summary) skipped for want of a slot, per kind, summed over workers by the server
  function skippedCalls(status) {
    const parts = Object.entries(status.auxiliary_skipped || {}).map(([kind, count]) => kind + " " + count);
    return parts.length ? parts.join(", ") : t("none");
  }

  // what this worker's LLM backend learned its server accepts (rag.llm.capabilities), in one line
  function llmServer(status) {
    const server = (status.worker.extra || {}).llm_server;
    if (!server) return t("offline");
    const parts = [t("structured output as {mode}", { mode: server.structured_output.chat })];
    if (server.stream_usage === false) parts.push(t("usage counted here"));
    if (server.stream_options === false) parts.push(t("no stream_options"));
    if (server.responses_api === false) parts.push(t("no Responses API"));
    if (server.prefill_ms_per_1k_tokens !== null) {
      parts.push(t("prefill {ms} ms per 1k tokens", { ms: fmt(server.prefill_ms_per_1k_tokens, 0) }));
    }
    return parts.join(" · ");
  }

  function render(status) {
    setText(q(root, "mode"), named("mode", status.worker.manager.mode));
    setText(q(root, "workers"), status.workers.length);
    setText(q(root, "version"), status.settings.version);
    setText(q(root, "live"), status.worker.manager.live_requests);
    setText(q(root, "degraded"), degradedAnswers(status));
    setText(q(root, "skipped"), skippedCalls(status));
    setText(q(root, "llm-server"), llmServer(status));
    const cluster = status.cluster;
    setText(q(root, "limit-scope"), cluster
      ? t("cluster-wide ({state})", {
        state: cluster.state === "redis" ? "Redis"
          : t("{state}: {count} workers share it", { state: named("state", cluster.state), count: cluster.live_workers }),
      })
      : t("per worker"));
    renderBackends(status);
    renderWorkers(status);
    renderQueues(status);
  }

  function connection(ok, text) {
    const el = q(root, "conn");
    el.classList.toggle("ok", ok);
    el.classList.toggle("bad", !ok);
    setText(el, text);
  }

  async function poll() {
    const started = performance.now();
    const controller = new AbortController();
    const timer = setTimeout(() => controller.abort(), 3000);
    try {
      const response = await fetch(statusUrl, {
        credentials: "same-origin", cache: "no-store", headers: { Accept: "application/json" },
        signal: controller.signal,
      });
      if (response.status === 403 || response.redirected) {
        connection(false, t("signed out: reload the page"));
        return; // stop polling; a new session needs a reload anyway
      }
      if (!response.ok) throw new Error("HTTP " + response.status);
      render(await response.json());
      connection(true, t("live · {time}", { time: CLOCK.format(new Date()) }));
    } catch (error) {
      connection(false, t("no answer ({error}), retrying", { error: error.name === "AbortError" ? t("timeout") : error.message }));
    } finally {
      clearTimeout(timer);
    }
    setTimeout(poll, Math.max(100, POLL_MS - (performance.now() - started)));
  }

  const initial = document.getElementById("concurrency-initial-status");
  if (initial) {
    try { render(JSON.parse(initial.textContent)); } catch (error) { /* the first poll draws it */ }
  }
  poll();
})();
