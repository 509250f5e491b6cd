"use strict";
// The dashboard's timeline: a lane per slot of the device, each run (a job on the
// device, start to end) on the lane it held, coloured by its producer (who held
// the slot) with a stripe of its class; under them the batch size over time (how
// many jobs ran at once), the tokens a second, then the model swaps, preemptions
// and marks.
// Items arrive once each (by sequence number) and are kept here; open runs are
// sent whole every push. Uses color(), secs(), el() of app.js.
const timeline = new Map();

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
}

function titled(node, text) {
  const title = svg("title", {});
  title.textContent = text;
  node.append(title);
  return node;
}

// The batch size as steps: +1 at each run's start, -1 at its end.
function batchSteps(runs, from, now) {
  const edges = [];
  for (const r of runs) {
    edges.push([Math.max(r.start, from), 1]);
    if (!r.open) edges.push([Math.min(r.end, now), -1]);  // an open run holds its slot now
  }
  edges.sort((a, b) => a[0] - b[0] || a[1] - b[1]);
  const steps = [[from, 0]];
  let size = 0;
  for (const [t, d] of edges) {
    size += d;
    steps.push([t, size]);
  }
  steps.push([now, size]);
  return steps;
}

function renderTimeline(st) {
  const tl = st.timeline;
  for (const item of tl.items) timeline.set(item.seq, item);
  const from = st.now - tl.window;
  for (const [seq, item] of timeline) {
    if ((item.end ?? item.time) < from) timeline.delete(seq);
  }
  const box = document.getElementById("timeline-svg");
  const width = box.clientWidth || 900;
  const left = 70, right = 10, plot = width - left - right;
  const x = t => left + Math.max(0, (t - from) / tl.window) * plot;
  const lanes = Math.max(1, tl.lanes || 1, st.slots || 1);
  const laneH = lanes > 8 ? 12 : lanes > 2 ? 18 : 26;
  const parts = [];
  const label = (y, text) => {
    const t = svg("text", { x: 0, y }); t.textContent = text; parts.push(t);
  };
  const band = (y, h) => parts.push(svg("rect", { x: left, y, width: plot, height: h, fill: "#f1f3f5" }));
  const laneY = i => 8 + i * (laneH + 2);
  for (let i = 0; i < lanes; i++) band(laneY(i), laneH);
  label(laneY(0) + Math.min(laneH, 17), lanes > 1 ? `slots ×${lanes}` : "device");
  const runs = [...timeline.values()].filter(i => i.kind === "run");
  for (const r of tl.open_runs || []) runs.push({ ...r, end: st.now, open: true });
  const classes = new Set(Object.keys(st.classes));
  const held = new Map();  // producer -> seconds on the device in the window
  for (const r of runs) {
    classes.add(r.class);
    held.set(r.producer, (held.get(r.producer) || 0) + (r.end - Math.max(r.start, from)));
    const x0 = x(r.start), x1 = Math.max(x0 + 1.5, x(r.end));
    const lane = Math.min(r.lane ?? 0, lanes - 1);
    const faded = r.how === "cancelled" || r.how === "failed" ? 0.45 : 1;
    const rect = svg("rect", {
      x: x0, y: laneY(lane), width: x1 - x0, height: laneH, fill: producerColor(r.producer),
      class: "run", "data-job": r.job, "data-lane": lane, "data-open": r.open ? "1" : "0",
      "data-producer": r.producer, opacity: faded,
    });
    parts.push(titled(rect, `#${r.job} ${r.class} ${r.producer} on ${r.model}, slot ${lane}: ` +
      `${secs(r.end - r.start)}${r.open ? " (running)" : ", " + r.how}`));
    parts.push(svg("rect", { x: x0, y: laneY(lane), width: x1 - x0, height: 3,
                             fill: color(r.class), opacity: faded, class: "class-stripe" }));
  }
  // The batch size over time: a step line over its own band.
  const batchTop = laneY(lanes) + 4, batchH = 30;
  band(batchTop, batchH);
  label(batchTop + 19, "batch");
  const steps = batchSteps(runs, from, st.now);
  const most = Math.max(lanes, ...steps.map(s => s[1]));
  const y = n => batchTop + batchH - (n / most) * (batchH - 2);
  let d = `M ${x(steps[0][0])} ${y(0)}`;
  for (const [t, n] of steps) d += ` H ${x(t)} V ${y(n)}`;
  const now = steps[steps.length - 1][1];
  parts.push(titled(svg("path", { d, fill: "none", stroke: "#1d2125", "stroke-width": 1.5,
    id: "batch-size", "data-now": now, "data-max": Math.max(...steps.map(s => s[1])) }),
    `batch size: ${now} now`));
  // Tokens a second, second by second (the server's counts: throughput.py).
  const rateTop = batchTop + batchH + 4, rateH = 36;
  band(rateTop, rateH);
  label(rateTop + 14, "tok/s");
  const points = (st.throughput || []).filter(p => p[0] + 1 >= from);
  const peak = Math.max(1, ...points.map(p => p[1]));
  const ry = n => rateTop + rateH - (n / peak) * (rateH - 4);
  let area = `M ${x(from)} ${ry(0)}`;
  let prev = null;
  for (const [t, n] of points) {
    if (prev !== null && t > prev + 1) area += ` H ${x(prev + 1)} V ${ry(0)}`;  // a gap: zero
    area += ` H ${x(t)} V ${ry(n)} H ${x(Math.min(t + 1, st.now))}`;
    prev = t;
  }
  area += ` V ${ry(0)} H ${x(st.now)} Z`;
  const last = points.length ? points[points.length - 1][1] : 0;
  parts.push(titled(svg("path", { d: area, fill: "#74c0fc", stroke: "#1971c2", "stroke-width": 1,
    id: "throughput", "data-peak": peak, "data-points": points.length }),
    `tokens a second: up to ${peak} in the window`));
  const peakLabel = svg("text", { x: left + plot - 4, y: rateTop + 12, "text-anchor": "end" });
  peakLabel.textContent = `peak ${peak}/s · last ${last}/s`;
  parts.push(peakLabel);
  // Swaps.
  const swapTop = rateTop + rateH + 4;
  band(swapTop, 16);
  label(swapTop + 13, "swaps");
  const swaps = [...timeline.values()].filter(i => i.kind === "swap");
  if (tl.open_swap) swaps.push({ ...tl.open_swap, end: st.now });
  for (const s of swaps) {
    const x0 = x(s.start), x1 = Math.max(x0 + 2, x(s.end));
    parts.push(titled(svg("rect", { x: x0, y: swapTop, width: x1 - x0, height: 16, fill: "var(--swap)" }),
      `swap ${s.previous ?? "none"} → ${s.model}: ${secs(s.end - s.start)}`));
  }
  const bottom = swapTop + 20;
  for (const m of timeline.values()) {
    if (m.kind !== "mark" || m.time < from) continue;
    const mx = x(m.time);
    const stroke = m.what === "preempt" ? "var(--preempt)" : "#495057";
    parts.push(svg("line", { x1: mx, x2: mx, y1: 4, y2: bottom, stroke, "stroke-width": 2,
                             "stroke-dasharray": m.what === "preempt" ? "" : "3 3" }));
    parts.push(svg("polygon", { points: `${mx - 5},2 ${mx + 5},2 ${mx},9`, fill: stroke }));
  }
  // Axis: the first "round" step giving at most 10 ticks.
  const step = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600]
    .find(s => tl.window / s <= 10) ?? tl.window;
  for (let ago = 0; ago <= tl.window + 1e-9; ago += step) {
    const tx = x(st.now - ago);
    parts.push(svg("line", { x1: tx, x2: tx, y1: bottom, y2: bottom + 6, stroke: "#adb5bd" }));
    const t = svg("text", { x: tx, y: bottom + 22, "text-anchor": ago === 0 ? "end" : "middle" });
    t.textContent = ago === 0 ? "now" : (step >= 60 ? `-${ago / 60} min` : `-${ago} s`);
    parts.push(t);
  }
  box.setAttribute("height", bottom + 28);
  box.style.height = `${bottom + 28}px`;
  box.replaceChildren(...parts);
  document.getElementById("timeline-title").textContent =
    `Timeline · who held each slot, and tokens a second, last ${secs(tl.window)}`;
  // Producers by their time on the device in the window (the lanes' colours),
  // then the classes (the stripe on each run).
  const top = [...held.entries()].sort((a, b) => b[1] - a[1]).slice(0, 12);
  const legend = top.map(([p, t]) => el("span", { "data-producer": p, title: `${secs(t)} held` },
    el("i", { style: `background:${producerColor(p)}` }), p));
  legend.push(...[...classes].map(c => el("span", {},
    el("i", { style: `background:${color(c)};height:4px;vertical-align:2px` }), `${c} (stripe)`)));
  legend.push(el("span", {}, el("i", { style: "background:var(--swap)" }), "model swap"));
  legend.push(el("span", {}, el("i", { style: "background:var(--preempt)" }), "preemption"));
  legend.push(el("span", {}, el("i", { style: "background:#495057" }), "foreground / pause"));
  document.getElementById("legend").replaceChildren(...legend);
}
