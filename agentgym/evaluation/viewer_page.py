"""The trajectory viewer's page: inline CSS and JavaScript, data in a JSON script element.

Text is inserted with ``textContent`` only (never ``innerHTML``), so episode content can
hold any markup without running as code. Test ids (``data-testid``) name what tests click.
"""

PAGE = r"""<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>__TITLE__</title>
<style>
  :root { --ok: #2e7d32; --bad: #c62828; --err: #8e24aa; --muted: #666; --line: #ddd; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 14px/1.45 system-ui, sans-serif; color: #222; display: flex;
         height: 100vh; }
  #side { width: 330px; border-right: 1px solid var(--line); display: flex;
          flex-direction: column; }
  #filters { padding: 10px; border-bottom: 1px solid var(--line); display: grid; gap: 6px; }
  #filters select, #filters input { width: 100%; padding: 4px; }
  #count { color: var(--muted); font-size: 12px; }
  #list { overflow-y: auto; flex: 1; }
  .item { display: block; width: 100%; text-align: left; border: 0;
          border-bottom: 1px solid #eee; background: #fff; padding: 7px 10px; cursor: pointer;
          font: inherit; }
  .item:hover { background: #f4f6fb; }
  .item.active { background: #e3ebfa; }
  .item small { color: var(--muted); display: block; }
  .badge { display: inline-block; padding: 0 6px; border-radius: 8px; font-size: 11px;
           color: #fff; margin-right: 4px; }
  .success { background: var(--ok); } .failure { background: var(--bad); }
  .error { background: var(--err); } .invalid { background: #ef6c00; }
  #main { flex: 1; overflow-y: auto; padding: 14px 22px; }
  #nav { display: flex; gap: 8px; align-items: center; margin-bottom: 8px; }
  .msg { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; margin: 6px 0;
         white-space: pre-wrap; word-break: break-word; }
  .role { font-size: 11px; text-transform: uppercase; color: var(--muted); display: block; }
  /* What the env shows (game boards, grids, logs) lines up only in a monospace font. */
  .user .text, .tool .text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas,
                             "DejaVu Sans Mono", monospace; }
  .user { background: #fafafa; } .assistant { background: #f1f7ff; }
  .tool { background: #f6fbf2; } .system { background: #fff8e6; }
  .call { font-family: ui-monospace, monospace; background: #eef; padding: 2px 6px;
          border-radius: 4px; display: block; margin-top: 4px; }
  .step { border-left: 3px solid #90a4d4; padding-left: 10px; margin: 14px 0; }
  .step h3 { margin: 0 0 4px; font-size: 14px; }
  .meta { color: var(--muted); font-size: 12px; }
  .info { font-family: ui-monospace, monospace; font-size: 11px; color: var(--muted);
          white-space: pre-wrap; word-break: break-all; }
  img.shot { max-width: 100%; border: 1px solid var(--line); margin-top: 6px; }
  #notes { color: var(--bad); font-size: 12px; padding: 0 10px; }
</style>
</head>
<body>
<div id="side">
  <div id="filters">
    <strong>__TITLE__</strong>
    <select id="f-env" data-testid="filter-env"><option value="">all envs</option></select>
    <select id="f-outcome" data-testid="filter-outcome">
      <option value="">all outcomes</option><option value="success">success</option>
      <option value="failure">failure</option><option value="error">error</option>
    </select>
    <input id="f-text" data-testid="filter-text" placeholder="search task, text, error">
    <span id="count" data-testid="count"></span>
  </div>
  <div id="notes"></div>
  <div id="list" data-testid="episode-list"></div>
</div>
<div id="main">
  <div id="nav">
    <button id="prev" data-testid="prev">&larr; prev</button>
    <button id="next" data-testid="next">next &rarr;</button>
    <span class="meta">keys: j / k</span>
  </div>
  <div id="episode" data-testid="episode"><p class="meta">No episode selected.</p></div>
</div>
<script type="application/json" id="data">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const EPISODES = DATA.episodes;
let shown = [], current = -1;

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
}
function num(x, digits) { return x === null || x === undefined ? "-" : Number(x).toFixed(digits); }
function badge(kind, text) { return el("span", {class: "badge " + kind}, text || kind); }

function message(m) {
  const box = el("div", {class: "msg " + m.role, "data-testid": "message"},
                 el("span", {class: "role"}, m.role + (m.name ? " · " + m.name : "")),
                 el("span", {class: "text", "data-testid": "message-text"}, m.content));
  for (const c of m.tool_calls || []) {
    box.append(el("span", {class: "call", "data-testid": "tool-call"},
                  c.name + "(" + c.arguments + ")"));
  }
  return box;
}

function haystack(e) {
  const parts = [e.task, e.env, e.error || ""];
  for (const m of e.prompt) parts.push(m.content);
  for (const s of e.steps) {
    parts.push(s.action.content);
    for (const m of s.observation) parts.push(m.content);
  }
  return parts.join("\n").toLowerCase();
}

function applyFilters() {
  const env = document.getElementById("f-env").value;
  const outcome = document.getElementById("f-outcome").value;
  const text = document.getElementById("f-text").value.trim().toLowerCase();
  shown = EPISODES.map((e, i) => i).filter(i => {
    const e = EPISODES[i];
    return (!env || e.env === env) && (!outcome || e.outcome === outcome) &&
           (!text || haystack(e).includes(text));
  });
  const list = document.getElementById("list");
  list.replaceChildren();
  for (const i of shown) {
    const e = EPISODES[i];
    const item = el("button", {class: "item", "data-testid": "episode-item", "data-index": i},
                    badge(e.outcome), e.task,
                    el("small", {}, e.env + " · seed " + e.seed + " · " + e.steps.length +
                       " steps · reward " + num(e.reward, 2)));
    item.addEventListener("click", () => show(i));
    list.append(item);
  }
  document.getElementById("count").textContent = shown.length + " of " + EPISODES.length +
                                                 " episodes";
  if (shown.length && !shown.includes(current)) show(shown[0]);
  if (!shown.length) {
    current = -1;
    document.getElementById("episode").replaceChildren(
      el("p", {class: "meta"}, "No episode matches the filters."));
  }
}

function show(i) {
  current = i;
  const e = EPISODES[i];
  for (const item of document.querySelectorAll(".item")) {
    item.classList.toggle("active", Number(item.dataset.index) === i);
  }
  const root = el("div", {});
  root.append(el("h2", {"data-testid": "episode-title"}, e.task),
              el("p", {class: "meta"}, badge(e.outcome), e.env + " · seed " + e.seed +
                 " · status " + e.status + " · outcome reward " + num(e.reward, 3) +
                 " · " + e.steps.length + " steps" +
                 (e.tools.length ? " · tools: " + e.tools.join(", ") : "")));
  if (e.error) root.append(el("div", {class: "msg", "data-testid": "error"}, "error: " + e.error));
  root.append(el("h3", {}, "Prompt"));
  for (const m of e.prompt) root.append(message(m));
  for (const s of e.steps) {
    const head = el("h3", {}, "Step " + s.index + " ");
    if (!s.valid) head.append(badge("invalid"));
    const meta = "reward " + num(s.reward, 3) +
      (s.advantage === null ? "" : " · advantage " + num(s.advantage, 3)) +
      (s.tokens === null ? "" : " · " + s.tokens + " tokens") + (s.end ? " · " + s.end : "");
    const step = el("div", {class: "step", "data-testid": "step"}, head,
                    el("div", {class: "meta", "data-testid": "step-meta"}, meta),
                    message(s.action));
    for (const m of s.observation) step.append(message(m));
    if (s.screenshot) {
      step.append(el("img", {class: "shot", "data-testid": "screenshot",
                             alt: "screenshot after step " + s.index,
                             src: "data:image/png;base64," + s.screenshot}));
    }
    if (s.info) step.append(el("div", {class: "info"}, "info " + s.info));
    root.append(step);
  }
  document.getElementById("episode").replaceChildren(root);
  document.getElementById("main").scrollTop = 0;
}

function move(delta) {
  if (!shown.length) return;
  const at = shown.indexOf(current);
  show(shown[Math.min(shown.length - 1, Math.max(0, at + delta))]);
}

const envs = [...new Set(EPISODES.map(e => e.env))].sort();
for (const env of envs) document.getElementById("f-env").append(el("option", {value: env}, env));
document.getElementById("notes").textContent = DATA.notes.join("; ");
for (const id of ["f-env", "f-outcome"]) {
  document.getElementById(id).addEventListener("change", applyFilters);
}
document.getElementById("f-text").addEventListener("input", applyFilters);
document.getElementById("prev").addEventListener("click", () => move(-1));
document.getElementById("next").addEventListener("click", () => move(1));
document.addEventListener("keydown", ev => {
  if (ev.target.tagName === "INPUT") return;
  if (ev.key === "j") move(1);
  if (ev.key === "k") move(-1);
});
applyFilters();
</script>
</body>
</html>
"""
