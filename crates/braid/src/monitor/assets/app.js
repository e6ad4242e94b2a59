// braid's dashboard: live samples from /events (Server-Sent Events), drawn on canvases.
// No library, nothing fetched but braid's own /events and /api/history.
"use strict";

const COLORS = ["#38bdf8", "#f472b6", "#a3e635", "#fbbf24", "#c084fc", "#2dd4bf", "#fb7185", "#818cf8"];
const params = new URLSearchParams(location.search);
const token = params.get("token");
// ?samples=N: close the stream after N live samples (headless checks and screenshots).
const closeAfter = Number(params.get("samples")) || 0;
let received = 0;
const q = (extra) => {
  const p = new URLSearchParams(extra || "");
  if (token) p.set("token", token);
  const s = p.toString();
  return s ? "?" + s : "";
};
const $ = (id) => document.getElementById(id);

const state = {
  short: [],          // 1 s samples, oldest first (at most 600)
  long: null,         // 10 s samples, fetched when the 24 h range is chosen
  range: "180",
  summary: null,
  live: null,
  pathColor: new Map(),
};

// ---- formatting ----
function rate(bps) {
  if (!isFinite(bps) || bps <= 0) return "0";
  const u = [[1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (const [d, s] of u) if (bps >= d) return (bps / d).toFixed(bps / d >= 100 ? 0 : bps / d >= 10 ? 1 : 2) + " " + s + "bit/s";
  return bps.toFixed(0) + " bit/s";
}
function shortRate(bps) {
  if (bps >= 1e9) return (bps / 1e9).toFixed(1) + "G";
  if (bps >= 1e6) return (bps / 1e6).toFixed(bps >= 1e7 ? 0 : 1) + "M";
  if (bps >= 1e3) return (bps / 1e3).toFixed(0) + "k";
  return bps.toFixed(0);
}
function bytes(n) {
  if (n >= 1 << 20) return (n / (1 << 20)).toFixed(1) + " MiB";
  if (n >= 1 << 10) return (n / (1 << 10)).toFixed(1) + " KiB";
  return (n || 0).toFixed(0) + " B";
}
function ms(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
function dur(s) {
  s = Math.floor(s);
  const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
  if (d) return d + "d " + h + "h";
  if (h) return h + "h " + m + "m";
  if (m) return m + "m " + (s % 60) + "s";
  return s + "s";
}
function clock(t) {
  return new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}
function el(tag, attrs, text) {
  const e = document.createElement(tag);
  for (const k in attrs || {}) e.setAttribute(k, attrs[k]);
  if (text !== undefined) e.textContent = text;
  return e;
}
function colorOf(name) {
  if (!state.pathColor.has(name)) state.pathColor.set(name, COLORS[state.pathColor.size % COLORS.length]);
  return state.pathColor.get(name);
}

// ---- the samples in view ----
function view() {
  if (state.range === "long") {
    const long = state.long || [];
    const last = long.length ? long[long.length - 1].t : 0;
    return long.concat(state.short.filter((s) => s.t > last + 1));
  }
  const n = Number(state.range);
  return state.short.slice(-n);
}
function pathNames(samples) {
  const names = [];
  for (const s of samples) for (const p of s.p) if (!names.includes(p.n)) names.push(p.n);
  return names;
}

// ---- charts ----
function setup(canvas) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth, h = canvas.clientHeight;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const ctx = canvas.getContext("2d");
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, w, h);
  return { ctx, w, h };
}
function niceMax(v) {
  if (!(v > 0)) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 2.5, 5, 10]) if (v <= m * p) return m * p;
  return 10 * p;
}
const css = (name) => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

// A chart frame: y from lo to hi, x over [t0, t1]; returns the mapping.
function frame(c, t0, t1, lo, hi, fmt, pad) {
  const { ctx, w, h } = c;
  const L = pad || 44, R = 6, T = 6, B = 18;
  const X = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (w - L - R);
  const Y = (v) => T + (1 - (v - lo) / (hi - lo || 1)) * (h - T - B);
  ctx.font = "11px system-ui, sans-serif";
  ctx.fillStyle = css("--muted");
  ctx.strokeStyle = css("--line");
  ctx.lineWidth = 1;
  const ticks = lo < 0 ? [lo, lo / 2, 0, hi / 2, hi] : [0, hi / 4, hi / 2, (3 * hi) / 4, hi];
  ctx.textAlign = "right";
  ctx.textBaseline = "middle";
  for (const v of ticks) {
    const y = Math.round(Y(v)) + 0.5;
    ctx.beginPath(); ctx.moveTo(L, y); ctx.lineTo(w - R, y); ctx.stroke();
    ctx.fillText(fmt(Math.abs(v)), L - 4, y);
  }
  ctx.textAlign = "center";
  ctx.textBaseline = "alphabetic";
  const span = t1 - t0;
  const n = Math.max(1, Math.min(4, Math.floor((w - L - R) / 80)));
  for (let i = 0; i <= n; i++) {
    const t = t0 + (span * i) / n;
    const label = span > 3 * 3600e3 ? new Date(t).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", hour12: false }) : clock(t);
    ctx.fillText(label, Math.min(Math.max(X(t), L + 24), w - 26), h - 4);
  }
  return { X, Y, L, R, T, B };
}

// Stacked areas: series[k] = values per sample (>= 0), drawn upward (sign 1) or downward.
function stacked(ctx, f, ts, series, colors, sign) {
  const base = ts.map(() => 0);
  series.forEach((vals, k) => {
    const top = base.map((b, i) => b + (vals[i] || 0));
    ctx.beginPath();
    ts.forEach((t, i) => (i ? ctx.lineTo(f.X(t), f.Y(sign * top[i])) : ctx.moveTo(f.X(t), f.Y(sign * top[i]))));
    for (let i = ts.length - 1; i >= 0; i--) ctx.lineTo(f.X(ts[i]), f.Y(sign * base[i]));
    ctx.closePath();
    ctx.fillStyle = colors[k] + (sign > 0 ? "cc" : "77");
    ctx.fill();
    top.forEach((v, i) => (base[i] = v));
  });
  return base;
}
function line(ctx, f, ts, vals, color, dash, width) {
  ctx.beginPath();
  ctx.setLineDash(dash || []);
  ctx.strokeStyle = color;
  ctx.lineWidth = width || 1.6;
  let started = false;
  ts.forEach((t, i) => {
    const v = vals[i];
    if (v === null || v === undefined || !isFinite(v)) { started = false; return; }
    if (started) ctx.lineTo(f.X(t), f.Y(v)); else { ctx.moveTo(f.X(t), f.Y(v)); started = true; }
  });
  ctx.stroke();
  ctx.setLineDash([]);
}

function drawThroughput(samples) {
  const canvas = $("c-tput");
  const c = setup(canvas);
  const names = pathNames(samples);
  const ts = samples.map((s) => s.t);
  const get = (key) => names.map((n) => samples.map((s) => { const p = s.p.find((x) => x.n === n); return p ? p[key] : 0; }));
  const tx = get("tx"), rx = get("rx");
  const sum = (arr) => arr[0] ? arr[0].map((_, i) => arr.reduce((a, v) => a + (v[i] || 0), 0)) : [];
  const hi = niceMax(Math.max(1, ...sum(tx), ...sum(rx)));
  const t1 = ts.length ? ts[ts.length - 1] : Date.now();
  const t0 = ts.length ? Math.min(ts[0], t1 - 60e3) : t1 - 180e3;
  const f = frame(c, t0, t1, -hi, hi, shortRate, 46);
  const colors = names.map(colorOf);
  if (ts.length > 1) {
    stacked(c.ctx, f, ts, tx, colors, 1);
    stacked(c.ctx, f, ts, rx, colors, -1);
  }
  c.ctx.strokeStyle = css("--muted");
  c.ctx.beginPath(); c.ctx.moveTo(f.L, f.Y(0)); c.ctx.lineTo(c.w - f.R, f.Y(0)); c.ctx.stroke();
  canvas.dataset.points = String(ts.length);
  const last = samples[samples.length - 1];
  const legend = $("legend");
  legend.textContent = "";
  let total = 0;
  for (const n of names) {
    const p = last && last.p.find((x) => x.n === n);
    const s = el("span");
    const i = el("i"); i.style.background = colorOf(n);
    s.append(i, document.createTextNode(n + "  ↑ " + rate(p ? p.tx : 0) + "  ↓ " + rate(p ? p.rx : 0)));
    legend.append(s);
    total += p ? p.tx + p.rx : 0;
  }
  canvas.dataset.total = String(Math.round(total));
}

function drawLines(id, samples, key, fmt, floorMax) {
  const canvas = $(id);
  const c = setup(canvas);
  const names = pathNames(samples);
  const ts = samples.map((s) => s.t);
  let hi = floorMax;
  const series = names.map((n) => samples.map((s) => {
    const p = s.p.find((x) => x.n === n);
    if (!p) return null;
    if (key === "rtt" && p.rtt === 0) return null;
    hi = Math.max(hi, p[key]);
    return p[key];
  }));
  hi = niceMax(hi);
  const t1 = ts.length ? ts[ts.length - 1] : Date.now();
  const t0 = ts.length ? Math.min(ts[0], t1 - 60e3) : t1 - 180e3;
  const f = frame(c, t0, t1, 0, hi, fmt, 38);
  series.forEach((vals, k) => line(c.ctx, f, ts, vals, colorOf(names[k])));
  canvas.dataset.points = String(ts.length);
}

// ---- classes ----
function drawClasses(samples) {
  const last = samples[samples.length - 1];
  const card = $("classes-card");
  if (!last || !last.c || !last.c.length) { card.hidden = true; return; }
  card.hidden = false;
  const box = $("classes");
  const ids = last.c.map((c) => c.id);
  // One tile per class, made once and kept.
  for (const id of ids) {
    if (box.querySelector('[data-class="' + CSS.escape(id) + '"]')) continue;
    const tile = el("div", { class: "class", "data-class": id });
    const head = el("header");
    head.append(el("b", { class: "cname" }), el("span", { class: "crate" }));
    tile.append(head, el("div", { class: "bar" }), el("canvas", { class: "chart", "data-points": "0" }), el("div", { class: "meta" }));
    tile.querySelector(".bar").append(el("b"), el("em", { class: "r" }), el("em", { class: "c" }));
    box.append(tile);
  }
  for (const tile of [...box.children]) if (!ids.includes(tile.dataset.class)) tile.remove();
  const ts = samples.map((s) => s.t);
  const t1 = ts.length ? ts[ts.length - 1] : Date.now();
  const t0 = ts.length ? Math.min(ts[0], t1 - 60e3) : t1 - 180e3;
  // All leaves on one chart (the HTB seed's graphs: each user's rate per second).
  const leaves = last.c.filter((c) => c.leaf);
  const all = $("c-classes");
  const ca = setup(all);
  const series = leaves.map((cl) => samples.map((s) => { const x = (s.c || []).find((y) => y.id === cl.id); return x ? x.r : null; }));
  const top = niceMax(Math.max(1, ...series.flat().filter((v) => v !== null)));
  const fa = frame(ca, t0, t1, 0, top, shortRate, 46);
  const legend = $("class-legend");
  legend.textContent = "";
  leaves.forEach((cl, k) => {
    const color = COLORS[k % COLORS.length];
    line(ca.ctx, fa, ts, series[k], color, [], 2);
    const sp = el("span"); const i = el("i"); i.style.background = color;
    sp.append(i, document.createTextNode((cl.name || cl.id) + " " + rate(cl.r)));
    legend.append(sp);
  });
  all.dataset.points = String(ts.length);
  for (const cl of last.c) {
    const tile = box.querySelector('[data-class="' + CSS.escape(cl.id) + '"]');
    const mode = state.live && state.live.classes ? state.live.classes[cl.id] : null;
    tile.querySelector(".cname").textContent = cl.id + (cl.name ? " " + cl.name : "") + (cl.leaf ? "" : " (inner)");
    tile.querySelector(".crate").textContent = rate(cl.r);
    const top = Math.max(cl.ceil, cl.r, 1);
    tile.querySelector(".bar b").style.width = (100 * Math.min(1, cl.r / top)).toFixed(1) + "%";
    tile.querySelector(".bar em.r").style.left = (100 * cl.rate / top).toFixed(1) + "%";
    tile.querySelector(".bar em.c").style.left = "calc(" + (100 * cl.ceil / top).toFixed(1) + "% - 2px)";
    tile.querySelector(".meta").textContent = "rate " + shortRate(cl.rate) + " · ceil " + shortRate(cl.ceil) +
      " · backlog " + bytes(cl.bl) + " · drops " + cl.dr.toFixed(0) + "/s" + (mode ? " · " + mode : "");
    const canvas = tile.querySelector("canvas");
    const c = setup(canvas);
    const vals = samples.map((s) => { const x = (s.c || []).find((y) => y.id === cl.id); return x ? x.r : null; });
    const hi = niceMax(Math.max(cl.ceil, ...vals.filter((v) => v !== null)));
    const f = frame(c, t0, t1, 0, hi, shortRate, 38);
    const ctx = c.ctx;
    if (ts.length > 1) {
      ctx.beginPath();
      ts.forEach((t, i) => (i ? ctx.lineTo(f.X(t), f.Y(vals[i] || 0)) : ctx.moveTo(f.X(t), f.Y(vals[i] || 0))));
      ctx.lineTo(f.X(t1), f.Y(0)); ctx.lineTo(f.X(ts[0]), f.Y(0)); ctx.closePath();
      ctx.fillStyle = css("--accent") + "88";
      ctx.fill();
    }
    line(ctx, f, [t0, t1], [cl.rate, cl.rate], css("--up"), [5, 4], 1.4);
    line(ctx, f, [t0, t1], [cl.ceil, cl.ceil], css("--warn"), [2, 3], 1.4);
    canvas.dataset.points = String(ts.length);
  }
}

// ---- table, header, events, config ----
function drawPaths(samples) {
  const last = samples[samples.length - 1];
  const body = $("paths").querySelector("tbody");
  body.textContent = "";
  if (!last) return;
  const live = new Map(((state.live && state.live.paths) || []).map((p) => [p.name, p]));
  for (const p of last.p) {
    const l = live.get(p.n) || {};
    const st = l.state || (p.up >= 1 ? "up" : p.up > 0 ? "stalled" : "down");
    const tr = el("tr");
    const name = el("td"); const dot = el("i"); dot.style.cssText = "display:inline-block;width:8px;height:8px;border-radius:2px;margin-right:6px;background:" + colorOf(p.n);
    name.append(dot, document.createTextNode(p.n));
    tr.append(name, el("td", { class: "state-" + st }, st),
      el("td", {}, rate(p.tx)), el("td", {}, rate(p.rx)),
      el("td", {}, p.rtt ? ms(p.rtt) + " ms" : "–"),
      el("td", {}, l.min_rtt_us ? ms(l.min_rtt_us / 1000) + " ms" : "–"),
      el("td", {}, ms(p.jit) + " ms"), el("td", {}, p.loss.toFixed(2) + " %"),
      el("td", {}, l.capacity_bps ? rate(l.capacity_bps) : "–"),
      el("td", {}, l.pacing_bps ? rate(l.pacing_bps) : "–"),
      el("td", {}, bytes(p.q) + " / " + ms(p.qd) + " ms"),
      el("td", {}, l.last_rx_us === null || l.last_rx_us === undefined ? "never" : ms(l.last_rx_us / 1000) + " ms ago"),
      el("td", {}, String(l.downs || 0)));
    body.append(tr);
  }
}

function drawHeader() {
  const last = state.short[state.short.length - 1];
  if (last) {
    const tx = last.p.reduce((a, p) => a + p.tx, 0), rx = last.p.reduce((a, p) => a + p.rx, 0);
    $("bond-rate").textContent = "↑ " + rate(tx) + "  ↓ " + rate(rx);
  }
  const l = state.live;
  if (!l) return;
  const h = $("health");
  h.className = "pill " + l.health.state;
  h.textContent = l.health.state;
  h.title = l.health.why || "";
  $("uptime").textContent = "up " + dur((l.uptime_us || 0) / 1e6);
  $("session").textContent = l.encryption ? (l.established ? "session " + (l.handshake_age_us != null ? dur(l.handshake_age_us / 1e6) + " old" : "up") : "no session") : "unsealed";
  document.body.dataset.health = l.health.state;
}

function addEvents(evs) {
  const list = $("events");
  for (const e of evs) {
    const li = el("li", { class: e.level });
    li.append(el("time", { datetime: new Date(e.t).toISOString() }, clock(e.t)), document.createTextNode(e.text));
    list.prepend(li);
  }
  while (list.children.length > 300) list.lastChild.remove();
}

function drawConfig(s) {
  const dl = $("config");
  dl.textContent = "";
  const row = (k, v) => { dl.append(el("dt", {}, k), el("dd", {}, v)); };
  row("interface", s.interface + " " + s.address + (s.address6 ? " " + s.address6 : ""));
  row("mtu", String(s.mtu));
  row("scheduler", s.scheduler + (s.equalize_ms ? ", equalize " + s.equalize_ms + " ms" : ""));
  row("reorder wait", "≤ " + s.reorder_max_ms + " ms");
  row("encryption", s.encryption);
  for (const p of s.paths || []) {
    const where = p.kind === "serial" ? p.device + " " + p.baud + " bd " + p.framing : p.local + " → " + p.remote + (p.dev ? " dev " + p.dev : "");
    row("path " + p.name, where + (p.bps ? ", " + rate(p.bps) : "") + (p.emulated ? " (emulated)" : ""));
  }
  if (s.shape) row("shaper", "link " + s.shape.rate + ", " + s.shape.classes + " classes, " + s.shape.filters + " filters");
  $("version").textContent = s.version || "";
}

let pending = false;
function redraw() {
  if (pending) return;
  pending = true;
  requestAnimationFrame(() => {
    pending = false;
    const samples = view();
    drawHeader();
    drawThroughput(samples);
    drawLines("c-rtt", samples, "rtt", ms, 1);
    drawLines("c-loss", samples, "loss", (v) => v.toFixed(v < 1 ? 2 : 1), 1);
    drawLines("c-jit", samples, "jit", ms, 1);
    drawLines("c-queue", samples, "qd", ms, 1);
    drawPaths(samples);
    drawClasses(samples);
    document.body.dataset.samples = String(state.short.length);
  });
}

// ---- data ----
function connect() {
  const es = new EventSource("events" + q());
  es.addEventListener("hello", (m) => {
    const d = JSON.parse(m.data);
    state.short = d.history || [];
    state.summary = d.summary;
    state.live = d.live;
    $("iface").textContent = d.interface;
    document.title = d.interface + " · braid";
    $("events").textContent = "";
    addEvents(d.events || []);
    if (d.summary) drawConfig(d.summary);
    document.body.dataset.state = "live";
    redraw();
  });
  es.addEventListener("sample", (m) => {
    const d = JSON.parse(m.data);
    if (d.sample) {
      state.short.push(d.sample);
      if (state.short.length > 600) state.short.shift();
    }
    state.live = d.live;
    addEvents(d.events || []);
    redraw();
    if (closeAfter && ++received >= closeAfter) {
      es.close();
      document.body.dataset.state = "closed";
    }
  });
  es.onerror = () => {
    document.body.dataset.state = "reconnecting";
    const h = $("health");
    h.className = "pill";
    h.textContent = "reconnecting";
  };
}

async function loadLong() {
  try {
    const r = await fetch("api/history" + q("range=long"));
    const d = await r.json();
    state.long = d.samples || [];
  } catch (e) {
    state.long = [];
  }
  redraw();
}

for (const b of document.querySelectorAll(".ranges button")) {
  b.addEventListener("click", () => {
    for (const o of document.querySelectorAll(".ranges button")) o.classList.toggle("on", o === b);
    state.range = b.dataset.range;
    if (state.range === "long") loadLong();
    redraw();
  });
}
window.addEventListener("resize", redraw);
$("metrics-link").href = "metrics" + q();
connect();
