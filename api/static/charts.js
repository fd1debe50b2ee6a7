// The Charts panel (GET /api/stats/series, admin only): jobs completed and failed per
// minute, p50/p95 wait and run time, and queue depth by type, over the last hour, drawn
// as plain SVG. The API answers from memory, so a paint costs no call to Temporal.
// Loaded after app.js, whose helpers (h, $, getJson, state) it uses; it adds its own
// section to the page and re-reads every CHART_EVERY_MS while the dashboard runs.
"use strict";

const CHART_EVERY_MS = 15000;
const SVG_NS = "http://www.w3.org/2000/svg";
const CHART_W = 300;
const CHART_H = 90;
const CHART_COLOURS = ["#2b7a3d", "#b3261e", "#1f5fa8", "#a05a00", "#6b3fa0", "#00838f"];

function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs)) el.setAttribute(key, value);
  el.append(...children);
  return el;
}

// One small line chart: `lines` is [{name, values}], a null value is a gap.
function lineChart(title, lines, unit) {
  const values = lines.flatMap((l) => l.values).filter((v) => v !== null);
  const top = Math.max(1, ...values);
  const n = Math.max(1, ...lines.map((l) => l.values.length)) - 1 || 1;
  const x = (i) => ((i / n) * CHART_W).toFixed(1);
  const y = (v) => (CHART_H - (v / top) * CHART_H).toFixed(1);
  const paths = lines.map((line, k) => {
    let d = "";
    let pen = "M";
    line.values.forEach((v, i) => {
      if (v === null) { pen = "M"; return; }
      d += `${pen}${x(i)},${y(v)} `;
      pen = "L";
    });
    return svg("path", { d: d.trim(), fill: "none", stroke: CHART_COLOURS[k % CHART_COLOURS.length],
                         "stroke-width": "1.5", "data-series": line.name });
  });
  const chart = svg("svg", { viewBox: `0 0 ${CHART_W} ${CHART_H}`, class: "chart",
                             role: "img", "aria-label": title, preserveAspectRatio: "none" },
                    svg("line", { x1: 0, y1: CHART_H, x2: CHART_W, y2: CHART_H, stroke: "#ccc" }),
                    ...paths);
  const legend = lines.map((line, k) => h("span", { class: "legend" },
    h("span", { class: "swatch", style: `background:${CHART_COLOURS[k % CHART_COLOURS.length]}` }),
    ` ${line.name}`));
  return h("figure", { class: "chart-box", "data-chart": title },
    h("figcaption", {}, `${title} `, h("span", { class: "muted" }, `(max ${top}${unit})`)),
    chart, h("div", { class: "chart-legend" }, ...legend));
}

function renderCharts(series) {
  const hour = series.hour;
  const ms = (v) => (v === null ? "–" : formatDuration(v));
  $("#charts-summary").textContent =
    `last hour: wait p50 ${ms(hour.wait_p50_ms)}, p95 ${ms(hour.wait_p95_ms)}; ` +
    `run p50 ${ms(hour.run_p50_ms)}, p95 ${ms(hour.run_p95_ms)}`;
  const depth = Object.entries(series.queue_depth).map(([name, values]) => ({ name, values }));
  $("#chart-list").replaceChildren(
    lineChart("Jobs per minute", [
      { name: "completed", values: series.completed },
      { name: "failed", values: series.failed },
    ], ""),
    lineChart("Wait (submit → running)", [
      { name: "p50", values: series.wait_p50_ms },
      { name: "p95", values: series.wait_p95_ms },
    ], " ms"),
    lineChart("Run time", [
      { name: "p50", values: series.run_p50_ms },
      { name: "p95", values: series.run_p95_ms },
    ], " ms"),
    lineChart("Queue depth by type", depth.length ? depth : [{ name: "no types", values: [] }], ""),
  );
}

async function loadCharts() {
  const section = $("#charts");
  const allowed = state.running && state.me && state.me.role === "admin";
  section.hidden = !allowed;
  if (!allowed || document.hidden) return;
  renderCharts(await getJson("/api/stats/series"));
}

function installCharts() {
  const section = h("section", { id: "charts", class: "gates", "aria-labelledby": "charts-heading",
                                 hidden: "" },
    h("h2", { id: "charts-heading" }, "Charts ", h("span", { id: "charts-summary", class: "muted" })),
    h("div", { id: "chart-list", class: "chart-list" }));
  $("#app").append(section);
  const tick = async () => {
    await guard(loadCharts);
    setTimeout(tick, CHART_EVERY_MS);
  };
  // The first read once the dashboard has signed in (state.running), then on a timer.
  const first = setInterval(() => {
    if (state.running && state.me) { clearInterval(first); tick(); }
  }, 200);
}

document.addEventListener("DOMContentLoaded", installCharts);
