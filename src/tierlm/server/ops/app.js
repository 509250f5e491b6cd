"use strict";
// The dashboard's page: state pushed by /dashboard/events, rendered into the
// panels; the timeline is timeline.js's.
let last = null;
let updates = 0;
const palette = ["#e8590c", "#0c8599", "#5f3dc4", "#c2255c", "#2b8a3e", "#1864ab", "#a61e4d"];
const fixed = { chat: "var(--chat)", extract: "var(--extract)", nataraj: "var(--nataraj)",
                gana: "var(--gana)" };

function color(cls) {
  if (fixed[cls]) return fixed[cls];
  let h = 0;
  for (const c of cls) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  return palette[h % palette.length];
}
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "style") e.style.cssText = v; else if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}
function secs(s) {
  if (s == null) return "–";
  if (s < 1) return (s * 1000).toFixed(0) + " ms";
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  return (s / 3600).toFixed(1) + " h";
}
function clock(t, st) {
  return new Date((t + st.wall_offset) * 1000).toLocaleTimeString();
}
// A producer's own colour (fairness bars): its hue from a hash of its name.
// FNV-1a, so that names differing in one letter ("gana:1", "gana:2") land far
// apart; lightness varies too, so 24 hues give more than 24 colours.
function producerColor(name) {
  let h = 0x811c9dc5;
  for (const c of name) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
  return `hsl(${h % 360} 62% ${36 + ((h >>> 9) % 3) * 8}%)`;
}
function bytes(n) {
  if (n == null) return "–";
  if (n < 1024 * 1024) return (n / 1024).toFixed(0) + " KiB";
  if (n < 1024 ** 3) return (n / 1024 ** 2).toFixed(1) + " MiB";
  return (n / 1024 ** 3).toFixed(2) + " GiB";
}
function badge(cls) {
  return el("span", { class: "badge", style: `background:${color(cls)}` }, cls);
}

function renderRunning(st) {
  const box = document.getElementById("running");
  const main = document.getElementById("running-main");
  const detail = document.getElementById("running-detail");
  const r = st.running;
  const batch = document.getElementById("running-batch");
  main.replaceChildren();
  detail.replaceChildren();
  batch.replaceChildren();
  box.dataset.jobId = r ? String(r.id) : "";
  box.dataset.class = r ? r.class : "";
  box.classList.toggle("idle", !r);
  if (!r) {
    main.append(st.paused ? "paused · nothing runs" : "idle");
    return;
  }
  main.append(badge(r.class), " ", `job #${r.id} · ${r.producer}`);
  const parts = [`model ${r.model}`, `tier T${r.tier}`,
                 `running for ${secs(st.now - r.since)} (since ${clock(r.since, st)})`];
  if (r.subject != null) parts.push(`subject ${r.subject}`);
  if (r.preemptions) parts.push(`preempted ${r.preemptions}×`);
  if (st.swapping_to) parts.unshift(`swapping to ${st.swapping_to}`);
  detail.append(parts.join(" · "));
  // A batched device: every slot's job (the first is the one above).
  if (st.slots > 1) {
    batch.append(`batch ${st.batch.length} of ${st.slots} slots`);
    for (const j of st.batch.slice(1)) batch.append(" · ", badge(j.class), ` #${j.id} ${j.producer}`);
  }
}

// Why slots sit idle (ops/idle.py): the first reason that holds, in words.
function renderIdle(st) {
  const box = document.getElementById("idle");
  const idle = st.idle || {};
  box.hidden = !idle.idle;
  box.dataset.why = idle.why || "";
  if (!idle.idle) return;
  document.getElementById("idle-head").textContent =
    `${idle.idle} of ${idle.slots} slot${idle.slots > 1 ? "s" : ""} idle · ${idle.text}` +
    (idle.detail ? ":" : "");
  document.getElementById("idle-detail").textContent = idle.detail || "";
}

// Who is a person (docs/design.md §4.11): each identity, its verdict and why.
const WHY = {
  "first-request": "first request: a person until its pacing says otherwise",
  "reads-between-requests": "reads between answers",
  "a-new-name-each-request": "its client sends a new name (user) with most requests",
  "back-to-back": "sends the next request as the last ends",
  "alongside-another": "sends while another is in flight",
  "after-a-tool-call": "goes on after a tool call",
  "paces-like-a-program": "paces like a program",
  "key-says-person": "its key says person",
  "key-says-program": "its key says program",
  "class-named": "names its class",
};
function renderPeople(st) {
  const people = st.people || { identities: [] };
  const rule = document.getElementById("people-rule");
  rule.textContent = `A request that names no class is a person's or a program's by its pacing: ` +
    `a person reads at least ${secs(people.reading_gap)} between an answer and the next request. ` +
    `Programs are served in ${people.program_class ?? "the fair pool"}, beside the other ` +
    `background work. ${people.remembered ?? 0} identities remembered.`;
  const box = document.getElementById("people");
  const list = people.identities || [];
  if (!list.length) { box.replaceChildren(el("div", { class: "empty" }, "no request judged yet")); return; }
  const nums = ["in flight", "short gaps", "idle"];
  const head = el("tr", {}, ...["key", "client", "name", "served as", "why", ...nums]
    .map(h => el("th", nums.includes(h) ? { class: "num" } : {}, h)));
  const rows = list.map(p => el("tr", { "data-served": p.served_as, "data-client": p.client },
    el("td", {}, p.key ?? "–"), el("td", {}, p.client),
    el("td", {}, (p.name ?? "–") + (p.session ? " · session" : "")),
    el("td", {}, el("span", { class: `verdict ${p.served_as}` }, p.served_as)),
    el("td", { title: p.why }, WHY[p.why] ?? p.why),
    el("td", { class: "num" }, p.in_flight),
    el("td", { class: "num" }, `${p.short_gaps} of ${p.gaps}`),
    el("td", { class: "num" }, p.idle_s == null ? "busy" : secs(p.idle_s))));
  box.replaceChildren(el("table", {}, head, ...rows));
}

function renderCounters(st) {
  const s = st.stats;
  const items = [["submitted", s.submitted], ["completed", s.completed], ["cancelled", s.cancelled],
                 ["failed", s.failed], ["preemptions", s.preemptions], ["re-queued", s.requeues],
                 ["swaps", s.swaps], ["swap time", secs(s.swap_seconds)]];
  document.getElementById("counters").replaceChildren(...items.map(([l, n]) =>
    el("div", { class: "counter" }, el("div", { class: "n" }, n), el("div", { class: "l" }, l))));
}

function renderTiers(st) {
  const rows = st.tiers.map(t => {
    const chips = t.jobs.map(j => el("span", { class: "chip", title: `model ${j.model}` },
      el("i", { style: `background:${color(j.class)}` }),
      `#${j.id} ${j.producer} · ${secs(j.waited)}`));
    if (t.count > t.jobs.length) chips.push(el("span", { class: "chip" }, `+${t.count - t.jobs.length} more`));
    if (!chips.length) chips.push(el("span", { class: "empty" }, "empty"));
    return el("div", { class: "tier", id: `queue-T${t.tier}`, "data-count": t.count },
      el("div", { class: "name" }, t.name), el("div", { class: "count" }, t.count),
      el("div", { class: "chips" }, ...chips));
  });
  document.getElementById("tiers").replaceChildren(...rows);
}

function renderBars(st) {
  const vr = document.getElementById("vruntime");
  if (!st.vruntime.length) {
    vr.replaceChildren(el("div", { class: "empty" }, "no fair-pool producer yet"));
  } else {
    const max = Math.max(...st.vruntime.map(v => v.vruntime), 1e-9);
    vr.replaceChildren(...st.vruntime.map(v => el("div", { class: "bar-row" },
      el("div", { class: "label", title: v.producer }, v.producer),
      el("div", { class: "bar" }, el("div", { class: "fill", "data-producer": v.producer,
        style: `width:${(100 * v.vruntime / max).toFixed(1)}%;background:${producerColor(v.producer)}` })),
      el("div", { class: "value" }, secs(v.vruntime)))));
  }
  const bd = document.getElementById("budget");
  if (!st.budget.length) {
    bd.replaceChildren(el("div", { class: "empty" }, "no class has a budget"));
  } else {
    bd.replaceChildren(...st.budget.map(b => el("div", { class: "bar-row" },
      el("div", { class: "label" }, b.class),
      el("div", { class: "bar" },
        el("div", { class: "fill", style: `width:${Math.min(100, 100 * b.share).toFixed(1)}%;` +
          `background:${b.share > b.cap ? "var(--preempt)" : color(b.class)}` }),
        el("div", { class: "cap", style: `left:${(100 * b.cap).toFixed(1)}%`, title: "cap" })),
      el("div", { class: "value" }, `${(100 * b.share).toFixed(0)}% / ${(100 * b.cap).toFixed(0)}%`))));
  }
}

function renderRecent(st) {
  const box = document.getElementById("recent");
  if (!st.recent.length) { box.replaceChildren(el("div", { class: "empty" }, "nothing yet")); return; }
  const nums = ["tokens", "wait", "first token", "duration", "tokens/s"];
  const head = el("tr", {}, ...["job", "class", "producer", "model", "outcome", ...nums, "ended"]
    .map(h => el("th", nums.includes(h) ? { class: "num" } : {}, h)));
  const rate = r => r.tokens_per_s == null ? "–" : r.tokens_per_s.toFixed(1);
  const rows = st.recent.map(r => el("tr", { "data-job": r.id },
    el("td", {}, `#${r.id}`), el("td", {}, badge(r.class)), el("td", {}, r.producer),
    el("td", {}, r.model), el("td", {}, r.reason ? `${r.outcome} (${r.reason})` : r.outcome),
    el("td", { class: "num" }, r.tokens ?? "–"), el("td", { class: "num" }, secs(r.wait)),
    el("td", { class: "num" }, secs(r.ttft)), el("td", { class: "num" }, secs(r.duration)),
    el("td", { class: "num" }, rate(r)), el("td", {}, clock(r.ended_at, st))));
  box.replaceChildren(el("table", {}, head, ...rows));
}

function renderResources(st) {
  const r = st.resources || {};
  const rows = [
    ["model", r.model ?? "none"], ["model file", bytes(r.model_bytes)],
    ["context × slots", r.context ? `${r.context} × ${r.slots}` : `– × ${r.slots ?? 1}`],
    ["KV allocated", bytes(r.kv_allocated_bytes)],
    ["KV in use", `${bytes(r.kv_in_use_bytes)} (${r.tokens_in_context ?? 0} tokens)`],
    ["tokens/s", r.tokens_per_s == null ? "–" : r.tokens_per_s.toFixed(1)],
    ["keep-alive", r.keep_alive == null ? "until a swap" : secs(r.keep_alive)],
    ["unloads in", r.expires_in == null ? "–" : secs(r.expires_in)],
  ];
  const table = el("table", {}, ...rows.map(([k, v]) =>
    el("tr", { "data-key": k }, el("td", {}, k), el("td", { class: "num" }, v))));
  const share = r.kv_allocated_bytes ? Math.min(1, (r.kv_in_use_bytes || 0) / r.kv_allocated_bytes) : 0;
  const meter = el("div", { class: "meter", title: "KV in use of allocated" },
    el("div", { style: `width:${(100 * share).toFixed(1)}%` }));
  document.getElementById("resources-body").replaceChildren(meter, table);
}

function renderPercentiles(st) {
  const box = document.getElementById("percentiles-body");
  document.getElementById("percentiles-title").textContent =
    `Wait and time to first token · per class · last ${secs(st.timeline.window)}`;
  const classes = Object.entries(st.percentiles || {});
  if (!classes.length) { box.replaceChildren(el("div", { class: "empty" }, "no job yet")); return; }
  const cols = ["wait p50", "wait p95", "wait p99", "first token p50", "first token p95", "first token p99"];
  const head = el("tr", {}, el("th", {}, "class"), el("th", { class: "num" }, "jobs"),
    ...cols.map(c => el("th", { class: "num" }, c)));
  const rows = classes.map(([name, p]) => {
    const w = p.wait || {}, t = p.ttft || {};
    const cells = [w.p50, w.p95, w.p99, t.p50, t.p95, t.p99].map(v => el("td", { class: "num" }, secs(v)));
    return el("tr", { "data-class": name }, el("td", {}, badge(name)),
      el("td", { class: "num" }, w.count ?? t.count ?? 0), ...cells);
  });
  box.replaceChildren(el("table", {}, head, ...rows));
}

function renderRejected(st) {
  const box = document.getElementById("rejected");
  const list = st.rejected || [];
  if (!list.length) { box.replaceChildren(el("div", { class: "empty" }, "none")); return; }
  const head = el("tr", {}, ...["when", "request", "status", "reason", "message"]
    .map(h => el("th", {}, h)));
  const rows = list.map(r => el("tr", {},
    el("td", {}, new Date(r.at * 1000).toLocaleTimeString()), el("td", {}, `${r.method} ${r.path}`),
    el("td", {}, String(r.status)), el("td", {}, r.code || r.reason || "–"),
    el("td", {}, r.message)));
  box.replaceChildren(el("table", {}, head, ...rows));
}

function extValue(k, v) {
  // "*_seconds" values are durations; text is shown as is, not as JSON.
  if (v == null) return "–";
  if (k.endsWith("_seconds") && typeof v === "number") return secs(v);
  if (typeof v === "number") return Number.isInteger(v) ? v : v.toFixed(2);
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}

function renderExtensions(st) {
  // Components mounted beside the scheduler (e.g. the embedding lane) report here.
  const box = document.getElementById("extensions");
  box.replaceChildren(...Object.entries(st.extensions).map(([name, data]) => {
    const rows = Object.entries(data).map(([k, v]) =>
      el("tr", { "data-key": k }, el("td", {}, k.replace(/_seconds$/, "").replaceAll("_", " ")),
        el("td", { class: "num" }, extValue(k, v))));
    return el("section", { id: `ext-${name}` }, el("h2", {}, name), el("table", {}, ...rows));
  }));
}

function render(st) {
  last = st;
  updates += 1;
  document.body.dataset.updates = String(updates);
  document.getElementById("backend").textContent = st.backend;
  document.getElementById("loaded-model").textContent =
    st.swapping_to ? `→ ${st.swapping_to} (swapping)` : (st.loaded_model ?? "none");
  const fg = st.foreground;
  document.getElementById("foreground").textContent =
    fg ? fg.class + (fg.subject != null ? ` / ${fg.subject}` : "") : "none";
  document.getElementById("paused").hidden = !st.paused;
  renderRunning(st); renderIdle(st); renderPeople(st); renderCounters(st); renderTiers(st); renderBars(st);
  renderTimeline(st); renderResources(st); renderPercentiles(st); renderRecent(st);
  renderRejected(st); renderExtensions(st);
}

function connect() {
  const status = document.getElementById("status");
  const text = document.getElementById("status-text");
  const source = new EventSource("/dashboard/events");
  source.addEventListener("state", e => {
    status.className = "live"; text.textContent = "live";
    render(JSON.parse(e.data));
  });
  source.onerror = () => {
    // EventSource reconnects by itself; the timeline is re-sent whole on reconnect.
    status.className = "down"; text.textContent = "reconnecting…";
    timeline.clear();
  };
}
window.addEventListener("resize", () => { if (last) renderTimeline({ ...last, timeline: { ...last.timeline, items: [] } }); });
// The state as of the page's load, in the page: the panels show it at once,
// before the event stream connects.
const initial = document.getElementById("initial-state");
if (initial) {
  render(JSON.parse(initial.textContent));
  updates = 0;  // the stream's states are the updates; this one came with the page
  document.body.dataset.updates = "0";
  document.body.dataset.initial = "shown";
  document.getElementById("status-text").textContent = "as loaded; connecting…";
}
connect();
