/* Renders servesim.views Sections (KPIs, verdicts, histograms, series, tables) into the page.
   Everything drawn here was binned and down-sampled by the server; this file only draws. */
"use strict";

const SS = (window.SS = window.SS || {});

SS.el = function (tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") node.className = v;
    else if (k === "text") node.textContent = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return node;
};
const el = SS.el;

SS.fmt = function (value, kind, decimals) {
  if (value === null || value === undefined) return "–";
  if (kind === "bool" || typeof value === "boolean") return value ? "yes" : "no";
  if (kind === "str" || typeof value === "string") return String(value);
  if (kind === "pct") {
    const d = decimals ?? 1;  // thousands separated, like every other number: "+108,083.5 %"
    return (value * 100).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }) + " %";
  }
  if (kind === "int") return Math.round(value).toLocaleString("en-US");
  if (decimals === undefined && Number.isInteger(value)) return value.toLocaleString("en-US");  // 8, not "8.00"
  const d = decimals ?? (Math.abs(value) >= 100 ? 0 : Math.abs(value) >= 10 ? 1 : 2);
  return Number(value).toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d });
};

SS.unitText = (unit) => (unit ? " " + unit : "");

let chartCount = 0;
const PLOT_CONFIG = { displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"] };
const LAYOUT = {
  margin: { l: 52, r: 12, t: 30, b: 40 },
  font: { size: 11, family: "system-ui, sans-serif" },
  paper_bgcolor: "#fff",
  plot_bgcolor: "#fff",
  showlegend: false,
};

function axisTitle(label, unit) {
  return unit ? `${label} (${unit})` : label || "";
}

/* A chart with nothing to draw is one line saying so, not an empty panel. */
function emptyChart(container, key, title, why) {
  container.append(el("p", { class: "chart-empty", "data-key": key, text: `${title}: ${why}` }));
  return null;
}

/* Legends sit right of the plot, outside the data (never over the bars or lines). */
const LEGEND_OUTSIDE = { x: 1.02, xanchor: "left", y: 1, yanchor: "top" };
const MARGIN_LEGEND = { l: 52, r: 12, t: 30, b: 40 };

function newChart(container, title) {
  const div = el("div", { class: "chart", id: `chart-${++chartCount}`, role: "img", "aria-label": title });
  container.append(div);
  return div;
}

SS.plot = function (div, traces, layout) {
  if (!window.Plotly) {
    div.textContent = "Plotly.js did not load";
    return;
  }
  window.Plotly.newPlot(div, traces, Object.assign({}, LAYOUT, layout), PLOT_CONFIG);
};

SS.histogram = function (container, h) {
  if (!h.count || h.edges.length < 2) return emptyChart(container, h.key, h.title, "no samples");
  const div = newChart(container, h.title);
  div.dataset.key = h.key;
  const centers = [];
  const widths = [];
  for (let i = 0; i + 1 < h.edges.length; i++) {
    centers.push((h.edges[i] + h.edges[i + 1]) / 2);
    widths.push(h.edges[i + 1] - h.edges[i]);
  }
  const shapes = [];
  const annotations = [];
  const lo = h.edges[0];
  const hi = h.edges[h.edges.length - 1];
  if (h.slo !== null && h.slo !== undefined) {
    if (h.slo >= lo && h.slo <= hi) {
      shapes.push({ type: "line", x0: h.slo, x1: h.slo, yref: "paper", y0: 0, y1: 1, line: { color: "#c62828", width: 2, dash: "dash" } });
      annotations.push({ x: h.slo, yref: "paper", y: 1, text: `SLO ${SS.fmt(h.slo)}`, showarrow: false, xanchor: "left", font: { color: "#c62828" } });
    } else {
      // Off the axis: keep the axis on the data and say where the SLO is.
      const above = h.slo > hi;
      annotations.push({ xref: "paper", x: above ? 1 : 0, yref: "paper", y: 1, xanchor: above ? "right" : "left", showarrow: false,
        text: above ? `SLO ${SS.fmt(h.slo)} → (every sample below it)` : `← SLO ${SS.fmt(h.slo)} (every sample above it)`, font: { color: "#c62828" }, bgcolor: "rgba(255,255,255,0.85)" });
    }
  }
  if (h.reference !== null && h.reference !== undefined) {
    shapes.push({ type: "line", x0: h.reference, x1: h.reference, yref: "paper", y0: 0, y1: 1, line: { color: "#c62828", width: 2, dash: "dash" } });
    annotations.push({ x: h.reference, yref: "paper", y: 1, text: h.reference_label || "limit", showarrow: false, xanchor: "right", font: { color: "#c62828" }, bgcolor: "rgba(255,255,255,0.85)" });
  }
  const counted = h.count_label || "requests";
  const sub = h.p50 !== null && h.p50 !== undefined ? ` · p50 ${SS.fmt(h.p50)} · p99 ${SS.fmt(h.p99)}${SS.unitText(h.unit)}` : ` · ${h.count.toLocaleString("en-US")} ${counted}`;
  SS.plot(
    div,
    [{ type: "bar", name: counted, x: centers, y: h.counts, width: widths, marker: { color: "#2457c5" }, hovertemplate: `%{x:.4g}${SS.unitText(h.unit)}: %{y:,} ${counted}<extra></extra>` }],
    {
      title: { text: h.title + sub, font: { size: 12 } },
      xaxis: { title: { text: axisTitle(h.label || h.title, h.unit) }, range: [lo, hi] },
      yaxis: { title: { text: counted }, tickformat: ",d", rangemode: "tozero" },
      bargap: 0.02,
      shapes,
      annotations,
    }
  );
  return div;
};


/* Measured and simulated on shared bins (views.measured): two bar traces, overlaid. */
SS.overlayHistogram = function (container, m, sim) {
  const div = newChart(container, m.title.split(":")[0] + ": measured vs simulated");
  const bars = (h, name, color) => {
    const x = [];
    const width = [];
    for (let i = 0; i + 1 < h.edges.length; i++) {
      x.push((h.edges[i] + h.edges[i + 1]) / 2);
      width.push(h.edges[i + 1] - h.edges[i]);
    }
    const total = h.counts.reduce((a, b) => a + b, 0) || 1;
    return { type: "bar", name, x, width, y: h.counts.map((c) => c / total), opacity: 0.55, marker: { color }, hovertemplate: `${name} %{x:.4g}: %{y:.1%}<extra></extra>` };
  };
  SS.plot(div, [bars(m, "measured", "#c05600"), bars(sim, "simulated", "#2457c5")], {
    title: { text: `${m.title.split(":")[0]}: measured (${m.count.toLocaleString("en-US")}) vs simulated (${sim.count.toLocaleString("en-US")})`, font: { size: 12 } },
    barmode: "overlay", bargap: 0.02, showlegend: true, legend: LEGEND_OUTSIDE, margin: MARGIN_LEGEND,
    xaxis: { title: { text: axisTitle(m.label || m.title.split(":")[0].replace(/ distribution$/, ""), m.unit) } }, yaxis: { title: { text: "share of the sample" }, tickformat: ".0%" },
  });
  div.dataset.overlay = m.key.split(".")[0];
  return div;
};

/* Items keyed "<metric>.measured" / "<metric>.simulated" as [measured, simulated] pairs; the rest alone. */
function pairUp(items) {
  const byKey = Object.fromEntries(items.map((x) => [x.key, x]));
  const out = [];
  for (const x of items) {
    if (x.key.endsWith(".simulated") && byKey[x.key.replace(/\.simulated$/, ".measured")]) continue;
    const twin = x.key.endsWith(".measured") ? byKey[x.key.replace(/\.measured$/, ".simulated")] : null;
    out.push(twin ? [x, twin] : [x]);
  }
  return out;
}

/* Series keyed "<group>.<part>" (e.g. queue_by_reason.kv_cache) as one stacked chart. */
SS.stacked = function (container, name, members) {
  const title = members[0].title.split(":")[0];
  if (members.every((m) => m.y.every((v) => v === 0))) return emptyChart(container, name, title, "zero throughout the run");
  const div = newChart(container, title);
  const colors = ["#c62828", "#6a1b9a", "#2457c5", "#9e9e9e", "#1a7f37"];
  SS.plot(div, members.map((s, i) => ({
    type: "scatter", mode: "lines", stackgroup: name, line: { shape: "hv", width: 0.5, color: colors[i % colors.length] },
    name: s.title.split(": ").slice(1).join(": ") || s.key, x: s.x, y: s.y, hovertemplate: "%{x:.4g} s: %{y:.3g}<extra>%{fullData.name}</extra>",
  })), {
    title: { text: title, font: { size: 12 } }, showlegend: true, legend: LEGEND_OUTSIDE, margin: MARGIN_LEGEND,
    xaxis: { title: { text: axisTitle(members[0].x_label, members[0].x_unit) } }, yaxis: { title: { text: members[0].y_label }, rangemode: "tozero" },
  });
  div.dataset.group = name;
  return div;
};

SS.series = function (container, s, extra) {
  if (!s.x || !s.x.length) return emptyChart(container, s.key, s.title, "no data");
  // a series that is zero throughout (no preemptions, nobody waiting) says so in a line: a flat panel shows nothing
  if (!(s.lines || []).length && !(extra && extra.traces && extra.traces.length) && s.y.every((v) => v === 0)) return emptyChart(container, s.key, s.title, "zero throughout the run");
  const div = newChart(container, s.title);
  const measured = s.key.endsWith(".measured");
  const cats = s.categories && s.categories.length === s.x.length ? s.categories : null;
  const xs = cats || s.x;
  const trace = { x: xs, y: s.y, name: measured ? "measured" : s.name || s.y_label, hovertemplate: `%{x}: %{y:,.4g}${SS.unitText(s.y_unit)}<extra>%{fullData.name}</extra>` };
  if (measured) trace.marker = { color: "#c05600" };
  if (s.kind === "bar") trace.type = "bar";
  else if (s.kind === "scatter") Object.assign(trace, { type: "scatter", mode: "markers" });
  else Object.assign(trace, { type: "scatter", mode: measured ? "lines+markers" : "lines", line: { shape: s.kind === "step" ? "hv" : "linear", width: 1.5, color: measured ? "#c05600" : undefined } });
  div.dataset.key = s.key;
  const lines = (s.lines || []).map((ln) => s.kind === "bar"
    ? { type: "bar", x: xs, y: ln.y, name: ln.label, hovertemplate: trace.hovertemplate }  // grouped next to the first (stacked on it: s.stacked)
    : { type: "scatter", mode: "lines", x: ln.x || xs, y: ln.y, name: ln.label, line: { dash: "dot", width: 1.5 } });  // a line may have its own x (Line.x: down-sampled on its own)
  const traces = [trace, ...lines, ...((extra && extra.traces) || [])];
  const shapes = [];
  const annotations = [];
  SS.spanShapes(s, shapes, annotations);
  for (const m of s.marks || []) {
    shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: m.x, x1: m.x, line: { color: "#5b6475", width: 1.2, dash: "dot" } });
    annotations.push({ yref: "paper", y: 1, x: m.x, text: m.label, showarrow: false, textangle: -90, xanchor: "right", yanchor: "top", font: { size: 10, color: "#5b6475" } });
  }
  if (s.reference !== null && s.reference !== undefined) {
    shapes.push({ type: "line", xref: "paper", x0: 0, x1: 1, y0: s.reference, y1: s.reference, line: { color: "#c62828", width: 1.5, dash: "dash" } });
    annotations.push({ xref: "paper", x: 1, y: s.reference, text: s.reference_label || "limit", showarrow: false, xanchor: "right", yanchor: "bottom", font: { color: "#c62828" } });
  }
  const layout = {
    shapes, annotations,
    title: { text: s.title, font: { size: 12 } },
    xaxis: { title: { text: axisTitle(s.x_label, s.x_unit) }, type: cats ? "category" : undefined },
    yaxis: { title: { text: axisTitle(s.y_label, s.y_unit) }, type: s.log_y ? "log" : undefined, rangemode: !s.log_y && Math.min(...s.y) >= 0 ? "tozero" : undefined },
  };
  if (lines.length) Object.assign(layout, { barmode: s.stacked ? "stack" : "group", showlegend: true, legend: LEGEND_OUTSIDE, margin: MARGIN_LEGEND });
  SS.plot(div, traces, Object.assign(layout, (extra && extra.layout) || {}));
  return div;
};

/* Shaded stretches of x (a replica's outage, views.fleet), labelled at their top left. */
SS.spanShapes = function (s, shapes, annotations) {
  for (const sp of s.spans || []) {
    shapes.push({ type: "rect", yref: "paper", y0: 0, y1: 1, x0: sp.x0, x1: sp.x1, layer: "below", line: { width: 0 }, fillcolor: "rgba(198, 40, 40, 0.10)" });
    annotations.push({ yref: "paper", y: 1, x: sp.x0, text: sp.label.split("; ").join("<br>"), showarrow: false, xanchor: "left", yanchor: "top", align: "left", font: { size: 10, color: "#c62828" }, bgcolor: "rgba(255, 255, 255, 0.8)" });
  }
};

/* A cluster run (views.fleet): the fleet's section or one replica's, picked with a selector
   (the same single-run charts for each), then the other sections (the failure timeline). */
SS.clusterRun = function (container, sections, fleetOpts) {
  const fleet = sections.find((s) => s.key === "fleet");
  const replicas = sections.filter((s) => s.key.startsWith("replica."));
  if (!fleet) { for (const s of sections) SS.section(container, s); return; }
  const select = el("select", { id: "replica-select" },
    el("option", { value: "fleet" }, `the whole fleet (${replicas.length} replicas)`),
    replicas.map((s) => el("option", { value: s.key }, s.title)));
  const view = el("div", { id: "cluster-view" });
  const show = () => {
    for (const div of view.querySelectorAll(".chart")) if (window.Plotly) window.Plotly.purge(div);
    view.replaceChildren();
    const s = sections.find((x) => x.key === select.value) || fleet;
    SS.section(view, s, s === fleet ? fleetOpts : {});
    view.dataset.showing = s.key;
  };
  select.addEventListener("change", show);
  container.append(el("div", { class: "cluster-picker" }, el("label", { for: "replica-select" }, "Charts of "), select), view);
  show();
  for (const s of sections) if (s !== fleet && !replicas.includes(s)) SS.section(container, s);
};

SS.table = function (t) {
  const wrap = el("div", { class: "table-wrap" });
  const table = el("table", { "data-key": t.key });
  if (t.title) table.append(el("caption", { text: t.title }));
  const head = el("tr");
  for (const c of t.columns) {
    const numeric = c.kind !== "str" && c.kind !== "bool";
    head.append(el("th", { scope: "col", class: numeric ? "num" : null, title: c.help || null }, c.label + (c.unit ? ` (${c.unit})` : "")));
  }
  table.append(el("thead", {}, head));
  const body = el("tbody");
  for (const row of t.rows) {
    const tr = el("tr");
    row.forEach((v, i) => {
      const c = t.columns[i] || { kind: "str" };
      const numeric = c.kind !== "str" && c.kind !== "bool";
      const cls = [numeric ? "num" : null, v === false && c.kind === "bool" ? "bad" : null].filter(Boolean).join(" ") || null;
      tr.append(el("td", { class: cls }, SS.fmt(v, c.kind, c.decimals)));
    });
    body.append(tr);
  }
  table.append(body);
  wrap.append(table);
  if (t.notes && t.notes.length) wrap.append(el("ul", { class: "notes" }, t.notes.map((n) => el("li", { text: n }))));
  return wrap;
};

/* A sparkline (the KPI over the run's time): an SVG polyline, drawn without Plotly. */
SS.sparkline = function (line, label) {
  const NS = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(NS, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 100 24");
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const ys = line.y;
  const lo = Math.min(...ys), hi = Math.max(...ys);
  const x0 = line.x[0], x1 = line.x[line.x.length - 1];
  const px = (x) => (x1 > x0 ? ((x - x0) / (x1 - x0)) * 100 : 50);
  const py = (y) => (hi > lo ? 22 - ((y - lo) / (hi - lo)) * 20 : 12);
  svg.setAttribute("aria-label", `${label} over time: from ${SS.fmt(ys[0])} to ${SS.fmt(ys[ys.length - 1])}, between ${SS.fmt(lo)} and ${SS.fmt(hi)}`);
  const poly = document.createElementNS(NS, "polyline");
  poly.setAttribute("points", line.x.map((x, i) => `${px(x).toFixed(2)},${py(ys[i]).toFixed(2)}`).join(" "));
  poly.setAttribute("vector-effect", "non-scaling-stroke");
  svg.append(poly);
  return svg;
};

SS.kpi = function (k, spark) {
  const defId = `def-${k.key}-${++chartCount}`;
  const pctUnit = k.unit === "%";
  const def = el("div", { class: "def", id: defId, hidden: true, text: k.help || (SS.glossary[k.key] || {}).definition || "" });
  const tile = el(
    "div",
    { class: `kpi ${k.verdict === "pass" ? "pass" : k.verdict === "fail" ? "fail" : ""}`, "data-key": k.key },
    el("div", { class: "label" }, k.label),
    el("div", { class: "value" }, pctUnit ? SS.fmt(k.value, "pct", k.decimals).replace(" %", "") : SS.fmt(k.value, "float", k.decimals), el("span", { class: "unit" }, k.value === null ? "" : SS.unitText(k.unit))),
    k.slo !== null && k.slo !== undefined
      ? el("div", { class: "slo" }, `SLO ${SS.fmt(k.slo, "float", k.decimals)}${SS.unitText(k.unit)} · ${k.verdict === "pass" ? "met" : k.verdict === "fail" ? "missed" : ""}`)
      : null,
    el("button", {
      class: "q", type: "button", "aria-label": `What is ${k.label}?`, "aria-expanded": "false", "aria-controls": defId,
      onclick: (e) => {
        def.hidden = !def.hidden;
        e.currentTarget.setAttribute("aria-expanded", String(!def.hidden));
      },
    }, "?"),
    def
  );
  if (spark && spark.y && spark.y.length > 1) tile.append(SS.sparkline(spark, k.label));
  return tile;
};

SS.verdict = function (v) {
  return el("div", { class: `verdict ${v.status}`, "data-key": v.key }, el("strong", {}, v.label), v.text);
};

/* A Section: title, text, verdicts, KPI tiles, histograms, series, tables (in that order). */
SS.section = function (container, s, opts) {
  opts = opts || {};
  const box = el("section", { class: "section", "data-section": s.key, "aria-label": s.title });
  box.append(el("h2", { text: s.title }));
  for (const t of s.text || []) box.append(el("p", { class: "text", text: t }));
  for (const v of s.verdicts || []) box.append(SS.verdict(v));
  if (s.kpis && s.kpis.length) {
    const kpis = el("div", { class: "kpis" });
    for (const k of s.kpis) kpis.append(SS.kpi(k, (opts.sparklines || {})[k.key]));
    box.append(kpis);
  }
  container.append(box);
  if (opts.before) opts.before(box, s);
  const hist = (s.histograms || []).filter((h) => !(opts.skipHistograms || []).includes(h.key));
  const series = (s.series || []).filter((x) => !(opts.skipSeries || []).includes(x.key));
  if (hist.length || series.length) {
    const charts = el("div", { class: "charts" });
    box.append(charts);
    for (const [h, twin] of pairUp(hist)) twin ? SS.overlayHistogram(charts, h, twin) : SS.histogram(charts, h);
    const groups = {};
    for (const x of series) {
      const m = /^([a-z_]+)\.(?!measured$|simulated$)[a-z_]+$/.exec(x.key);
      if (m) (groups[m[1]] = groups[m[1]] || []).push(x);
    }
    for (const [name, members] of Object.entries(groups)) SS.stacked(charts, name, members);
    for (const [x, twin] of pairUp(series.filter((x) => !/^([a-z_]+)\.(?!measured$|simulated$)[a-z_]+$/.test(x.key)))) {
      if (!twin) { SS.series(charts, x, opts.seriesExtra && opts.seriesExtra[x.key]); continue; }
      const div = SS.series(charts, x, { traces: [{ type: "scatter", mode: "lines+markers", name: "simulated", x: twin.x, y: twin.y, line: { color: "#2457c5" } }], layout: { showlegend: true, legend: LEGEND_OUTSIDE, margin: MARGIN_LEGEND } });
      if (!div) continue;
      div.dataset.overlay = x.key.split(".")[0];
    }
  }
  for (const t of s.tables || []) if (!(opts.skipTables || []).includes(t.key)) box.append(SS.table(t));
  return box;
};

SS.glossary = {};

/* ------------------------------------------------------------------ runs overlaid (issue 30)
   A Series whose `lines` carry their own x (views.compare.overlay_view, views.compare_studies):
   one solid line per run, in its own colour, named after the run (label and trace); marks
   (the SLO, each sweep's knee) as vertical lines; the legend under the plot, off the data. */
const RUN_COLORS = ["#2457c5", "#c05600", "#1a7f37", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#9e9d24", "#ad1457", "#455a64", "#ef6c00", "#283593", "#2e7d32"];

SS.overlay = function (container, s) {
  if (!s.x || !s.x.length) return emptyChart(container, s.key, s.title, "no data");
  const div = newChart(container, s.title);
  div.dataset.key = s.key;
  div.classList.add("overlay");
  const shape = s.kind === "step" ? "hv" : "linear";
  const runs = [{ name: s.name || s.y_label, x: s.x, y: s.y }, ...(s.lines || []).map((ln) => ({ name: ln.label, x: ln.x || s.x, y: ln.y }))];
  const unit = SS.unitText(s.y_unit);
  const traces = runs.map((r, i) => ({
    type: "scatter", mode: s.key === "fronts" ? "lines+markers" : "lines", name: r.name, x: r.x, y: r.y,
    line: { shape, width: 1.8, color: RUN_COLORS[i % RUN_COLORS.length] },
    hovertemplate: `%{x:,.4g}${SS.unitText(s.x_unit)}: %{y:,.4g}${unit}<extra>%{fullData.name}</extra>`,
  }));
  const shapes = [];
  const annotations = [];
  (s.marks || []).forEach((m, i) => {
    const slo = m.label.startsWith("SLO");
    const color = slo ? "#c62828" : "#5b6475";
    shapes.push({ type: "line", yref: "paper", y0: 0, y1: 1, x0: m.x, x1: m.x, line: { color, width: slo ? 2 : 1.2, dash: slo ? "dash" : "dot" } });
    annotations.push({ yref: "paper", y: 1 - 0.12 * (i % 4), x: m.x, text: m.label, showarrow: false, xanchor: "left", yanchor: "top", font: { size: 10, color }, bgcolor: "rgba(255,255,255,0.85)" });
  });
  const allY = runs.flatMap((r) => r.y);
  div.style.height = `${330 + 20 * runs.length}px`;  // room for the legend under the plot
  SS.plot(div, traces, {
    title: { text: s.title, font: { size: 12 } },
    shapes, annotations,
    showlegend: true,
    legend: { orientation: "h", x: 0, xanchor: "left", y: -0.24, yanchor: "top", font: { size: 10 } },
    margin: { l: 56, r: 12, t: 30, b: 70 + 20 * runs.length },
    xaxis: { title: { text: axisTitle(s.x_label, s.x_unit) } },
    yaxis: { title: { text: axisTitle(s.y_label, s.y_unit) }, type: s.log_y ? "log" : undefined,
      rangemode: !s.log_y && Math.min(...allY) >= 0 ? "tozero" : undefined,
      tickformat: s.y_label.startsWith("share of requests") ? ".0%" : undefined },
  });
  return div;
};

/* A Section of overlays: its title, text and tables, then every series as an overlay. */
SS.overlaySection = function (container, s) {
  const box = el("section", { class: "section overlays", "data-section": s.key, "aria-label": s.title });
  box.append(el("h2", { text: s.title }));
  for (const t of s.text || []) box.append(el("p", { class: "text", text: t }));
  for (const t of s.tables || []) box.append(SS.table(t));
  container.append(box);
  if ((s.series || []).length) {
    const charts = el("div", { class: "charts" });
    box.append(charts);
    for (const x of s.series) SS.overlay(charts, x);
  }
  return box;
};

/* Which sections of a comparison are overlays (drawn by SS.overlaySection). */
SS.isOverlaySection = (s) => ["runs_overlay", "sweep_compare", "study_compare"].includes(s.key);
