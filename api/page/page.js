// tapt's page: ask a served index for a selection, or open a selection file, and look at it.
// Plain JavaScript, no dependency; every text from the server or a file goes in as text.
"use strict";

const $ = (id) => document.getElementById(id);
const state = { rows: [], explain: null, task: [], download: null };

function el(tag, text, cls) {
  const node = document.createElement(tag);
  if (text !== undefined && text !== null) node.textContent = String(text);
  if (cls) node.className = cls;
  return node;
}

function svg(tag, attrs) {
  const node = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, String(v));
  return node;
}

function status(text, error) {
  $("status").textContent = text;
  $("status").className = error ? "error" : "";
}

function headers() {
  const token = $("token").value.trim() || sessionStorage.getItem("tapt-token") || "";
  if ($("token").value.trim()) sessionStorage.setItem("tapt-token", token);
  return token ? { Authorization: "Bearer " + token } : {};
}

async function getJSON(path) {
  const response = await fetch(path, { headers: headers() });
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

async function loadSummary() {
  try {
    const s = await getJSON("index");
    $("summary").textContent = `${s.sentences.toLocaleString()} sentences, ` +
      `${(s.documents || 0).toLocaleString()} documents in ${s.shards} shard(s); ` +
      `model ${s.model}; budgets up to ${s.limits.max_budget.toLocaleString()} sentences`;
    const method = $("method");
    method.textContent = "";
    for (const name of s.methods) {
      const option = el("option", name);
      option.value = name;
      if (name === "centroid") option.selected = true;
      method.appendChild(option);
    }
  } catch (err) {
    $("summary").textContent = "Index summary: " + err.message + " (give the token, then select)";
  }
}

async function runSelection() {
  const task = $("task").value.split("\n").map((t) => t.trim()).filter((t) => t);
  if (!task.length) { status("Paste at least one task sentence.", true); return; }
  const request = { method: $("method").value || "centroid", task: task,
                    budget: $("budget").value.trim(), out: "-", explain: $("explain").checked };
  if ($("context-choice").value !== "auto") request.params = { context: $("context-choice").value };
  status("Selecting...");
  try {
    const response = await fetch("select", {
      method: "POST", headers: { "Content-Type": "application/json", ...headers() },
      body: JSON.stringify(request) });
    const body = await response.json();
    if (!response.ok || body.error) throw new Error(`${response.status}: ${body.error}`);
    show(body.selection, body.explain || null, task, body.download || null);
    status(`${body.method}: ${body.segments} segments, ${body.sentences} sentences in ` +
           `${body.seconds} s`);
  } catch (err) {
    status("Selection failed: " + err.message, true);
  }
}

async function openFiles(files) {
  let rows = null, manifest = null;
  for (const file of files) {
    const text = await file.text();
    if (file.name.endsWith(".manifest.json")) { manifest = JSON.parse(text); continue; }
    rows = text.split("\n").filter((line) => line.trim()).map((line) => JSON.parse(line));
  }
  if (!rows) { status("Open the selection's .jsonl file (its manifest beside it if you like).", true); return; }
  show(rows, manifest ? manifest.explain || null : null, [], null);
  status(`Opened ${rows.length} segments` + (manifest ? ` (${manifest.method})` : ""));
}

function show(rows, explain, task, download) {
  state.rows = rows; state.explain = explain; state.task = task; state.download = download;
  $("result").hidden = false;
  $("details").hidden = true;
  const sentences = rows.reduce((n, r) => n + (r.rows[1] - r.rows[0]), 0);
  $("counts").textContent = `(${rows.length} segments, ${sentences} sentences)`;
  const link = $("server-file");
  link.hidden = !download;
  if (download) link.href = download;
  drawRows();
  fillShareFields();
  drawShare();
  drawHistogram();
}

function partNames() {
  const names = new Set();
  for (const r of state.rows) for (const k of Object.keys((r.explain || {}).parts || {})) names.add(k);
  return [...names];
}

function drawRows() {
  const parts = partNames();
  const head = $("rows-head");
  head.textContent = "";
  for (const name of ["rank", "score", ...parts, "text", "source"]) head.appendChild(el("th", name));
  const body = $("rows");
  body.textContent = "";
  state.rows.forEach((r, i) => {
    const tr = el("tr");
    tr.dataset.index = i;
    tr.appendChild(el("td", r.rank, "num"));
    tr.appendChild(el("td", Number(r.score).toFixed(4), "num"));
    for (const name of parts) {
      const v = ((r.explain || {}).parts || {})[name];
      tr.appendChild(el("td", v === undefined ? "" : Number(v).toFixed(3), "num"));
    }
    tr.appendChild(el("td", r.text, "text"));
    tr.appendChild(el("td", r.source || ""));
    tr.addEventListener("click", () => details(i));
    body.appendChild(tr);
  });
}

function fieldValue(row, field) {
  if (field === "source") return row.source;
  if (field === "doc_key") return row.doc_key;
  const meta = row.meta || {};
  if (field in meta) return meta[field];
  const each = (row.sentence_meta || []).map((m) => m[field]).filter((v) => v !== undefined);
  return each.length ? [...new Set(each.map(String))].join(" | ") : undefined;
}

function fillShareFields() {
  const fields = new Set(["source"]);
  for (const r of state.rows) {
    for (const k of Object.keys(r.meta || {})) fields.add(k);
    for (const m of r.sentence_meta || []) for (const k of Object.keys(m)) fields.add(k);
  }
  const select = $("share-field");
  const previous = select.value;
  select.textContent = "";
  for (const f of fields) { const o = el("option", f); o.value = f; select.appendChild(o); }
  if (fields.has(previous)) select.value = previous;
}

function drawShare() {
  const field = $("share-field").value;
  const counts = new Map();
  let total = 0;
  for (const r of state.rows) {
    const v = fieldValue(r, field);
    const key = v === undefined || v === null ? "(none)" : String(v);
    const n = r.rows[1] - r.rows[0];
    const c = counts.get(key) || { segments: 0, sentences: 0 };
    c.segments += 1; c.sentences += n; total += n;
    counts.set(key, c);
  }
  const body = $("share");
  body.textContent = "";
  for (const [key, c] of [...counts.entries()].sort((a, b) => b[1].sentences - a[1].sentences)) {
    const tr = el("tr");
    tr.appendChild(el("td", key));
    tr.appendChild(el("td", c.segments, "num"));
    tr.appendChild(el("td", c.sentences, "num"));
    const share = total ? c.sentences / total : 0;
    const cell = el("td", " " + (100 * share).toFixed(1) + "%");
    const bar = el("span", null, "bar");
    bar.style.width = Math.round(120 * share) + "px";
    cell.prepend(bar);
    tr.appendChild(cell);
    body.appendChild(tr);
  }
}

function drawHistogram() {
  const plot = $("histogram");
  plot.textContent = "";
  const chosen = state.rows.map((r) => Number(r.score));
  const sample = state.explain && state.explain.sample ? state.explain.sample.scores : [];
  const cut = state.explain && state.explain.cut != null
    ? Number(state.explain.cut) : (chosen.length ? Math.min(...chosen) : null);
  const all = sample.concat(chosen).filter((v) => Number.isFinite(v));
  $("histogram-note").textContent = sample.length
    ? `${sample.length} random segments of ${state.explain.sample.of} (pale) and the selected ` +
      `ones (dark); the line is the budget's cut`
    : "the selected segments' scores only (the corpus's sample comes with 'why each row was " +
      "picked' at sentence context)";
  if (!all.length) return;
  const lo = Math.min(...all), hi = Math.max(...all), bins = 30;
  const width = (hi - lo) || 1, w = 400 / bins;
  const count = (values) => {
    const c = new Array(bins).fill(0);
    for (const v of values) c[Math.min(bins - 1, Math.floor((v - lo) / width * bins))] += 1;
    return c;
  };
  const s = count(sample), k = count(chosen);
  const top = Math.max(1, ...s, ...k);
  for (let i = 0; i < bins; i++) {
    for (const [values, cls] of [[s, "dropped"], [k, "kept"]]) {
      if (!values[i]) continue;
      const h = 130 * values[i] / top;
      const rect = svg("rect", { x: 10 + i * w, y: 140 - h, width: w - 1, height: h, class: cls });
      rect.appendChild(svg("title")).textContent = `${values[i]} segments`;
      plot.appendChild(rect);
    }
  }
  if (cut !== null && Number.isFinite(cut)) {
    const x = 10 + 400 * (cut - lo) / width;
    plot.appendChild(svg("line", { id: "cut-line", x1: x, x2: x, y1: 5, y2: 140, class: "cut" }));
  }
  const axis = svg("text", { x: 10, y: 155 });
  axis.textContent = lo.toFixed(3);
  plot.appendChild(axis);
  const end = svg("text", { x: 380, y: 155 });
  end.textContent = hi.toFixed(3);
  plot.appendChild(end);
}

async function details(i) {
  const r = state.rows[i];
  for (const tr of $("rows").children) tr.classList.toggle("chosen", Number(tr.dataset.index) === i);
  $("details").hidden = false;
  $("details-rank").textContent = `${r.rank} (score ${Number(r.score).toFixed(4)})`;
  const why = r.explain || {};
  const nearest = $("nearest");
  nearest.textContent = "";
  for (const n of why.nearest || []) nearest.appendChild(el("li", `${n.sentence} (cosine ${Number(n.cosine).toFixed(3)})`));
  if (!(why.nearest || []).length) nearest.appendChild(el("li", "(select with 'why each row was picked' to see them)"));
  const parts = $("parts");
  parts.textContent = "";
  for (const [name, v] of Object.entries(why.parts || {})) parts.appendChild(el("li", `${name}: ${Number(v).toFixed(4)}`));
  if (why.own !== undefined) parts.appendChild(el("li", `its sentences' own score: ${Number(why.own).toFixed(4)}`));
  if (why.document !== undefined) parts.appendChild(el("li", `its document's pooled score: ${Number(why.document).toFixed(4)}`));
  const context = $("context");
  context.textContent = "";
  try {
    const c = await getJSON(`context?start=${r.rows[0]}&stop=${r.rows[1]}&around=3`);
    for (const t of c.before) context.appendChild(el("span", t + " "));
    for (const t of c.rows) context.appendChild(el("span", t + " ", "chosen"));
    for (const t of c.after) context.appendChild(el("span", t + " "));
  } catch (err) {
    context.appendChild(el("span", r.text, "chosen"));
    context.appendChild(el("span", ` (its document's other sentences: ${err.message})`, "note"));
  }
}

function download() {
  const text = state.rows.map((r) => JSON.stringify(r)).join("\n") + "\n";
  const url = URL.createObjectURL(new Blob([text], { type: "application/x-ndjson" }));
  const a = el("a");
  a.href = url;
  a.download = "selection.jsonl";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

$("run").addEventListener("click", runSelection);
$("file").addEventListener("change", (e) => openFiles([...e.target.files]));
$("share-field").addEventListener("change", drawShare);
$("download").addEventListener("click", download);
$("token").addEventListener("change", loadSummary);
loadSummary();
