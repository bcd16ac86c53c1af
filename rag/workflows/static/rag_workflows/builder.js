/* Graph builder: place pipeline nodes, wire their routes, validate live, save, compare, test-run and publish.
 *
 * Plain JS + SVG, no build step. The server is the authority on everything that matters: the node catalogue,
 * validation (the engine's own validator), versions, and runs. This file only edits a graph JSON of the engine's
 * shape ({name, entry, nodes: [{id, type, params}], edges: [{source, target, route, max_visits?}]}) plus a
 * `layout` map of canvas positions, which the engine ignores.
 */
(function () {
  "use strict";

  const SVG_NS = "http://www.w3.org/2000/svg";
  const END = "END";
  const NODE_W = 176;
  const HEAD_H = 44;
  const ROW_H = 21;
  const END_W = 84;
  const END_H = 34;
  const COL_W = 222;
  const ROW_GAP = 34;
  const VALIDATE_DELAY_MS = 300;
  // Colour families by what a node does, so a pipeline reads at a glance (unknown types stay neutral).
  const FAMILIES = {
    guard: "input", language_normalizer: "input",
    cache_lookup: "cache", cache_response: "cache", cache_store: "cache",
    planner: "plan", followup_transform: "plan", query_builder: "plan",
    tool_executor: "retrieve", retrieval_checker: "retrieve",
    response_synth: "answer", telemetry: "ops",
  };

  const FAMILY_NAMES = {input: "input", cache: "semantic cache", plan: "planning", retrieve: "retrieval",
    answer: "answer", ops: "operations"};

  const root = document.getElementById("graph-builder");
  if (!root) return;
  const config = JSON.parse(document.getElementById(root.dataset.config).textContent);
  const csrfToken = root.querySelector("input[name=csrfmiddlewaretoken]").value;
  const $ = (id) => document.getElementById(id);
  // The page's language (the admin's): `t("Saved {name}.", {name})` looks the English text up in the words the page
  // carries (rag.workflows.builder_words) and fills its {placeholders}; a text it lacks stays English.
  const words = config.words || {};
  const t = (text, values) => (words[text] || text).replace(/\{(\w+)\}/g,
    (match, key) => (values && key in values ? String(values[key]) : match));
  const zh = (config.language || "").startsWith("zh");
  const describe = (type) => (zh && type.description["zh-hant"]) || type.description.en;
  const svg = $("gb-canvas");

  const state = {
    types: {},          // node type name -> catalogue entry
    typeOrder: [],
    drafts: [],
    draft: null,        // the loaded draft (detail), or the read-only default
    graph: emptyGraph("new"),
    layout: {},         // node id (and END) -> [x, y]
    selection: null,    // {kind: "node", id} | {kind: "edge", index}
    problems: [],
    valid: null,
    dirty: false,
    view: {x: 0, y: 0, scale: 1},
    run: null,          // {controller, current, visited: Map(id -> ms)}
    versions: [],
  };

  // ------------------------------------------------------------------------------------------------ helpers

  function emptyGraph(name) {
    return {name: name, entry: "", nodes: [], edges: []};
  }

  function el(tag, attrs, children) {
    const node = document.createElement(tag);
    setAttrs(node, attrs);
    appendAll(node, children);
    return node;
  }

  function sv(tag, attrs, children) {
    const node = document.createElementNS(SVG_NS, tag);
    setAttrs(node, attrs);
    appendAll(node, children);
    return node;
  }

  function setAttrs(node, attrs) {
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : value);
    }
  }

  function appendAll(node, children) {
    for (const child of [].concat(children || [])) {
      if (child === null || child === undefined || child === false) continue;
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }

  async function api(method, url, body) {
    const options = {method: method, headers: {"Accept": "application/json"}, credentials: "same-origin"};
    if (body !== undefined) {
      options.headers["Content-Type"] = "application/json";
      options.headers["X-CSRFToken"] = csrfToken;
      options.body = JSON.stringify(body);
    }
    const response = await fetch(url, options);
    let data = null;
    try { data = await response.json(); } catch (e) { data = null; }
    if (!response.ok) {
      const error = new Error((data && data.error && data.error.message) || ("HTTP " + response.status));
      error.status = response.status;
      error.problems = (data && data.error && data.error.problems) || null;
      error.data = (data && data.error) || {};
      throw error;
    }
    return data;
  }

  function draftUrl(suffix) {
    return config.api.drafts + "/" + state.draft.id + (suffix || "");
  }

  function say(text, level) {
    const list = $("gb-messages");
    const item = el("li", {class: level || "success", text: text});
    list.replaceChildren(item);
    if (level !== "error") setTimeout(() => { if (item.isConnected) item.remove(); }, 6000);
  }

  function nodeById(id) {
    return state.graph.nodes.find((n) => n.id === id) || null;
  }

  function routesOf(node) {
    const type = state.types[node.type];
    const declared = type ? type.routes.slice() : [];
    // Edges on routes the type does not have (an unknown type, or a catalogue change) still get a port to show.
    for (const edge of state.graph.edges) {
      if (edge.source === node.id && !declared.includes(edge.route || "default")) declared.push(edge.route || "default");
    }
    return declared.length ? declared : ["default"];
  }

  function edgeFor(source, route) {
    return state.graph.edges.findIndex((e) => e.source === source && (e.route || "default") === route);
  }

  function readOnly() {
    return !config.canEdit || !state.draft || state.draft.read_only;
  }

  function problemsOf(id) {
    return state.problems.filter((p) => p.node === id);
  }

  // ------------------------------------------------------------------------------------------------ graph edits

  function changed() {
    state.dirty = true;
    clearRun();
    renderAll();
    scheduleValidate();
  }

  function uniqueId(base) {
    let id = base;
    for (let n = 2; nodeById(id) || id === END; n++) id = base + "_" + n;
    return id;
  }

  function addNode(typeName, at) {
    if (readOnly()) return blocked();
    const id = uniqueId(typeName);
    state.graph.nodes.push({id: id, type: typeName, params: {}});
    if (!state.graph.entry) state.graph.entry = id;
    state.layout[id] = at ? [Math.round(at[0]), Math.round(at[1])] : freeSpot();
    keepEndClear(id);
    state.selection = {kind: "node", id: id};
    changed();
    focusNode(id);
    say(state.graph.entry === id ? t("Added {id} (the entry node).", {id}) : t("Added {id}.", {id}));
  }

  function freeSpot() {
    // Next to the node added last, wrapping to a new row at the visible edge: new nodes never land on old
    // ones and stay in view.
    const view = visibleBox();
    const placed = state.graph.nodes.filter((n) => state.layout[n.id]);
    if (!placed.length) return [Math.round(view.x + 60), Math.round(view.y + 60)];
    const last = state.layout[placed[placed.length - 1].id];
    if (last[0] + COL_W + NODE_W <= view.x + view.w - 20) return [last[0] + COL_W, last[1]];
    let bottom = last[1];
    for (const n of placed) bottom = Math.max(bottom, state.layout[n.id][1] + nodeSize(n.id)[1]);
    return [Math.round(view.x + 60), bottom + 50];
  }

  function keepEndClear(id) {
    // END stays to the right of a growing chain instead of disappearing under it.
    const pos = state.layout[id];
    const end = state.layout[END];
    if (end && end[0] < pos[0] + NODE_W + 30 && end[0] + END_W > pos[0] - 30 &&
        end[1] < pos[1] + nodeSize(id)[1] + 20 && end[1] + END_H > pos[1] - 20) {
      state.layout[END] = [pos[0] + COL_W, end[1]];
    }
  }

  function removeNode(id) {
    if (readOnly()) return blocked();
    state.graph.nodes = state.graph.nodes.filter((n) => n.id !== id);
    state.graph.edges = state.graph.edges.filter((e) => e.source !== id && e.target !== id);
    delete state.layout[id];
    if (state.graph.entry === id) state.graph.entry = state.graph.nodes.length ? state.graph.nodes[0].id : "";
    state.selection = null;
    changed();
    svg.focus();
    say(t("Removed {id}.", {id}));
  }

  function renameNode(oldId, newId) {
    newId = newId.trim();
    if (newId === oldId) return true;
    if (!/^[A-Za-z0-9_.-]{1,60}$/.test(newId) || newId === END || nodeById(newId)) {
      say("'" + newId + "' cannot be used: ids are unique, 1–60 letters, digits, _ . -, and not END.", "error");
      return false;
    }
    nodeById(oldId).id = newId;
    for (const edge of state.graph.edges) {
      if (edge.source === oldId) edge.source = newId;
      if (edge.target === oldId) edge.target = newId;
    }
    if (state.graph.entry === oldId) state.graph.entry = newId;
    state.layout[newId] = state.layout[oldId];
    delete state.layout[oldId];
    state.selection = {kind: "node", id: newId};
    changed();
    return true;
  }

  function connect(source, route, target, maxVisits) {
    if (readOnly()) return blocked();
    const index = edgeFor(source, route);
    if (!target) {
      if (index >= 0) state.graph.edges.splice(index, 1);
    } else {
      const edge = {source: source, target: target, route: route};
      const bound = maxVisits !== undefined ? maxVisits : (index >= 0 ? state.graph.edges[index].max_visits : undefined);
      if (bound) edge.max_visits = bound;
      if (index >= 0) state.graph.edges[index] = edge; else state.graph.edges.push(edge);
    }
    changed();
  }

  function setMaxVisits(index, value) {
    const edge = state.graph.edges[index];
    if (!edge) return;
    const n = parseInt(value, 10);
    if (value === "" || !(n >= 1)) delete edge.max_visits; else edge.max_visits = n;
    changed();
  }

  function blocked() {
    say(config.canEdit ? t("The built-in workflow is read-only: copy it into a draft to edit.") :
      t("You lack the permission to change workflow drafts."), "warning");
  }

  // ------------------------------------------------------------------------------------------------ layout

  function nodeSize(id) {
    if (id === END) return [END_W, END_H];
    const node = nodeById(id);
    return [NODE_W, HEAD_H + routesOf(node).length * ROW_H + 8];
  }

  function arrange() {
    // Layers by longest path from the entry (back edges of loops ignored), wrapped into bands so a long
    // pipeline stays readable without zooming far out.
    const ids = state.graph.nodes.map((n) => n.id);
    const out = new Map(ids.map((id) => [id, []]));
    for (const edge of state.graph.edges) {
      if (out.has(edge.source)) out.get(edge.source).push(edge.target);
    }
    const depth = new Map();
    const order = [];
    const onPath = new Set();
    const backEdges = new Set();
    function visit(id) {
      if (onPath.has(id) || order.includes(id) || !out.has(id)) return;
      onPath.add(id);
      for (const next of out.get(id)) {
        if (onPath.has(next)) backEdges.add(id + ">" + next); else visit(next);
      }
      onPath.delete(id);
      order.unshift(id);
    }
    if (state.graph.entry && out.has(state.graph.entry)) visit(state.graph.entry);
    for (const id of ids) visit(id);
    for (const id of order) {
      if (!depth.has(id)) depth.set(id, 0);
      for (const next of out.get(id)) {
        if (backEdges.has(id + ">" + next) || !out.has(next)) continue;
        depth.set(next, Math.max(depth.get(next) || 0, depth.get(id) + 1));
      }
    }
    let maxDepth = 0;
    for (const value of depth.values()) maxDepth = Math.max(maxDepth, value);
    const hasEnd = state.graph.edges.some((e) => e.target === END);
    const columns = maxDepth + 1 + (hasEnd ? 1 : 0);
    const cells = new Map();
    for (const id of order) {
      const col = depth.get(id);
      if (!cells.has(col)) cells.set(col, []);
      cells.get(col).push(id);
    }
    if (hasEnd) cells.set(maxDepth + 1, [END]);
    // Wrap the columns into bands: the fewest bands that still show the whole workflow at a legible zoom
    // (0.85 or more), else whichever wrapping zooms out least.
    const width = Math.max(400, svg.clientWidth || 900);
    const height = Math.max(300, svg.clientHeight || 520);
    let best = null;
    for (let perBand = columns; perBand >= Math.min(3, columns); perBand--) {
      const placed = placeBands(cells, perBand);
      const scale = Math.min(width / (placed.width + 90), height / (placed.height + 60));
      if (!best || scale > best.scale + 0.01) best = Object.assign({scale: scale}, placed);
      if (scale >= 0.85) { best = Object.assign({scale: scale}, placed); break; }
    }
    const layout = best ? best.layout : {};
    if (!hasEnd) layout[END] = [(best ? best.width : 0) + 60, 38];  // not wired yet: beside the first band
    state.layout = layout;
  }

  function placeBands(cells, perBand) {
    const bandHeights = [];
    for (const [col, members] of cells) {
      const band = Math.floor(col / perBand);
      const h = members.reduce((sum, id) => sum + nodeSize(id)[1] + ROW_GAP, 0);
      bandHeights[band] = Math.max(bandHeights[band] || 0, h);
    }
    const layout = {};
    let widest = 0;
    for (const [col, members] of cells) {
      const band = Math.floor(col / perBand);
      let y = 30 + bandHeights.slice(0, band).reduce((sum, h) => sum + (h || 0) + 30, 0);
      const x = 30 + (col % perBand) * COL_W;
      widest = Math.max(widest, x + NODE_W);
      for (const id of members) {
        layout[id] = [x, id === END ? y + 8 : y];
        y += nodeSize(id)[1] + ROW_GAP;
      }
    }
    const total = bandHeights.reduce((sum, h) => sum + (h || 0) + 30, 0);
    return {layout: layout, width: widest, height: total};
  }

  function ensureLayout() {
    const missing = state.graph.nodes.some((n) => !state.layout[n.id]);
    if (missing && Object.keys(state.layout).length === 0) arrange();
    for (const node of state.graph.nodes) {
      if (!state.layout[node.id]) state.layout[node.id] = freeSpot();
    }
    if (!state.layout[END]) {
      // Right of everything; on an empty canvas far enough right that the first nodes do not land on it.
      let maxX = 30 + 3 * COL_W;
      for (const node of state.graph.nodes) maxX = Math.max(maxX, state.layout[node.id][0] + COL_W);
      state.layout[END] = [maxX, 48];
    }
  }

  // ------------------------------------------------------------------------------------------------ view

  function applyView() {
    const w = svg.clientWidth || 900;
    const h = svg.clientHeight || 520;
    const v = state.view;
    svg.setAttribute("viewBox", [v.x, v.y, w / v.scale, h / v.scale].map((n) => n.toFixed(1)).join(" "));
  }

  function visibleBox() {
    const v = state.view;
    return {x: v.x, y: v.y, w: (svg.clientWidth || 900) / v.scale, h: (svg.clientHeight || 520) / v.scale};
  }

  function fit() {
    const ids = [...state.graph.nodes.map((n) => n.id), END];
    let minX = Infinity, minY = Infinity, maxX = -Infinity, maxY = -Infinity;
    for (const id of ids) {
      const pos = state.layout[id];
      if (!pos) continue;
      const size = nodeSize(id);
      // Room for the entry tag on the left, route dots and loop lanes on the right and below.
      minX = Math.min(minX, pos[0] - 50); minY = Math.min(minY, pos[1] - 24);
      maxX = Math.max(maxX, pos[0] + size[0] + 50); maxY = Math.max(maxY, pos[1] + size[1] + 44);
    }
    if (!isFinite(minX)) { state.view = {x: 0, y: 0, scale: 1}; applyView(); return; }
    const w = svg.clientWidth || 900;
    const h = svg.clientHeight || 520;
    const pad = 10;
    const scale = Math.max(0.35, Math.min(1.1, (w - pad * 2) / (maxX - minX), (h - pad * 2) / (maxY - minY)));
    state.view = {
      scale: scale,
      x: minX - ((w / scale) - (maxX - minX)) / 2,
      y: minY - ((h / scale) - (maxY - minY)) / 2,
    };
    applyView();
  }

  function zoom(factor, centre) {
    const v = state.view;
    const box = visibleBox();
    const c = centre || [box.x + box.w / 2, box.y + box.h / 2];
    const scale = Math.max(0.3, Math.min(2.5, v.scale * factor));
    v.x = c[0] - (c[0] - v.x) * (v.scale / scale);
    v.y = c[1] - (c[1] - v.y) * (v.scale / scale);
    v.scale = scale;
    applyView();
  }

  function toCanvas(clientX, clientY) {
    const rect = svg.getBoundingClientRect();
    return [state.view.x + (clientX - rect.left) / state.view.scale, state.view.y + (clientY - rect.top) / state.view.scale];
  }

  // ------------------------------------------------------------------------------------------------ render

  function renderAll() {
    renderCanvas();
    renderInspector();
    renderProblems();
    renderStatus();
  }

  function inPort(id) {
    const pos = state.layout[id];
    const size = nodeSize(id);
    return id === END ? [pos[0], pos[1] + size[1] / 2] : [pos[0], pos[1] + HEAD_H / 2];
  }

  function outPort(id, route) {
    const pos = state.layout[id];
    const index = Math.max(0, routesOf(nodeById(id)).indexOf(route));
    return [pos[0] + NODE_W, pos[1] + HEAD_H + index * ROW_H + ROW_H / 2];
  }

  function edgePath(a, b, lane) {
    const dx = b[0] - a[0];
    if (dx > 40) {
      const c = Math.max(40, dx / 2);
      return `M${a[0]},${a[1]} C${a[0] + c},${a[1]} ${b[0] - c},${b[1]} ${b[0]},${b[1]}`;
    }
    // Backwards (a loop, or into the next band): leave to the right, run along a horizontal lane, and come
    // into the target from its left, so the line never cuts through the boxes it passes.
    const y = lane !== undefined ? lane : Math.max(a[1], b[1]) + 50;
    const r = 28;
    return `M${a[0]},${a[1]} C${a[0] + r * 1.6},${a[1]} ${a[0] + r * 1.6},${y} ${a[0]},${y} ` +
      `L${b[0]},${y} C${b[0] - r * 1.6},${y} ${b[0] - r * 1.6},${b[1]} ${b[0]},${b[1]}`;
  }

  function backLane(edge, index) {
    // Into a lower band: the gap just above the target. A loop or an upward edge: just below the lower box.
    const source = state.layout[edge.source];
    const target = state.layout[edge.target];
    if (!source || !target) return undefined;
    const sourceBottom = source[1] + nodeSize(edge.source)[1];
    const targetBottom = target[1] + nodeSize(edge.target)[1];
    const spread = (index % 4) * 5;
    if (target[1] > sourceBottom + 20) return target[1] - 16 - spread;
    return Math.max(sourceBottom, targetBottom) + 18 + spread;
  }

  function renderCanvas() {
    const hadFocus = svg.contains(document.activeElement) ? document.activeElement.dataset.node : null;
    svg.replaceChildren();
    applyView();
    svg.append(sv("defs", {}, [
      sv("marker", {id: "gb-arrow", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"},
        [sv("path", {d: "M0,0 L10,5 L0,10 z", class: "gb-arrowhead"})]),
      sv("marker", {id: "gb-arrow-selected", viewBox: "0 0 10 10", refX: "9", refY: "5", markerWidth: "7", markerHeight: "7", orient: "auto-start-reverse"},
        [sv("path", {d: "M0,0 L10,5 L0,10 z", class: "gb-arrowhead selected"})]),
      sv("pattern", {id: "gb-grid", width: "24", height: "24", patternUnits: "userSpaceOnUse"},
        [sv("circle", {cx: "1", cy: "1", r: "1", class: "gb-grid-dot"})]),
    ]));
    const box = visibleBox();
    svg.append(sv("rect", {class: "gb-bg", x: box.x - 2000, y: box.y - 2000, width: box.w + 4000, height: box.h + 4000, fill: "url(#gb-grid)"}));

    const edgeLayer = sv("g", {class: "gb-edges"});
    const nodeLayer = sv("g", {class: "gb-nodes"});
    svg.append(edgeLayer, nodeLayer);

    state.graph.edges.forEach((edge, index) => {
      const route = edge.route || "default";
      if (!nodeById(edge.source) || !state.layout[edge.source]) return;
      const target = edge.target === END ? END : (nodeById(edge.target) ? edge.target : null);
      const a = outPort(edge.source, route);
      const b = target ? inPort(target) : [a[0] + 60, a[1]];
      const selected = state.selection && state.selection.kind === "edge" && state.selection.index === index;
      const ran = state.run && state.run.edges.has(edge.source + ">" + route);
      const lane = target && b[0] - a[0] <= 40 ? backLane(edge, index) : undefined;
      const d = edgePath(a, b, lane);
      const group = sv("g", {
        class: "gb-edge" + (selected ? " selected" : "") + (target ? "" : " dangling") + (ran ? " ran" : ""),
        "data-edge": index,
      }, [
        sv("path", {d: d, class: "gb-edge-hit"}),
        sv("path", {d: d, class: "gb-edge-line", "marker-end": selected ? "url(#gb-arrow-selected)" : "url(#gb-arrow)"}),
        sv("title", {text: `${edge.source} —${route}→ ${edge.target}` + (edge.max_visits ? ` (at most ${edge.max_visits} times)` : "")}),
      ]);
      if (edge.max_visits) {
        const mid = [(a[0] + b[0]) / 2, lane === undefined ? (a[1] + b[1]) / 2 : lane];
        group.append(sv("g", {class: "gb-edge-label", transform: `translate(${mid[0]},${mid[1]})`}, [
          sv("rect", {x: -22, y: -10, width: 44, height: 20, rx: 10}),
          sv("text", {x: 0, y: 4, "text-anchor": "middle", text: "≤ " + edge.max_visits}),
        ]));
      }
      group.addEventListener("pointerdown", (event) => {
        event.stopPropagation();
        state.selection = {kind: "edge", index: index};
        renderAll();
      });
      edgeLayer.append(group);
    });

    for (const node of state.graph.nodes) nodeLayer.append(renderNode(node));
    nodeLayer.append(renderEnd());

    const general = state.problems.filter((p) => !p.node || (!nodeById(p.node) && p.node !== END));
    if (general.length) {
      const banner = sv("g", {class: "gb-banner", transform: `translate(${box.x + 12},${box.y + 12})`});
      banner.append(sv("rect", {width: Math.min(box.w - 24, 560), height: 24 + 16 * (general.length - 1), rx: 4}));
      general.slice(0, 4).forEach((p, i) => banner.append(sv("text", {x: 10, y: 16 + i * 16, text: "⚠ " + p.message})));
      svg.append(banner);
    }
    if (!state.graph.nodes.length) {
      svg.append(sv("text", {class: "gb-empty", x: box.x + box.w / 2, y: box.y + box.h / 2, "text-anchor": "middle",
        text: readOnly() ? t("Empty workflow") : t("Drag a node type here, or select one in the palette and press Enter")}));
    }
    if (hadFocus) focusNode(hadFocus);
  }

  function renderNode(node) {
    const id = node.id;
    const pos = state.layout[id];
    const size = nodeSize(id);
    const type = state.types[node.type];
    const problems = problemsOf(id);
    const selected = state.selection && state.selection.kind === "node" && state.selection.id === id;
    const run = state.run;
    const classes = ["gb-node", "family-" + (FAMILIES[node.type] || "other")];
    if (selected) classes.push("selected");
    if (problems.length) classes.push("has-problem");
    if (!type) classes.push("unknown-type");
    if (run && run.current === id) classes.push("running");
    if (run && run.visited.has(id)) classes.push("visited");
    const label = `${id}, ${node.type}` + (state.graph.entry === id ? t(", entry") : "") +
      (problems.length ? t(problems.length > 1 ? ", {count} problems: {messages}" : ", {count} problem: {messages}",
        {count: problems.length, messages: problems.map((p) => p.message).join("; ")}) : "");
    const group = sv("g", {
      class: classes.join(" "), transform: `translate(${pos[0]},${pos[1]})`, "data-node": id, tabindex: "0",
      role: "button", "aria-label": label, "aria-pressed": selected ? "true" : "false",
    });
    group.append(
      sv("title", {text: label}),
      sv("rect", {class: "gb-node-box", width: size[0], height: size[1], rx: 6}),
      sv("rect", {class: "gb-node-stripe", width: 5, height: size[1], rx: 2}),
      sv("text", {class: "gb-node-title", x: 14, y: 18, text: clip(id, 20)}),
      sv("text", {class: "gb-node-type", x: 14, y: 34, text: subtitle(node, type)}),
      sv("circle", {class: "gb-port in", cx: 0, cy: HEAD_H / 2, r: 5}),
    );
    if (state.graph.entry === id) {
      group.append(sv("g", {class: "gb-entry", transform: "translate(8,-9)"}, [
        sv("rect", {x: 0, y: -8, width: 46, height: 16, rx: 8}),
        sv("text", {x: 23, y: 4, "text-anchor": "middle", text: t("▶ start")}),
      ]));
    }
    if (run && run.visited.has(id)) {
      group.append(sv("text", {class: "gb-node-ms", x: size[0] - 10, y: 34, "text-anchor": "end", text: run.visited.get(id)}));
    }
    routesOf(node).forEach((route, index) => {
      const y = HEAD_H + index * ROW_H;
      const wired = edgeFor(id, route) >= 0;
      const port = sv("g", {class: "gb-route" + (wired ? " wired" : ""), "data-route": route}, [
        sv("line", {x1: 8, x2: size[0] - 8, y1: y, y2: y, class: "gb-route-rule"}),
        sv("text", {x: size[0] - 14, y: y + 14, "text-anchor": "end", text: route}),
        sv("circle", {class: "gb-port out", cx: size[0], cy: y + ROW_H / 2, r: 6}),
      ]);
      port.querySelector(".gb-port").addEventListener("pointerdown", (event) => startWire(event, id, route));
      group.append(port);
    });
    if (problems.length) {
      group.append(sv("g", {class: "gb-badge", transform: `translate(${size[0] - 2},2)`}, [
        sv("circle", {r: 9}), sv("text", {y: 4, "text-anchor": "middle", text: String(problems.length)}),
      ]));
      const note = sv("foreignObject", {x: 0, y: size[1] + 3, width: size[0] + 40, height: 34, class: "gb-node-problem-fo"});
      const div = document.createElement("div");
      div.className = "gb-node-problem";
      div.textContent = problems[0].message + (problems.length > 1 ? ` (+${problems.length - 1})` : "");
      note.append(div);
      group.append(note);
    }
    group.addEventListener("pointerdown", (event) => startMove(event, id));
    group.addEventListener("keydown", (event) => nodeKey(event, id));
    group.addEventListener("focus", () => {
      if (!state.selection || state.selection.id !== id) { state.selection = {kind: "node", id: id}; renderInspector(); markSelection(); }
    });
    return group;
  }

  function renderEnd() {
    const pos = state.layout[END];
    const problems = problemsOf(END);
    const reached = state.run && state.run.ended;
    const group = sv("g", {class: "gb-node gb-end" + (reached ? " visited" : "") + (problems.length ? " has-problem" : ""),
      transform: `translate(${pos[0]},${pos[1]})`, "data-node": END, tabindex: "0", role: "button",
      "aria-label": t("END: the end of the workflow")}, [
      sv("rect", {class: "gb-node-box", width: END_W, height: END_H, rx: END_H / 2}),
      sv("text", {class: "gb-node-title", x: END_W / 2, y: END_H / 2 + 5, "text-anchor": "middle", text: "END"}),
      sv("circle", {class: "gb-port in", cx: 0, cy: END_H / 2, r: 5}),
    ]);
    group.addEventListener("pointerdown", (event) => startMove(event, END));
    group.addEventListener("keydown", (event) => nodeKey(event, END));
    return group;
  }

  function markSelection() {
    for (const node of svg.querySelectorAll(".gb-node")) {
      const on = state.selection && state.selection.kind === "node" && state.selection.id === node.dataset.node;
      node.classList.toggle("selected", !!on);
      node.setAttribute("aria-pressed", on ? "true" : "false");
    }
  }

  function subtitle(node, type) {
    if (!type) return t("unknown type {type}", {type: clip(node.type, 14)});
    const family = t(FAMILY_NAMES[FAMILIES[node.type]] || "node");
    return node.type === node.id ? family : clip(node.type, 24);
  }

  function clip(text, n) {
    return text.length > n ? text.slice(0, n - 1) + "…" : text;
  }

  function focusNode(id) {
    const node = svg.querySelector(`[data-node="${CSS.escape(id)}"]`);
    if (node) node.focus({preventScroll: true});
  }

  // ------------------------------------------------------------------------------------------------ pointer

  let gesture = null;

  function startMove(event, id) {
    if (event.button !== 0) return;
    event.stopPropagation();
    const start = toCanvas(event.clientX, event.clientY);
    gesture = {kind: "move", id: id, start: start, origin: state.layout[id].slice(), moved: false, pointer: event.pointerId};
    svg.setPointerCapture(event.pointerId);
    if (id !== END && (!state.selection || state.selection.id !== id)) {
      state.selection = {kind: "node", id: id};
      renderInspector();
      markSelection();
    }
  }

  function startWire(event, id, route) {
    if (event.button !== 0) return;
    event.stopPropagation();
    if (readOnly()) return blocked();
    const a = outPort(id, route);
    const line = sv("path", {class: "gb-wire", d: `M${a[0]},${a[1]} L${a[0]},${a[1]}`});
    svg.append(line);
    gesture = {kind: "wire", id: id, route: route, from: a, line: line, pointer: event.pointerId};
    svg.setPointerCapture(event.pointerId);
  }

  svg.addEventListener("pointerdown", (event) => {
    if (event.button !== 0) return;
    gesture = {kind: "pan", start: [event.clientX, event.clientY], origin: [state.view.x, state.view.y], moved: false, pointer: event.pointerId};
    svg.setPointerCapture(event.pointerId);
  });

  svg.addEventListener("pointermove", (event) => {
    if (!gesture || event.pointerId !== gesture.pointer) return;
    if (gesture.kind === "pan") {
      const dx = event.clientX - gesture.start[0];
      const dy = event.clientY - gesture.start[1];
      if (Math.abs(dx) + Math.abs(dy) > 3) gesture.moved = true;
      state.view.x = gesture.origin[0] - dx / state.view.scale;
      state.view.y = gesture.origin[1] - dy / state.view.scale;
      applyView();
    } else if (gesture.kind === "move") {
      if (readOnly()) return;
      const p = toCanvas(event.clientX, event.clientY);
      const dx = p[0] - gesture.start[0];
      const dy = p[1] - gesture.start[1];
      if (!gesture.moved && Math.abs(dx) + Math.abs(dy) < 3) return;
      gesture.moved = true;
      state.layout[gesture.id] = [Math.round(gesture.origin[0] + dx), Math.round(gesture.origin[1] + dy)];
      renderCanvas();
    } else if (gesture.kind === "wire") {
      const p = toCanvas(event.clientX, event.clientY);
      gesture.line.setAttribute("d", edgePath(gesture.from, p));
      const over = targetUnder(event);
      for (const node of svg.querySelectorAll(".gb-node.drop-target")) node.classList.remove("drop-target");
      if (over) svg.querySelector(`[data-node="${CSS.escape(over)}"]`).classList.add("drop-target");
    }
  });

  function targetUnder(event) {
    const hit = document.elementFromPoint(event.clientX, event.clientY);
    const node = hit && hit.closest ? hit.closest("[data-node]") : null;
    return node ? node.dataset.node : null;
  }

  function endGesture(event) {
    if (!gesture || event.pointerId !== gesture.pointer) return;
    const g = gesture;
    gesture = null;
    if (g.kind === "pan" && !g.moved) {
      state.selection = null;
      renderAll();
    } else if (g.kind === "move" && g.moved) {
      state.dirty = true;
      renderAll();
    } else if (g.kind === "wire") {
      g.line.remove();
      const target = event.type === "pointerup" ? targetUnder(event) : null;
      if (target && target !== g.id) {
        connect(g.id, g.route, target);
        say(t("Connected {source} —{route}→ {target}.", {source: g.id, route: g.route, target}));
      } else {
        renderCanvas();
      }
    }
  }

  svg.addEventListener("pointerup", endGesture);
  svg.addEventListener("pointercancel", endGesture);

  svg.addEventListener("wheel", (event) => {
    event.preventDefault();
    zoom(event.deltaY < 0 ? 1.1 : 1 / 1.1, toCanvas(event.clientX, event.clientY));
  }, {passive: false});

  svg.addEventListener("dragover", (event) => {
    if (event.dataTransfer.types.includes("application/x-node-type")) {
      event.preventDefault();
      event.dataTransfer.dropEffect = "copy";
    }
  });

  svg.addEventListener("drop", (event) => {
    const typeName = event.dataTransfer.getData("application/x-node-type");
    if (!typeName) return;
    event.preventDefault();
    const p = toCanvas(event.clientX, event.clientY);
    addNode(typeName, [p[0] - NODE_W / 2, p[1] - HEAD_H / 2]);
  });

  function nodeKey(event, id) {
    const step = event.shiftKey ? 48 : 12;
    const moves = {ArrowLeft: [-step, 0], ArrowRight: [step, 0], ArrowUp: [0, -step], ArrowDown: [0, step]};
    if (moves[event.key] && !readOnly()) {
      event.preventDefault();
      const pos = state.layout[id];
      state.layout[id] = [pos[0] + moves[event.key][0], pos[1] + moves[event.key][1]];
      state.dirty = true;
      renderCanvas();
      renderStatus();
      focusNode(id);
    } else if ((event.key === "Delete" || event.key === "Backspace") && id !== END) {
      event.preventDefault();
      removeNode(id);
    } else if (event.key === "Enter" && id !== END) {
      event.preventDefault();
      const first = $("gb-inspector").querySelector("input, select, button");
      if (first) first.focus();
    }
  }

  svg.addEventListener("keydown", (event) => {
    if (event.target !== svg) return;
    if ((event.key === "Delete" || event.key === "Backspace") && state.selection && state.selection.kind === "edge") {
      event.preventDefault();
      if (readOnly()) return blocked();
      state.graph.edges.splice(state.selection.index, 1);
      state.selection = null;
      changed();
    } else if (event.key === "+" || event.key === "=") zoom(1.2);
    else if (event.key === "-") zoom(1 / 1.2);
  });

  // ------------------------------------------------------------------------------------------------ palette

  function renderPalette() {
    const list = $("gb-palette");
    list.replaceChildren();
    for (const name of state.typeOrder) {
      const type = state.types[name];
      const button = el("button", {
        type: "button", class: "gb-palette-item family-" + (FAMILIES[name] || "other"), draggable: "true",
        "data-type": name, title: type.description.en + "\n" + type.description["zh-hant"],
        "aria-label": t("Add {name}: {description}", {name, description: describe(type)}),
      }, [
        el("span", {class: "gb-palette-name", text: name}),
        el("span", {class: "gb-palette-desc", text: type.description.en}),
        el("span", {class: "gb-palette-desc zh", lang: "zh-Hant", text: type.description["zh-hant"]}),
      ]);
      button.addEventListener("click", () => addNode(name));
      button.addEventListener("dragstart", (event) => {
        event.dataTransfer.setData("application/x-node-type", name);
        event.dataTransfer.effectAllowed = "copy";
      });
      list.append(el("li", {}, [button]));
    }
  }

  // ------------------------------------------------------------------------------------------------ inspector

  function renderInspector() {
    const body = $("gb-inspector");
    const title = $("gb-inspector-title");
    body.replaceChildren();
    const sel = state.selection;
    if (sel && sel.kind === "node" && nodeById(sel.id)) {
      title.textContent = t("Node");
      body.append(...inspectNode(nodeById(sel.id)));
    } else if (sel && sel.kind === "edge" && state.graph.edges[sel.index]) {
      title.textContent = t("Edge");
      body.append(...inspectEdge(sel.index));
    } else {
      title.textContent = t("Workflow");
      body.append(...inspectWorkflow());
    }
  }

  function field(label, input, help) {
    const id = input.id || ("gb-f-" + Math.random().toString(36).slice(2, 9));
    input.id = id;
    return el("div", {class: "gb-field"}, [
      el("label", {for: id, text: label}), input, help ? el("div", {class: "help", text: help}) : null,
    ]);
  }

  function targetOptions(sourceId, current) {
    const select = el("select", {});
    select.append(el("option", {value: "", text: "— not connected —"}));
    for (const node of state.graph.nodes) {
      if (node.id === sourceId) continue;
      select.append(el("option", {value: node.id, text: node.id, selected: node.id === current}));
    }
    select.append(el("option", {value: END, text: "END", selected: current === END}));
    if (current && current !== END && !nodeById(current)) {
      select.append(el("option", {value: current, text: current + " (unknown)", selected: true}));
    }
    return select;
  }

  function inspectNode(node) {
    const type = state.types[node.type];
    const ro = readOnly();
    const parts = [];
    parts.push(el("div", {class: "gb-type-card family-" + (FAMILIES[node.type] || "other")}, [
      el("strong", {text: node.type}),
      type ? el("p", {text: type.description.en}) : el("p", {class: "gb-error", text: t("This type is not in the catalogue.")}),
      type ? el("p", {lang: "zh-Hant", class: "gb-quiet", text: type.description["zh-hant"]}) : null,
    ]));
    for (const p of problemsOf(node.id)) parts.push(el("p", {class: "gb-problem-inline", role: "alert", text: p.message}));

    const idInput = el("input", {type: "text", value: node.id, disabled: ro, "data-field": "node-id"});
    idInput.addEventListener("change", () => { if (!renameNode(node.id, idInput.value)) idInput.value = node.id; });
    parts.push(field(t("Node id"), idInput, t("Names this node in events and in problems.")));

    const entry = el("input", {type: "checkbox", checked: state.graph.entry === node.id, disabled: ro || state.graph.entry === node.id});
    entry.addEventListener("change", () => { state.graph.entry = node.id; changed(); });
    parts.push(el("div", {class: "gb-field gb-check"}, [entry, el("label", {text: " " + t("The workflow starts here")})]));
    entry.id = "gb-entry-check";
    parts[parts.length - 1].querySelector("label").setAttribute("for", entry.id);

    const routes = el("fieldset", {class: "gb-routes"}, [
      el("legend", {text: t("Routes")}),
      el("div", {class: "gb-route-row gb-route-head", "aria-hidden": "true"}, [
        el("span", {text: t("route")}), el("span", {text: t("goes to")}), el("span", {text: t("max"), title: "max_visits"}),
      ]),
    ]);
    for (const route of routesOf(node)) {
      const index = edgeFor(node.id, route);
      const edge = index >= 0 ? state.graph.edges[index] : null;
      const target = targetOptions(node.id, edge ? edge.target : "");
      target.disabled = ro;
      target.setAttribute("aria-label", `Route ${route} of ${node.id} goes to`);
      target.dataset.route = route;
      target.addEventListener("change", () => connect(node.id, route, target.value));
      const bound = el("input", {type: "number", min: "1", max: "50", step: "1", value: edge && edge.max_visits ? edge.max_visits : "",
        placeholder: "∞", disabled: ro || !edge, title: t("How often this edge may be taken in one run (loops need a bound)"),
        "aria-label": t("Most times route {route} may be taken", {route}), "data-max-visits": route});
      bound.addEventListener("change", () => setMaxVisits(edgeFor(node.id, route), bound.value));
      const known = !type || type.routes.includes(route);
      routes.append(el("div", {class: "gb-route-row" + (known ? "" : " gb-error")}, [
        el("span", {class: "gb-route-name", text: route, title: route}), target, bound,
      ]));
    }
    parts.push(routes);

    if (type && Object.keys(type.params).length) {
      const params = el("fieldset", {class: "gb-params"}, [el("legend", {text: t("Parameters")})]);
      for (const [name, spec] of Object.entries(type.params)) params.append(paramField(node, name, spec, ro));
      parts.push(params);
    }
    if (type) {
      parts.push(el("dl", {class: "gb-io"}, [
        el("dt", {text: t("Reads")}), el("dd", {}, chips([...type.inputs, ...type.optional_inputs.map((n) => n + "?")])),
        el("dt", {text: t("Writes")}), el("dd", {}, chips(type.outputs)),
      ]));
    }
    if (!ro) {
      parts.push(el("div", {class: "gb-actions"}, [el("button", {type: "button", class: "button gb-danger", text: t("Delete node"),
        onclick: () => removeNode(node.id)})]));
    }
    return parts;
  }

  function chips(names) {
    return names.length ? names.map((n) => el("code", {class: "gb-chip", text: n})) : [el("span", {class: "gb-quiet", text: "—"})];
  }

  function paramField(node, name, spec, ro) {
    const has = Object.prototype.hasOwnProperty.call(node.params || {}, name);
    const value = has ? node.params[name] : spec.default;
    let input;
    if (spec.type === "bool") {
      input = el("input", {type: "checkbox", checked: !!value, disabled: ro});
    } else if (spec.choices && spec.choices.length) {
      input = el("select", {disabled: ro}, spec.choices.map((c) => el("option", {value: c, text: c, selected: c === value})));
    } else if (spec.type === "list") {
      input = el("textarea", {rows: "3", disabled: ro, spellcheck: "false"});
      input.value = Array.isArray(value) ? value.map((v) => typeof v === "string" ? v : JSON.stringify(v)).join("\n") : "";
    } else if (spec.type === "int" || spec.type === "float") {
      input = el("input", {type: "number", step: spec.type === "int" ? "1" : "any", value: value,
        min: spec.minimum !== undefined ? spec.minimum : null, max: spec.maximum !== undefined ? spec.maximum : null, disabled: ro});
    } else {
      input = el("input", {type: "text", value: value === null || value === undefined ? "" : value, disabled: ro});
    }
    input.dataset.param = name;
    input.addEventListener("change", () => {
      let v;
      if (spec.type === "bool") v = input.checked;
      else if (spec.type === "int") v = input.value === "" ? spec.default : Number(input.value);
      else if (spec.type === "float") v = input.value === "" ? spec.default : Number(input.value);
      else if (spec.type === "list") v = input.value.split("\n").map((s) => s.trim()).filter(Boolean);
      else v = input.value;
      node.params = node.params || {};
      if (JSON.stringify(v) === JSON.stringify(spec.default)) delete node.params[name]; else node.params[name] = v;
      changed();
    });
    const range = [spec.minimum !== undefined ? "≥ " + spec.minimum : "", spec.maximum !== undefined ? "≤ " + spec.maximum : ""].filter(Boolean).join(", ");
    const help = `${spec.description ? t(spec.description) : ""} (${spec.type}${range ? ", " + range : ""}${spec.type === "list" ? t(", one per line") : ""})`;
    const wrap = field(name + (has ? " •" : ""), input, help);
    if (has && !ro) {
      wrap.append(el("button", {type: "button", class: "gb-link", text: t("reset to default"),
        onclick: () => { delete node.params[name]; changed(); }}));
    }
    return wrap;
  }

  function inspectEdge(index) {
    const edge = state.graph.edges[index];
    const ro = readOnly();
    const bound = el("input", {type: "number", min: "1", max: "50", value: edge.max_visits || "", placeholder: "unbounded", disabled: ro});
    bound.addEventListener("change", () => setMaxVisits(index, bound.value));
    const parts = [
      el("p", {}, [el("code", {text: edge.source}), " —", el("strong", {text: edge.route || "default"}), "→ ", el("code", {text: edge.target})]),
      field(t("Most times per run (max_visits)"), bound, t("Every loop needs at least one bounded edge.")),
    ];
    if (!ro) {
      parts.push(el("div", {class: "gb-actions"}, [el("button", {type: "button", class: "button gb-danger", text: t("Delete edge"),
        onclick: () => { state.graph.edges.splice(index, 1); state.selection = null; changed(); }})]));
    }
    return parts;
  }

  function inspectWorkflow() {
    const ro = readOnly();
    const entry = el("select", {disabled: ro}, [el("option", {value: "", text: "—"}),
      ...state.graph.nodes.map((n) => el("option", {value: n.id, text: n.id, selected: n.id === state.graph.entry}))]);
    entry.addEventListener("change", () => { state.graph.entry = entry.value; changed(); });
    const d = state.draft;
    return [
      el("p", {class: "gb-quiet", text: d ? (d.read_only ? t("The built-in workflow: look, test-run, or copy it into a draft to edit.")
        : `${d.name} · saved v${d.version}` + (d.published ? ` · serving ${d.backend} (v${d.published_version})` : "")) : ""}),
      field(t("Entry node"), entry),
      el("p", {}, `${state.graph.nodes.length} nodes, ${state.graph.edges.length} edges.`),
      el("div", {class: "gb-help"}, [
        el("h3", {text: t("How to")}),
        el("ul", {}, [
          el("li", {text: t("Add a node: drag it from the palette, or focus it there and press Enter.")}),
          el("li", {text: t("Connect: drag from a route's dot to the next node, or pick the target in the node's Routes.")}),
          el("li", {text: t("Loops need a bound: set max on one of their edges.")}),
          el("li", {text: t("Keyboard: Tab between nodes, arrows move (Shift: faster), Delete removes, Enter edits.")}),
        ]),
      ]),
    ];
  }

  // ------------------------------------------------------------------------------------------------ status

  function renderStatus() {
    const d = state.draft;
    const pill = $("gb-draft-state");
    if (!d) { pill.textContent = ""; return; }
    const bits = [];
    if (d.read_only) bits.push(t("read-only"));
    else bits.push("v" + d.version);
    if (d.published) bits.push(t("serving {backend}", {backend: d.backend}) + (d.published_version !== d.version ? ` (v${d.published_version})` : ""));
    if (state.dirty) bits.push(t("unsaved changes"));
    pill.textContent = bits.join(" · ");
    pill.className = "gb-pill" + (state.dirty ? " dirty" : "") + (d.published ? " live" : "");
    const validity = $("gb-validity");
    if (state.valid === null) { validity.textContent = t("checking…"); validity.className = "gb-validity"; }
    else if (state.valid) { validity.textContent = t("✓ valid"); validity.className = "gb-validity ok"; }
    else {
      const n = state.problems.length;
      validity.textContent = n === 1 ? t("✗ {count} problem", {count: n}) : t("✗ {count} problems", {count: n});
      validity.className = "gb-validity bad";
    }
    $("gb-save").disabled = readOnly();
    $("gb-publish").disabled = readOnly();
    const unpublish = $("gb-unpublish");
    unpublish.hidden = !(d.published && config.canEdit);
    if (d.published) $("gb-backend").value = d.backend;
  }

  function renderProblems() {
    const list = $("gb-problems");
    list.replaceChildren();
    $("gb-problem-count").textContent = String(state.problems.length);
    $("gb-problem-count").classList.toggle("bad", state.problems.length > 0);
    if (!state.problems.length) {
      list.append(el("li", {class: "gb-quiet", text: state.valid ? t("No problems: the engine can compile this workflow.") : "…"}));
      return;
    }
    for (const p of state.problems) {
      const button = el("button", {type: "button", class: "gb-link", "data-problem-node": p.node || ""}, [
        p.node ? el("code", {text: p.node}) : null, p.node ? " " : null, el("span", {text: p.message}),
        el("span", {class: "gb-code", text: p.code}),
      ]);
      button.addEventListener("click", () => {
        if (p.node && nodeById(p.node)) {
          state.selection = {kind: "node", id: p.node};
          renderAll();
          focusNode(p.node);
        }
      });
      list.append(el("li", {class: "gb-problem"}, [button]));
    }
  }

  // ------------------------------------------------------------------------------------------------ validation

  let validateTimer = null;
  let validateSeq = 0;

  function currentGraph() {
    const graph = JSON.parse(JSON.stringify(state.graph));
    graph.layout = JSON.parse(JSON.stringify(state.layout));
    return graph;
  }

  function scheduleValidate() {
    state.valid = null;
    renderStatus();
    clearTimeout(validateTimer);
    validateTimer = setTimeout(validateNow, VALIDATE_DELAY_MS);
  }

  async function validateNow() {
    const seq = ++validateSeq;
    try {
      const result = await api("POST", config.api.validate, {graph: currentGraph()});
      if (seq !== validateSeq) return;  // a newer edit was sent meanwhile
      state.problems = result.problems;
      state.valid = result.valid;
    } catch (error) {
      if (seq !== validateSeq) return;
      state.problems = [{code: "bad_graph", message: error.message, node: ""}];
      state.valid = false;
    }
    renderCanvas();
    renderProblems();
    renderStatus();
    if (state.selection) renderInspector();
  }

  // ------------------------------------------------------------------------------------------------ drafts

  async function loadDrafts(selectId, preloaded) {
    const data = preloaded ? {drafts: preloaded} : await api("GET", config.api.drafts);
    state.drafts = data.drafts;
    const select = $("gb-draft");
    select.replaceChildren(...state.drafts.map((d) => el("option", {value: String(d.id),
      text: d.read_only ? d.name : `${d.name} · v${d.version}${d.valid ? "" : " · ✗"}${d.published ? " · " + d.backend : ""}`})));
    if (selectId !== undefined) select.value = String(selectId);
  }

  // `preloaded` ({draft, versions, check}): what the page came with, so opening it needs no request.
  async function openDraft(id, preloaded) {
    const detail = preloaded ? preloaded.draft
      : id === "default" || id === null || id === undefined
      ? await api("GET", config.api.default)
      : await api("GET", config.api.drafts + "/" + id);
    state.draft = detail;
    const graph = JSON.parse(JSON.stringify(detail.graph || emptyGraph(detail.name)));
    state.layout = graph.layout || {};
    delete graph.layout;
    graph.nodes = graph.nodes || [];
    graph.edges = graph.edges || [];
    state.graph = graph;
    state.selection = null;
    state.dirty = false;
    state.problems = detail.problems || [];
    state.valid = detail.read_only ? true : null;
    clearRun();
    ensureLayout();
    $("gb-draft").value = String(detail.id);
    const url = detail.read_only ? config.builderUrl : config.builderUrl + detail.id + "/";
    if (location.pathname !== url) history.replaceState(null, "", url);
    if (preloaded) {
      state.problems = preloaded.check.problems;
      state.valid = preloaded.check.valid;
    }
    renderAll();
    fit();
    renderCanvas();
    if (!preloaded) validateNow();
    loadVersions(preloaded && preloaded.versions);
  }

  async function save() {
    if (readOnly()) return blocked();
    try {
      const saved = await api("POST", draftUrl(), {graph: currentGraph(), note: $("gb-note").value, expected_version: state.draft.version});
      state.draft = saved;
      state.dirty = false;
      state.problems = saved.problems;
      state.valid = saved.valid;
      $("gb-note").value = "";
      await loadDrafts(saved.id);
      renderAll();
      loadVersions();
      say(saved.valid ? t("Saved {name} v{version}.", {name: saved.name, version: saved.version})
        : t("Saved {name} v{version} with {count} problem(s): it can be saved, not published.",
          {name: saved.name, version: saved.version, count: saved.problems.length}),
        saved.valid ? "success" : "warning");
    } catch (error) {
      say(t("Not saved: {error}", {error: error.message}), "error");
    }
  }

  async function createDraft(copy) {
    const suggested = copy ? (state.draft.read_only ? "my pipeline" : state.draft.name + " copy") : "new workflow";
    const name = window.prompt(copy ? t("Name of the copy") : t("Name of the new draft"), suggested);
    if (!name) return;
    try {
      let body;
      if (copy && state.draft.read_only && !state.dirty) body = {name: name, copy_default: true};
      else if (copy) body = {name: name, graph: Object.assign(currentGraph(), {name: name}), note: "copied from " + state.draft.name};
      else body = {name: name, graph: emptyGraph(name)};
      const created = await api("POST", config.api.drafts, body);
      await loadDrafts(created.id);
      await openDraft(created.id);
      say(t("Created {name}.", {name: created.name}));
    } catch (error) {
      say(t("Not created: {error}", {error: error.message}), "error");
    }
  }

  async function publish() {
    if (readOnly()) return blocked();
    if (state.dirty && !window.confirm(t("Publishing serves the last saved version. Save your changes first?"))) return;
    if (state.dirty) { await save(); if (state.dirty) return; }
    await openPublishDialog();
  }

  // ------------------------------------------------------------------------------------------------ publish dialog
  // Before publishing, the version's run of the test set beside production's, per test; a regression (a test
  // production passes and this version fails) or a version never run blocks publishing unless a reason is given.

  async function openPublishDialog() {
    const dialog = $("gb-publish-dialog");
    $("gb-override-reason").value = "";
    renderPublishDialog(null, null, t("Loading the test results…"));
    if (!dialog.open) dialog.showModal();
    try {
      const data = await api("GET", draftUrl("/check"));
      renderPublishDialog(data.checks.find((c) => c.version === state.draft.version) || null, data.tests);
    } catch (error) {
      renderPublishDialog(null, null, t("Could not load the test results: {error}", {error: error.message}));
    }
  }

  function publishBlocked(check, tests) {
    return tests > 0 && (!check || check.regressions > 0);
  }

  function checkSummary(check, tests) {
    const version = state.draft.version;
    if (tests === 0) return t("There are no publish tests: nothing to run.");
    if (!check) return t("v{version} has not been run against the {count} publish test(s).", {version, count: tests});
    return t("v{version}: {passed} passed, {failed} failed; {regressions} regression(s), tests production passes " +
      "and this version fails.", {version, passed: check.passed, failed: check.failed, regressions: check.regressions});
  }

  function verdictCell(passed, missing) {
    return el("td", {class: passed ? "gb-pass" : "gb-fail"}, [
      el("strong", {text: passed ? t("pass") : t("fail")}),
      missing && missing.length ? el("div", {class: "gb-quiet", text: t("missing: {facts}", {facts: missing.join(", ")})}) : null,
    ]);
  }

  function resultsTable(check) {
    if (!check || !check.results.length) return null;
    const head = el("tr", {}, [t("Question"), t("This version"), t("Production")].map((text) => el("th", {scope: "col", text})));
    const rows = check.results.map((r) => el("tr", {class: r.production_passed && !r.draft_passed ? "gb-regression" : null}, [
      el("td", {text: r.question}),
      verdictCell(r.draft_passed, r.draft_missing),
      verdictCell(r.production_passed, r.production_missing),
    ]));
    return el("table", {class: "gb-results"}, [el("thead", {}, head), el("tbody", {}, rows)]);
  }

  function renderPublishDialog(check, tests, note) {
    const backend = $("gb-backend").value;
    const blocked = tests !== null && publishBlocked(check, tests);
    $("gb-publish-title").textContent = t("Publish {name} v{version} on {backend}",
      {name: state.draft.name, version: state.draft.version, backend});
    $("gb-publish-summary").textContent = note || checkSummary(check, tests);
    $("gb-publish-summary").className = blocked ? "errornote" : "";
    $("gb-publish-results").replaceChildren(...[resultsTable(check)].filter(Boolean));
    $("gb-override").hidden = !blocked;
    $("gb-check-run").hidden = !tests;
    const confirm = $("gb-publish-confirm");
    confirm.textContent = blocked ? t("Publish anyway") : t("Publish");
    confirm.dataset.blocked = blocked ? "1" : "";
    // the server decides in the end: with the results unknown, publishing is still tried (and refused if it must)
    confirm.disabled = blocked && !$("gb-override-reason").value.trim();
  }

  async function runPublishCheck() {
    const backend = $("gb-backend").value;
    $("gb-check-run").disabled = $("gb-publish-confirm").disabled = true;
    $("gb-publish-summary").textContent = t("Running the test set against this version and production…");
    try {
      const check = await api("POST", draftUrl("/check"), {backend});
      const data = await api("GET", draftUrl("/check"));
      renderPublishDialog(check, data.tests);
    } catch (error) {
      renderPublishDialog(null, null, t("The test set could not run: {error}", {error: error.message}));
    } finally {
      $("gb-check-run").disabled = false;
    }
  }

  async function confirmPublish() {
    const backend = $("gb-backend").value;
    const body = {backend};
    if ($("gb-publish-confirm").dataset.blocked) body.override_reason = $("gb-override-reason").value.trim();
    try {
      const published = await api("POST", draftUrl("/publish"), body);
      $("gb-publish-dialog").close();
      state.draft = published;
      await loadDrafts(published.id);
      renderAll();
      say(t("Published {name} v{version} on {backend}: every worker switches within a second.",
        {name: published.name, version: published.published_version, backend}));
    } catch (error) {
      if (error.data && error.data.code === "tests_failed") {
        renderPublishDialog(error.data.check || null, error.data.tests);
        return;
      }
      $("gb-publish-dialog").close();
      if (error.problems) { state.problems = error.problems; state.valid = false; renderAll(); selectTab("problems"); }
      say(t("Not published: {error}", {error: error.message}), "error");
    }
  }

  async function unpublish() {
    const serving = state.draft.backend;
    const question = t("Stop serving {name} on {backend}? Every worker goes back to the default workflow within a " +
      "second (answers already running finish on this one).", {name: state.draft.name, backend: serving});
    if (!window.confirm(question)) return;
    try {
      const draft = await api("POST", draftUrl("/unpublish"), {});
      const backend = state.draft.backend;
      state.draft = draft;
      await loadDrafts(draft.id);
      renderAll();
      say(t("{name} no longer serves {backend}: it is back on the default workflow.", {name: draft.name, backend}));
    } catch (error) {
      say(t("Not unpublished: {error}", {error: error.message}), "error");
    }
  }

  // ------------------------------------------------------------------------------------------------ versions

  async function loadVersions(preloaded) {
    const box = $("gb-versions");
    $("gb-diff").replaceChildren();
    if (!state.draft || state.draft.read_only) {
      box.replaceChildren(el("p", {class: "gb-quiet", text: t("The built-in workflow has no versions. Copy it to start a draft.")}));
      return;
    }
    const data = preloaded ? {versions: preloaded} : await api("GET", draftUrl("/versions"));
    state.versions = data.versions;
    const rows = state.versions.map((v, i) => el("tr", {}, [
      el("td", {}, [el("input", {type: "radio", name: "gb-diff-a", value: v.version, checked: i === 1, "aria-label": t("Compare from v{version}", {version: v.version})})]),
      el("td", {}, [el("input", {type: "radio", name: "gb-diff-b", value: v.version, checked: i === 0, "aria-label": t("Compare to v{version}", {version: v.version})})]),
      el("td", {}, [el("strong", {text: "v" + v.version}), v.version === state.draft.published_version && state.draft.published ? el("span", {class: "gb-pill live small", text: t("live")}) : null]),
      el("td", {text: new Date(v.created_at).toLocaleString()}),
      el("td", {text: v.author || "—"}),
      el("td", {text: v.note || ""}),
      el("td", {class: v.valid ? "gb-ok" : "gb-error", text: v.valid ? "✓" : "✗"}),
      el("td", {}, [config.canEdit && v.version !== state.draft.version ? el("button", {type: "button", class: "button", text: t("Restore"),
        "aria-label": t("Restore v{version}", {version: v.version}), onclick: () => restore(v.version)}) : null]),
    ]));
    const compare = el("button", {type: "button", class: "button", text: t("Compare selected"), onclick: compareSelected,
      disabled: state.versions.length < 2});
    box.replaceChildren(
      el("table", {class: "gb-versions"}, [
        el("thead", {}, [el("tr", {}, ["from", "to", "version", "saved", "by", "note", "valid", ""].map((h) => el("th", {text: h && t(h)})))]),
        el("tbody", {}, rows),
      ]),
      el("div", {class: "gb-actions"}, [compare]),
    );
  }

  async function compareSelected() {
    const a = document.querySelector("input[name=gb-diff-a]:checked");
    const b = document.querySelector("input[name=gb-diff-b]:checked");
    if (!a || !b) return;
    try {
      const diff = await api("GET", draftUrl(`/diff?a=${a.value}&b=${b.value}`));
      renderDiff(diff, a.value, b.value);
    } catch (error) {
      say(t("Could not compare: {error}", {error: error.message}), "error");
    }
  }

  function renderDiff(diff, a, b) {
    const box = $("gb-diff");
    const summary = [];
    const add = (label, items, cls) => { if (items.length) summary.push(el("li", {class: cls}, [label + ": ", ...items.map((i) => el("code", {text: i}))])); };
    add(t("nodes added"), diff.nodes_added, "add");
    add(t("nodes removed"), diff.nodes_removed, "del");
    add(t("nodes changed"), diff.nodes_changed, "chg");
    add(t("edges added"), diff.edges_added, "add");
    add(t("edges removed"), diff.edges_removed, "del");
    if (diff.entry.old !== diff.entry.new) summary.push(el("li", {class: "chg", text: t("entry: {old} → {new}", {old: diff.entry.old, new: diff.entry.new})}));
    if (diff.layout_changed) summary.push(el("li", {class: "gb-quiet", text: t("node positions moved")}));
    const pre = el("pre", {class: "gb-unified"});
    for (const line of diff.unified) {
      const cls = line.startsWith("+++") || line.startsWith("---") ? "file" : line[0] === "+" ? "add" : line[0] === "-" ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(el("span", {class: cls, text: line + "\n"}));
    }
    box.replaceChildren(
      el("h3", {text: `v${a} → v${b}`}),
      diff.identical ? el("p", {text: t("The two versions run the same workflow.") + (diff.layout_changed ? " " + t("Only node positions differ.") : "")}) : el("ul", {class: "gb-diff-summary"}, summary),
      diff.identical ? null : pre,
    );
  }

  async function restore(version) {
    if (state.dirty && !window.confirm(t("Restoring replaces your unsaved changes. Continue?"))) return;
    try {
      const restored = await api("POST", draftUrl("/restore"), {version: version});
      await loadDrafts(restored.id);
      await openDraft(restored.id);
      say(t("Restored v{version} as v{new}.", {version, new: restored.version}));
    } catch (error) {
      say(t("Not restored: {error}", {error: error.message}), "error");
    }
  }

  // ------------------------------------------------------------------------------------------------ test run

  function clearRun() {
    if (state.run && state.run.controller && !state.run.done) state.run.controller.abort();
    state.run = null;
  }

  async function testRun(event) {
    event.preventDefault();
    clearRun();
    const events = $("gb-events");
    const answer = $("gb-answer");
    const summary = $("gb-summary");
    events.replaceChildren();
    answer.textContent = "";
    summary.replaceChildren();
    const run = {controller: new AbortController(), current: null, visited: new Map(), edges: new Set(), ended: false, done: false};
    state.run = run;
    $("gb-run").disabled = true;
    $("gb-run-stop").disabled = false;
    $("gb-run-state").textContent = t("running…");
    renderCanvas();
    try {
      const response = await fetch(config.api.testRun, {
        method: "POST", credentials: "same-origin", signal: run.controller.signal,
        headers: {"Content-Type": "application/json", "X-CSRFToken": csrfToken, "Accept": "text/event-stream"},
        body: JSON.stringify({graph: currentGraph(), question: $("gb-question").value, backend: $("gb-run-backend").value}),
      });
      if (!response.ok) {
        let data = null;
        try { data = await response.json(); } catch (e) { data = null; }
        const error = (data && data.error) || {message: "HTTP " + response.status};
        if (error.problems) { state.problems = error.problems; state.valid = false; renderAll(); }
        throw new Error(error.message);
      }
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let buffer = "";
      for (;;) {
        const chunk = await reader.read();
        if (chunk.done) break;
        buffer += decoder.decode(chunk.value, {stream: true});
        let cut;
        while ((cut = buffer.indexOf("\n\n")) >= 0) {
          const frame = buffer.slice(0, cut);
          buffer = buffer.slice(cut + 2);
          const data = frame.split("\n").filter((l) => l.startsWith("data: ")).map((l) => l.slice(6)).join("");
          if (data) showEvent(run, JSON.parse(data));
        }
      }
      $("gb-run-state").textContent = run.ended ? t("finished") : t("stream closed");
    } catch (error) {
      if (error.name === "AbortError") $("gb-run-state").textContent = t("stopped");
      else { $("gb-run-state").textContent = t("failed"); say(t("Test run failed: {error}", {error: error.message}), "error"); }
    } finally {
      run.done = true;
      run.current = null;
      $("gb-run").disabled = false;
      $("gb-run-stop").disabled = true;
      if (state.run === run) renderCanvas();
    }
  }

  function showEvent(run, event) {
    const list = $("gb-events");
    let detail = "";
    if (event.channel === "status") {
      if (event.stage === "start") run.current = event.node;
      if (event.stage === "end") {
        run.visited.set(event.node, (event.ms !== undefined ? event.ms + " ms" : ""));
        run.edges.add(event.node + ">" + (event.route || "default"));
        if (run.current === event.node) run.current = null;
        detail = (event.route ? "→ " + event.route : "") + (event.ms !== undefined ? ` · ${event.ms} ms` : "");
      }
      renderCanvas();
    } else if (event.channel === "answer") {
      $("gb-answer").textContent += event.delta;
      detail = JSON.stringify(event.delta);
    } else if (event.channel === "reasoning") {
      detail = JSON.stringify(event.delta);
    } else if (event.channel === "meta") {
      detail = JSON.stringify(event.usage || {});
    } else if (event.channel === "meta_summary") {
      run.ended = true;
      detail = t("intent {intent} · {ms} ms", {intent: event.intent || "—", ms: event.elapsed_ms});
      showSummary(event);
      renderCanvas();
    } else if (event.channel === "error") {
      run.ended = true;
      detail = `${event.code}: ${event.message}`;
    }
    // Answer deltas are many and small: fold runs of them into one line so the log stays readable.
    const last = list.lastElementChild;
    if (event.channel === "answer" && last && last.dataset.channel === "answer") {
      last.querySelector(".gb-ev-detail").textContent = t("{count} deltas", {count: Number(last.dataset.count) + 1});
      last.dataset.count = String(Number(last.dataset.count) + 1);
      last.querySelector(".gb-ev-seq").textContent = `${last.dataset.first}–${event.seq}`;
    } else {
      const item = el("li", {class: "gb-ev ch-" + event.channel, "data-channel": event.channel, "data-count": "1", "data-first": event.seq}, [
        el("span", {class: "gb-ev-seq", text: event.seq}),
        el("span", {class: "gb-ev-node", text: event.node}),
        el("span", {class: "gb-ev-channel", text: event.channel + (event.stage ? "/" + event.stage : "")}),
        el("span", {class: "gb-ev-detail", text: detail}),
      ]);
      list.append(item);
    }
    list.scrollTop = list.scrollHeight;
  }

  function showSummary(event) {
    const box = $("gb-summary");
    const sources = (event.sources || []).map((s) => el("li", {}, [`[${s.ref}] `, s.url ? el("a", {href: s.url, text: s.title, target: "_blank", rel: "noopener"}) : s.title]));
    box.replaceChildren(
      el("dl", {}, [
        el("dt", {text: t("language")}), el("dd", {text: event.language || "—"}),
        el("dt", {text: t("intent")}), el("dd", {text: event.intent || "—"}),
        el("dt", {text: t("search")}), el("dd", {text: event.search_query || "—"}),
        el("dt", {text: t("loops")}), el("dd", {text: String(event.loops)}),
        el("dt", {text: t("time")}), el("dd", {text: t("{ms} ms", {ms: event.elapsed_ms})}),
      ]),
      sources.length ? el("ol", {class: "gb-sources"}, sources) : null,
    );
  }

  // ------------------------------------------------------------------------------------------------ tabs

  function selectTab(name) {
    for (const tab of root.querySelectorAll("[role=tab]")) {
      const on = tab.id === "gb-tab-" + name;
      tab.setAttribute("aria-selected", on ? "true" : "false");
      tab.tabIndex = on ? 0 : -1;
      $(tab.getAttribute("aria-controls")).hidden = !on;
    }
  }

  root.querySelector("[role=tablist]").addEventListener("keydown", (event) => {
    const tabs = [...root.querySelectorAll("[role=tab]")];
    const index = tabs.indexOf(document.activeElement);
    if (index < 0 || (event.key !== "ArrowRight" && event.key !== "ArrowLeft")) return;
    const next = tabs[(index + (event.key === "ArrowRight" ? 1 : tabs.length - 1)) % tabs.length];
    next.focus();
    next.click();
  });

  for (const tab of root.querySelectorAll("[role=tab]")) {
    tab.addEventListener("click", () => selectTab(tab.id.replace("gb-tab-", "")));
  }

  // ------------------------------------------------------------------------------------------------ start

  $("gb-draft").addEventListener("change", (event) => {
    if (state.dirty && !window.confirm(t("Discard your unsaved changes?"))) {
      event.target.value = String(state.draft.id);
      return;
    }
    openDraft(event.target.value).catch((error) => say(error.message, "error"));
  });
  $("gb-new").addEventListener("click", () => createDraft(false));
  $("gb-copy").addEventListener("click", () => createDraft(true));
  $("gb-save").addEventListener("click", save);
  $("gb-publish").addEventListener("click", publish);
  $("gb-unpublish").addEventListener("click", unpublish);
  $("gb-check-run").addEventListener("click", runPublishCheck);
  $("gb-publish-confirm").addEventListener("click", confirmPublish);
  $("gb-publish-cancel").addEventListener("click", () => $("gb-publish-dialog").close());
  $("gb-override-reason").addEventListener("input", () => {
    const confirm = $("gb-publish-confirm");
    if (confirm.dataset.blocked) confirm.disabled = !$("gb-override-reason").value.trim();
  });
  $("gb-zoom-in").addEventListener("click", () => zoom(1.2));
  $("gb-zoom-out").addEventListener("click", () => zoom(1 / 1.2));
  $("gb-fit").addEventListener("click", fit);
  $("gb-arrange").addEventListener("click", () => {
    if (readOnly()) { arrange(); fit(); renderCanvas(); return; }
    arrange();
    state.dirty = true;
    renderAll();
    fit();
  });
  $("gb-run-form").addEventListener("submit", testRun);
  $("gb-run-stop").addEventListener("click", () => { if (state.run) state.run.controller.abort(); });
  window.addEventListener("beforeunload", (event) => { if (state.dirty) event.preventDefault(); });
  window.addEventListener("keydown", (event) => {
    if ((event.ctrlKey || event.metaKey) && event.key === "s") { event.preventDefault(); save(); }
  });
  new ResizeObserver(() => applyView()).observe(svg);

  async function start() {
    try {
      // The page carries the catalogue, the drafts and the draft it opens on (see the admin's builder_initial);
      // the APIs are asked only for what it lacks.
      const initial = config.initial || {};
      const catalogue = initial.nodes || await api("GET", config.api.nodes);
      for (const type of catalogue.nodes) state.types[type.name] = type;
      // Palette in pipeline order where known, then the rest alphabetically.
      const known = Object.keys(FAMILIES);
      state.typeOrder = catalogue.nodes.map((t) => t.name).sort((a, b) => {
        const ia = known.indexOf(a), ib = known.indexOf(b);
        return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
      });
      renderPalette();
      await loadDrafts(undefined, initial.drafts);
      await openDraft(config.draftId === null ? "default" : config.draftId, initial.draft ? initial : undefined);
      root.classList.add("ready");
    } catch (error) {
      say(t("The graph builder could not start: {error}", {error: error.message}), "error");
    }
  }

  start();
})();
