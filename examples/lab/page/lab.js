// The laboratory's page: a thin view over GET /api/simulate. It draws what
// the library decided and plays it out; it decides nothing itself.
"use strict";

const COLOURS = {
  allowed: "#1a9850",
  denied: "#d73027",
  remaining: "#2166ac",
  departed: "#7b3294",
  lane: "#f7f7f7",
  frame: "#dddddd",
  window: "#888888",
  faint: "#cccccc",
  playhead: "#333333",
  base: "#bbbbbb",
};
const LANE_HEIGHT = 112; // CSS pixels; matches lab.css
const COLUMN = 2; // CSS pixels per column of counted requests

const form = document.getElementById("controls");
const lanes = document.getElementById("lanes");
const errorBox = document.getElementById("error");
const clock = document.getElementById("clock");
const spanOut = document.getElementById("span");
const playButton = document.getElementById("play");
const speedSelect = document.getElementById("speed");

const state = {
  data: null, // the last good answer of /api/simulate
  query: "",
  playhead: 0, // microseconds
  playing: false,
  lastFrame: null,
  loads: 0,
  draws: 0,
};
window.lab = state; // for the browser test and the curious

function secs(us) {
  // Millisecond precision: a microsecond of rounding is not news.
  const s = (us / 1e6).toFixed(3).replace(/\.?0+$/, "");
  return s + " s";
}

// The query for the current controls: only the fields the pattern uses.
function currentQuery() {
  const f = new FormData(form);
  const pattern = f.get("pattern");
  const q = new URLSearchParams();
  q.set("pattern", pattern);
  for (const name of ["limit", "period_ms", "burst"]) {
    const v = String(f.get(name) ?? "").trim();
    if (v !== "") q.set(name, v);
  }
  const extra = {
    steady: [],
    edge_burst: [],
    bot_swarm: ["seed"],
    custom: ["seed", "rate", "duration_ms", "burst_size", "jitter_ms"],
  }[pattern] ?? [];
  for (const name of extra) {
    const v = String(f.get(name) ?? "").trim();
    if (v !== "") q.set(name, v);
  }
  return q.toString();
}

function showPatternFields() {
  const pattern = form.elements.pattern.value;
  document.getElementById("custom").hidden = pattern !== "custom";
  document.querySelector(".seeded").hidden = !(pattern === "bot_swarm" || pattern === "custom");
}

function showError(message, field) {
  errorBox.textContent = message;
  errorBox.hidden = false;
  for (const el of form.elements) {
    if (el.name) el.setAttribute("aria-invalid", String(el.name === field));
  }
}

function clearError() {
  errorBox.hidden = true;
  errorBox.textContent = "";
  for (const el of form.elements) {
    if (el.name) el.removeAttribute("aria-invalid");
  }
}

async function load() {
  const query = currentQuery();
  let response;
  try {
    response = await fetch("/api/simulate?" + query);
  } catch (e) {
    showError("The laboratory's server did not answer: " + e.message, null);
    return;
  }
  const body = await response.json().catch(() => null);
  if (!response.ok || body === null) {
    const retry = response.headers.get("retry-after");
    const message = body?.error ?? body?.message ?? `HTTP ${response.status}`;
    showError(message + (retry ? ` (retry after ${retry} s)` : ""), body?.field ?? null);
    return;
  }
  clearError();
  state.data = prepare(body);
  state.query = query;
  document.getElementById("json-link").href = "/api/simulate?" + query;
  buildLanes(state.data);
  state.loads += 1;
  document.body.dataset.loads = String(state.loads);
  document.body.dataset.query = query;
  restart();
}

// Per-request columns once, so that a frame only counts up to the playhead.
function prepare(data) {
  for (const alg of data.algorithms) {
    alg.departs = alg.delay_us.map((d, i) => data.at_us[i] + d);
  }
  return data;
}

function summaryRow(dl, label, field, value, text, over) {
  const dt = document.createElement("dt");
  dt.textContent = label;
  const dd = document.createElement("dd");
  dd.dataset.field = field;
  dd.dataset.value = value === null ? "null" : String(value);
  dd.textContent = text;
  if (over) dd.classList.add("over");
  dl.append(dt, dd);
}

function buildLanes(data) {
  lanes.replaceChildren();
  const period = data.quota.period_us;
  for (const alg of data.algorithms) {
    const s = alg.summary;
    const lane = document.createElement("section");
    lane.className = "lane";
    lane.dataset.algorithm = alg.algorithm;

    const head = document.createElement("div");
    const h2 = document.createElement("h2");
    h2.textContent = alg.label;
    const cap = document.createElement("div");
    cap.className = "live";
    cap.textContent = `capacity ${alg.capacity}`;
    const live = document.createElement("div");
    live.className = "live";
    live.dataset.live = "";
    head.append(h2, cap, live);

    const canvas = document.createElement("canvas");
    canvas.setAttribute("aria-label", `${alg.label}: allowed and denied requests over time`);

    const dl = document.createElement("dl");
    dl.className = "summary";
    summaryRow(dl, "admitted", "admitted", s.admitted, String(s.admitted), false);
    summaryRow(dl, "denied", "denied", s.denied, String(s.denied), false);
    summaryRow(
      dl,
      `worst ${secs(period)} window`,
      "worst_window",
      s.worst_window,
      `${s.worst_window} of ${s.limit}`,
      s.worst_window > s.limit,
    );
    summaryRow(
      dl,
      "first denial",
      "first_denial_us",
      s.first_denial_us,
      s.first_denial_us === null ? "none" : secs(s.first_denial_us),
      false,
    );
    lane.append(head, canvas, dl);
    lanes.append(lane);
  }
  spanOut.textContent = secs(data.span_us);
  sizeCanvases();
}

function sizeCanvases() {
  const ratio = window.devicePixelRatio || 1;
  for (const canvas of document.querySelectorAll("canvas")) {
    const rect = canvas.getBoundingClientRect();
    canvas.width = Math.max(1, Math.round(rect.width * ratio));
    canvas.height = Math.max(1, Math.round(rect.height * ratio));
  }
  draw();
}

// How many requests have arrived by `t` (the arrivals are in time order).
function arrivedBy(atUs, t) {
  let lo = 0;
  let hi = atUs.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (atUs[mid] <= t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function draw() {
  const data = state.data;
  if (!data) return;
  const span = Math.max(1, data.span_us);
  const n = arrivedBy(data.at_us, state.playhead);
  const sections = lanes.querySelectorAll(".lane");
  data.algorithms.forEach((alg, k) => {
    const section = sections[k];
    drawLane(section.querySelector("canvas"), data, alg, n, span);
    let allowed = 0;
    for (let i = 0; i < n; i++) allowed += alg.allowed[i];
    let last = "";
    if (n > 0) {
      const i = n - 1;
      last = alg.allowed[i]
        ? `; last allowed, ${alg.remaining[i]} left` +
          (alg.delay_us[i] > 0 ? `, waits ${secs(alg.delay_us[i])}` : "")
        : `; last denied, retry after ${secs(alg.retry_after_us[i])}`;
    }
    section.querySelector("[data-live]").textContent =
      `so far: ${allowed} allowed, ${n - allowed} denied${last}`;
  });
  drawAxis(document.getElementById("axis"), span);
  clock.textContent = secs(Math.min(state.playhead, data.span_us));
  state.draws += 1;
}

function drawLane(canvas, data, alg, n, span) {
  const ratio = window.devicePixelRatio || 1;
  const ctx = canvas.getContext("2d");
  const w = canvas.width / ratio;
  const h = LANE_HEIGHT;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, h);
  ctx.fillStyle = COLOURS.lane;
  ctx.fillRect(0, 0, w, h);
  ctx.strokeStyle = COLOURS.frame;
  ctx.strokeRect(0.5, 0.5, w - 1, h - 1);
  const x = (t) => (Math.min(t, span) / span) * w;

  // Window boundaries: strong where the algorithm counts in them.
  const period = data.quota.period_us;
  ctx.save();
  ctx.strokeStyle = alg.windows ? COLOURS.window : COLOURS.faint;
  ctx.setLineDash(alg.windows ? [4, 3] : [2, 4]);
  for (let t = period; t < span; t += period) {
    ctx.beginPath();
    ctx.moveTo(Math.round(x(t)) + 0.5, 2);
    ctx.lineTo(Math.round(x(t)) + 0.5, h - 2);
    ctx.stroke();
  }
  ctx.restore();

  // Allowed up, denied down, per column; one scale for every lane.
  const columns = Math.max(1, Math.floor(w / COLUMN));
  const col = (t) => Math.min(columns - 1, Math.floor((t / span) * columns));
  const busiest = columnMax(data, columns, col);
  const up = new Float64Array(columns);
  const down = new Float64Array(columns);
  const left = new Float64Array(columns);
  for (let i = 0; i < n; i++) {
    const c = col(data.at_us[i]);
    if (alg.allowed[i]) {
      up[c] += 1;
      if (alg.algorithm === "leaky_bucket" && alg.departs[i] <= state.playhead && alg.departs[i] < span) {
        left[col(alg.departs[i])] += 1;
      }
    } else {
      down[c] += 1;
    }
  }
  const base = 80;
  const barMax = 26;
  const bar = (count) => Math.max(1, Math.sqrt(count / busiest) * barMax);
  ctx.fillStyle = COLOURS.base;
  ctx.fillRect(0, base, w, 1);
  for (let c = 0; c < columns; c++) {
    if (up[c] > 0) {
      const bh = bar(up[c]);
      ctx.fillStyle = COLOURS.allowed;
      ctx.fillRect(c * COLUMN, base - bh, COLUMN, bh);
    }
    if (down[c] > 0) {
      ctx.fillStyle = COLOURS.denied;
      ctx.fillRect(c * COLUMN, base + 1, COLUMN, bar(down[c]));
    }
    if (left[c] > 0) {
      ctx.fillStyle = COLOURS.departed;
      ctx.fillRect(c * COLUMN, 47, COLUMN, 4);
    }
  }

  // Remaining quota after each request, as steps from full.
  const top = 8;
  const bottom = 44;
  const y = (rem) => bottom - (bottom - top) * Math.min(1, rem / Math.max(1, alg.capacity));
  ctx.strokeStyle = COLOURS.remaining;
  ctx.lineWidth = 1.5;
  ctx.beginPath();
  let lastY = y(alg.capacity);
  ctx.moveTo(0, lastY);
  for (let i = 0; i < n; i++) {
    const xi = x(data.at_us[i]);
    const yi = y(alg.remaining[i]);
    ctx.lineTo(xi, lastY);
    ctx.lineTo(xi, yi);
    lastY = yi;
  }
  ctx.stroke();
  ctx.lineWidth = 1;

  // The playhead.
  if (state.playhead < span) {
    ctx.fillStyle = COLOURS.playhead;
    ctx.fillRect(Math.round(x(state.playhead)), 0, 1, h);
  }
}

// The busiest column of arrivals, cached per width.
function columnMax(data, columns, col) {
  if (data.columnsFor === columns) return data.busiest;
  const counts = new Float64Array(columns);
  for (const t of data.at_us) counts[col(t)] += 1;
  data.busiest = Math.max(1, ...counts);
  data.columnsFor = columns;
  return data.busiest;
}

function drawAxis(canvas, span) {
  const ratio = window.devicePixelRatio || 1;
  const ctx = canvas.getContext("2d");
  const w = canvas.width / ratio;
  ctx.setTransform(ratio, 0, 0, ratio, 0, 0);
  ctx.clearRect(0, 0, w, 28);
  ctx.fillStyle = "#333";
  ctx.strokeStyle = "#666";
  ctx.font = "12px system-ui, sans-serif";
  for (let i = 0; i <= 10; i++) {
    const xi = Math.round((w - 1) * (i / 10)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(xi, 0);
    ctx.lineTo(xi, 5);
    ctx.stroke();
    ctx.textAlign = i === 0 ? "left" : i === 10 ? "right" : "center";
    ctx.fillText(secs(Math.round((span * i) / 10)), xi, 18);
  }
}

// Playback: the timeline plays out at the chosen speed (1x: real time).
function frame(now) {
  if (state.playing && state.data) {
    if (state.lastFrame !== null) {
      const speed = Number(speedSelect.value) || 1;
      state.playhead += (now - state.lastFrame) * 1000 * speed;
    }
    if (state.playhead >= state.data.span_us) {
      state.playhead = state.data.span_us;
      setPlaying(false);
    }
    draw();
  }
  state.lastFrame = now;
  requestAnimationFrame(frame);
}

function setPlaying(playing) {
  state.playing = playing;
  playButton.textContent = playing ? "Pause" : "Play";
}

function restart() {
  state.playhead = 0;
  setPlaying(true);
  draw();
}

playButton.addEventListener("click", () => {
  if (!state.data) return;
  if (!state.playing && state.playhead >= state.data.span_us) state.playhead = 0;
  setPlaying(!state.playing);
});
document.getElementById("step").addEventListener("click", () => {
  if (!state.data) return;
  setPlaying(false);
  const next = arrivedBy(state.data.at_us, state.playhead);
  state.playhead = next < state.data.at_us.length ? state.data.at_us[next] : state.data.span_us;
  draw();
});
document.getElementById("restart").addEventListener("click", restart);
document.getElementById("end").addEventListener("click", () => {
  if (!state.data) return;
  setPlaying(false);
  state.playhead = state.data.span_us;
  draw();
});
form.addEventListener("submit", (e) => {
  e.preventDefault();
  load();
});
form.addEventListener("change", (e) => {
  if (e.target.name === "pattern") showPatternFields();
  load();
});
window.addEventListener("resize", sizeCanvases);

showPatternFields();
load();
requestAnimationFrame(frame);
