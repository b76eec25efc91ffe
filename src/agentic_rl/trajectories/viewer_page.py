"""The viewer's HTML page: inline CSS and JavaScript, no external assets (see ``viewer.py``).

``PAGE`` has two placeholders: ``__TITLE__`` (HTML-escaped) and ``__DATA__`` (JSON with every
``<`` escaped, so no string can close the ``<script>`` element). The script renders all text
with ``textContent``, never ``innerHTML``, so trajectory text cannot inject markup.
"""

PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>__TITLE__</title>
<style>
body{font-family:system-ui,sans-serif;margin:0;color:#222;display:flex;height:100vh}
#left{width:44%;overflow:auto;border-right:1px solid #ccc;padding:.6em}
#right{flex:1;overflow:auto;padding:.6em 1em}
h1{font-size:1.2em;margin:.2em 0 .5em} h2{font-size:1.05em;margin:1em 0 .3em}
#filters{display:grid;grid-template-columns:auto auto;gap:.25em .6em;margin-bottom:.6em;font-size:.9em}
#filters input{width:7em}
table{border-collapse:collapse;width:100%;font-size:.85em}
th,td{border-bottom:1px solid #eee;padding:.2em .4em;text-align:left}
tbody tr{cursor:pointer} tbody tr:hover{background:#f3f7ff} tr.sel{background:#dde8ff}
.msg{border-radius:6px;padding:.4em .6em;margin:.35em 0;white-space:pre-wrap;font-size:.9em}
.system{background:#f4f4f4;color:#555}.user{background:#eef6ee}.assistant{background:#eef2fb}
.tool{background:#fff6e6}.role{font-weight:bold;font-size:.75em;text-transform:uppercase;color:#666}
.call{font-family:monospace;background:#e4e9f7;padding:.15em .3em;margin:.2em 0;border-radius:3px}
.err{color:#b00020}
#tokens{font-family:monospace;font-size:.8em;line-height:1.7;white-space:pre-wrap;word-break:break-all}
#tokens span{border-radius:2px}
.m0{background:#e8e8e8;color:#777}.m1{background:#c9f0c9}
.seg{border-top:2px dashed #b06000;color:#b06000;font:12px sans-serif;margin:6px 0 2px}
.nodata{color:#888;font-style:italic}
img.shot{display:block;border:1px solid #ccc;margin:.35em 0;max-width:100%}
</style></head>
<body>
<div id="left">
<h1>__TITLE__</h1>
<div id="filters">
<label for="f-env">env</label><select id="f-env"><option value="">all</option></select>
<label for="f-phase">phase</label><select id="f-phase"><option value="">all</option></select>
<label for="f-stop">stop reason</label><select id="f-stop"><option value="">all</option></select>
<label>step</label><span><input id="f-step-min" type="number" placeholder="min">
<input id="f-step-max" type="number" placeholder="max"></span>
<label>reward</label><span><input id="f-rmin" type="number" step="any" placeholder="min">
<input id="f-rmax" type="number" step="any" placeholder="max"></span>
<label for="f-text">id contains</label><input id="f-text" type="text">
</div>
<div id="count"></div>
<table><thead><tr><th>trajectory</th><th>phase</th><th>step</th><th>env</th><th>reward</th>
<th>stop</th><th>turns</th></tr></thead>
<tbody id="rows"></tbody></table>
</div>
<div id="right"><p class="nodata" id="empty">Select a trajectory.</p><div id="detail" hidden>
<h2 id="d-title"></h2><div id="d-meta"></div>
<h2>Reward components</h2><table id="d-rewards"><tbody></tbody></table>
<h2>Conversation</h2><div id="d-chat"></div>
<h2>Tokens</h2>
<div>colour by <label><input type="radio" name="colour" value="mask" checked> loss mask</label>
<label><input type="radio" name="colour" value="adv"> advantage</label> <span id="d-legend"></span></div>
<div id="tokens"></div>
</div></div>
<script id="data" type="application/json">__DATA__</script>
<script>
"use strict";
const DATA = JSON.parse(document.getElementById("data").textContent);
const T = DATA.trajectories;
const $ = (id) => document.getElementById(id);
function el(tag, cls, text) { const e = document.createElement(tag); if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text); return e; }
function shot(png) { const i = el("img", "shot"); i.alt = "screenshot";
  i.src = "data:image/png;base64," + png; return i; }
function fmt(x) {
  return (x === null || x === undefined) ? "–"
    : (typeof x === "number" ? (Number.isInteger(x) ? String(x) : x.toFixed(4)) : String(x));
}
function fill(id, values) {
  const s = $(id);
  [...new Set(values.filter(v => v !== null && v !== undefined))].sort().forEach(v => {
    const o = el("option", null, v); o.value = v; s.appendChild(o);
  });
}
fill("f-env", T.map(t => t.env_id)); fill("f-phase", T.map(t => t.phase)); fill("f-stop", T.map(t => t.stop_reason));
function num(id) { const v = $(id).value; return v === "" ? null : Number(v); }
function visible(t) {
  const env = $("f-env").value, ph = $("f-phase").value, st = $("f-stop").value, tx = $("f-text").value.trim();
  const smin = num("f-step-min"), smax = num("f-step-max"), rmin = num("f-rmin"), rmax = num("f-rmax");
  if (env && t.env_id !== env) return false; if (ph && t.phase !== ph) return false;
  if (st && t.stop_reason !== st) return false; if (tx && !t.trajectory_id.includes(tx)) return false;
  if (smin !== null && !(t.step !== null && t.step >= smin)) return false;
  if (smax !== null && !(t.step !== null && t.step <= smax)) return false;
  if (rmin !== null && !(t.reward !== null && t.reward >= rmin)) return false;
  if (rmax !== null && !(t.reward !== null && t.reward <= rmax)) return false;
  return true;
}
let selected = null;
function renderList() {
  const body = $("rows"); body.replaceChildren(); let n = 0;
  T.forEach((t, i) => { if (!visible(t)) return; n++;
    const tr = el("tr"); tr.dataset.index = i; tr.dataset.id = t.trajectory_id;
    if (i === selected) tr.className = "sel";
    [t.trajectory_id.slice(0, 12), t.phase, t.step, t.env_id, fmt(t.reward), t.stop_reason, t.turns.length]
      .forEach(v => tr.appendChild(el("td", null, fmt(v))));
    tr.addEventListener("click", () => openTrajectory(i)); body.appendChild(tr); });
  $("count").textContent = n + " of " + T.length + " trajectories";
}
function message(role, text) {
  const d = el("div", "msg " + role);
  d.appendChild(el("div", "role", role)); d.appendChild(el("div", null, text)); return d;
}
function openTrajectory(i) {
  selected = i; const t = T[i]; renderList();
  $("empty").hidden = true; $("detail").hidden = false;
  $("d-title").textContent = t.trajectory_id;
  $("d-meta").textContent = "env " + t.env_id + " · seed " + t.seed + " · phase " + fmt(t.phase) +
    " · step " + fmt(t.step) +
    " · policy version " + fmt(t.policy_version) + " · stop " + t.stop_reason + " · reward " + fmt(t.reward) +
    (t.advantage !== null ? " · advantage " + fmt(t.advantage) : "");
  const rb = $("d-rewards").tBodies[0]; rb.replaceChildren();
  Object.entries(t.reward_components).forEach(([k, v]) => {
    const tr = el("tr"); tr.appendChild(el("td", null, k)); tr.appendChild(el("td", null, fmt(v)));
    rb.appendChild(tr);
  });
  const chat = $("d-chat"); chat.replaceChildren();
  t.prompt.forEach(m => chat.appendChild(message(m.role, m.content)));
  if (t.screenshot) chat.appendChild(shot(t.screenshot));
  t.turns.forEach(turn => {
    const a = message("assistant", turn.text); a.dataset.turn = turn.index;
    turn.tool_calls.forEach(c => a.appendChild(el("div", "call", "→ " + c.name + " " + c.arguments)));
    turn.tool_call_errors.forEach(e => a.appendChild(el("div", "call err", "✗ unparsed call: " + e.message)));
    chat.appendChild(a);
    turn.tool_results.forEach(
      r => chat.appendChild(message("tool", (r.ok ? "" : "[error] ") + r.name + ": " + r.content)));
    if (turn.observation)  // tool messages are shown from the results; other messages (a page) here
      turn.observation.filter(m => !turn.tool_results.length || m.role !== "tool")
        .forEach(m => chat.appendChild(message(m.role, m.content)));
    if (turn.screenshot) chat.appendChild(shot(turn.screenshot));
    if (turn.reward) chat.appendChild(el("div", "role", "turn reward " + fmt(turn.reward)));
  });
  renderTokens();
}
function advColour(a, maxAbs) {
  const x = maxAbs > 0 ? Math.min(1, Math.abs(a) / maxAbs) : 0;
  return a >= 0 ? "rgba(0,150,0," + (0.08 + 0.6 * x) + ")" : "rgba(200,0,0," + (0.08 + 0.6 * x) + ")";
}
function renderTokens() {
  if (selected === null) return; const t = T[selected]; const box = $("tokens"); box.replaceChildren();
  const byAdv = document.querySelector("input[name=colour]:checked").value === "adv";
  const adv = t.token_advantages; const maxAbs = adv ? Math.max(0, ...adv.map(Math.abs)) : 0;
  $("d-legend").textContent = byAdv ? (adv ? "green > 0, red < 0, max |A| = " + fmt(maxAbs) : "no advantages recorded")
                                    : "green: sampled (trained), grey: prompt / tool / env";
  const segs = t.segment_starts || [0];
  t.token_ids.forEach((id, j) => {
    const k = segs.indexOf(j);
    if (k > 0) box.appendChild(el("div", "seg", "context rebuilt: segment " + (k + 1) + " of " + segs.length +
                                   " starts here (a fresh prompt; trained as its own sequence)"));
    const s = el("span", "m" + t.loss_mask[j], DATA.vocab[id] !== undefined ? DATA.vocab[id] : "⟨" + id + "⟩");
    s.dataset.mask = t.loss_mask[j];
    let tip = "id " + id + " · mask " + t.loss_mask[j] + " · logprob " + fmt(t.logprobs[j]);
    if (adv) tip += " · A " + fmt(adv[j]);
    if (byAdv && adv && t.loss_mask[j]) { s.className = "adv"; s.style.background = advColour(adv[j], maxAbs); }
    s.title = tip; box.appendChild(s);
  });
}
document.querySelectorAll("input[name=colour]").forEach(r => r.addEventListener("change", renderTokens));
["f-env", "f-phase", "f-stop", "f-step-min", "f-step-max", "f-rmin", "f-rmax", "f-text"].forEach(id => {
  $(id).addEventListener("input", renderList); $(id).addEventListener("change", renderList);
});
renderList();
</script></body></html>
"""
