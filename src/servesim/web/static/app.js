/* The workbench page: forms, jobs (server-sent events), and the tabs. No inline script (CSP). */
"use strict";

(function () {
  const SS = window.SS;
  const el = SS.el;
  const $ = (id) => document.getElementById(id);
  const state = { catalog: null, traceId: localStorage.getItem("servesim.trace") || null, traces: [] };

  /* ------------------------------------------------------------------ API */
  class ApiError extends Error {
    constructor(problem) {
      super(problem.detail || problem.title || "request failed");
      this.problem = problem;
    }
  }
  async function api(path, opts) {
    opts = opts || {};
    const init = { method: opts.method || "GET", headers: {}, credentials: "same-origin" };
    if (opts.json !== undefined) {
      init.body = JSON.stringify(opts.json);
      init.headers["content-type"] = "application/json";
    } else if (opts.body !== undefined) {
      init.body = opts.body;
      init.headers["content-type"] = opts.type || "application/octet-stream";
    }
    const r = await fetch(path, init);
    if (r.status === 204) return null;
    const ctype = r.headers.get("content-type") || "";
    const data = ctype.includes("json") ? await r.json() : await r.text();
    if (!r.ok) throw new ApiError(typeof data === "object" ? data : { status: r.status, detail: String(data).slice(0, 300) });
    return data;
  }
  function toast(message) {
    const t = $("toast");
    t.textContent = message;
    t.hidden = false;
    clearTimeout(toast.timer);
    toast.timer = setTimeout(() => (t.hidden = true), 6000);
  }
  function clear(node, ...children) {
    node.replaceChildren(...children);
    return node;
  }
  function problemBlock(err) {
    const p = err.problem || { detail: String(err) };
    const box = el("div", { class: "section", role: "alert" }, el("p", { class: "error-text" }, el("strong", {}, `${p.status || ""} ${p.title || "Error"}: `), p.detail || ""));
    const rows = (p.errors || []).filter((e) => e && (e.row !== undefined || e.field !== undefined));
    if (rows.length) {
      const hasRow = rows.some((e) => e.row !== undefined && e.row !== null);
      box.append(SS.table({
        key: "errors", title: hasRow ? "Rejected rows" : "Problems", notes: [],
        columns: [
          ...(hasRow ? [{ key: "row", label: "row", unit: null, kind: "int", decimals: 0 }] : []),
          { key: "field", label: "field", unit: null, kind: "str", decimals: 0 },
          { key: "reason", label: "reason", unit: null, kind: "str", decimals: 0 },
        ],
        rows: rows.map((e) => [...(hasRow ? [e.row] : []), e.field ?? "–", e.reason ?? ""]),
      }));
    }
    return box;
  }

  /* ------------------------------------------------------------------ tabs */
  const tabs = Array.from(document.querySelectorAll('[role="tab"]'));
  function showTab(tab, focus) {
    for (const t of tabs) {
      const on = t === tab;
      t.setAttribute("aria-selected", String(on));
      t.tabIndex = on ? 0 : -1;
      $(t.getAttribute("aria-controls")).hidden = !on;
    }
    if (focus) tab.focus();
    placeShared(tab);
    location.hash = tab.id.replace("tab-", "");
    // Plotly sizes charts when they become visible.
    if (window.Plotly) for (const c of $(tab.getAttribute("aria-controls")).querySelectorAll(".js-plotly-plot")) window.Plotly.Plots.resize(c);
    if (tab.id === "tab-history") loadHistory();
    if (tab.id === "tab-compare") loadCompareChoices();
    if (tab.id === "tab-measured") loadBenches($("bench-pick").value);
  }
  /* The ONE deployment panel and the ONE SLO panel: moved into the shown tab's form column, so
     Run, Throughput curve, Tune, Advisor (and Measured: the deployment) use what was set once. */
  function placeShared(tab) {
    const panel = $(tab.getAttribute("aria-controls"));
    for (const name of ["deployment", "slo"]) {
      const slot = panel.querySelector(`.shared-slot[data-slot="${name}"]`);
      const box = $(`${name}-panel`);
      if (slot && box && box.parentElement !== slot) slot.append(box);
    }
  }
  tabs.forEach((t, i) => {
    t.addEventListener("click", () => showTab(t));
    t.addEventListener("keydown", (e) => {
      const d = e.key === "ArrowRight" ? 1 : e.key === "ArrowLeft" ? -1 : 0;
      if (d) showTab(tabs[(i + d + tabs.length) % tabs.length], true);
      if (e.key === "Home") showTab(tabs[0], true);
      if (e.key === "End") showTab(tabs[tabs.length - 1], true);
    });
  });

  /* ------------------------------------------------------------------ form fields from the catalog */
  function inputFor(spec, prefix, override) {
    const id = `${prefix}-${spec.name}`;
    const value = override !== undefined ? override : spec.default;
    const help = el("p", { class: "field-help", id: `${id}-help` }, spec.help + (spec.vllm === false ? " (servesim only)" : "") + (spec.default !== null && spec.default !== undefined ? ` Default: ${spec.default}.` : ""));
    if (spec.type === "boolean") {
      const box = el("input", { type: "checkbox", id, name: spec.name, "aria-describedby": `${id}-help`, "data-type": "boolean", "data-default": value ? "1" : "" });
      box.checked = !!value;
      return el("div", {}, el("label", { class: "check", for: id }, box, el("code", {}, spec.flag)), help);
    }
    let input;
    if (spec.enum) {
      input = el("select", { id, name: spec.name, "aria-describedby": `${id}-help`, "data-type": "string" }, spec.enum.map((v) => el("option", { value: v, selected: v === value }, v)));
    } else {
      const numeric = spec.type === "integer" || spec.type === "number";
      input = el("input", {
        id, name: spec.name, "aria-describedby": `${id}-help`,
        type: numeric ? "number" : "text", step: spec.type === "number" ? "any" : null,
        min: spec.minimum ?? null, max: spec.maximum ?? null,
        placeholder: spec.nullable ? "not set" : null, "data-type": spec.type, "data-nullable": spec.nullable ? "1" : null,
        "data-default": value === null || value === undefined ? "" : String(value),
      });
      input.value = value === null || value === undefined ? "" : String(value);
    }
    return el("div", {}, el("label", { for: id }, el("code", {}, spec.flag)), input, help);
  }
  /* A field the browser cannot read as its type ("abc" in a number) is a form error, never a
     silent default: the field is marked and the error names it. */
  function fieldError(input) {
    const v = input.validity;
    if (!v || v.valid) return null;
    if (v.badInput) return input.dataset.type === "integer" ? "not a whole number" : "not a number";
    if (v.rangeUnderflow) return `below the minimum ${input.min}`;
    if (v.rangeOverflow) return `above the maximum ${input.max}`;
    if (v.stepMismatch) return "not a whole number";
    return input.validationMessage || "invalid";
  }
  /* ``onlyTouched``: the engine's fields send only what the user set (typed, or restored from a
     run): the server fills the rest with what vllm serve runs on the GPU, as the CLI does, and the
     run says which defaults it applied. */
  function readFields(container, onlyTouched) {
    const out = {};
    const errors = [];
    for (const input of container.querySelectorAll("input[name], select[name]")) {
      if (onlyTouched && !input.dataset.touched) continue;
      const t = input.dataset.type;
      const bad = fieldError(input);
      input.toggleAttribute("aria-invalid", !!bad);
      if (bad) { errors.push({ field: input.name, reason: bad }); continue; }
      if (t === "integer" && input.value !== "" && !/^-?\d+$/.test(input.value.trim())) { errors.push({ field: input.name, reason: "not a whole number" }); input.setAttribute("aria-invalid", "true"); continue; }
      if (t === "boolean") out[input.name] = input.checked;
      else if (input.value === "") { if (input.dataset.nullable) out[input.name] = null; }
      else if (t === "integer") out[input.name] = parseInt(input.value, 10);
      else if (t === "number") out[input.name] = parseFloat(input.value);
      else out[input.name] = input.value;
    }
    if (errors.length) throw new ApiError({ status: 422, title: "Invalid settings", detail: errors.map((e) => `${e.field}: ${e.reason}`).join("; "), errors });
    return out;
  }
  /* The GPU's defaults (what vllm serve applies there, GET /api/defaults) go into the fields the
     user has not typed in, and into their help text, so the form shows what a run will use. */
  async function showGpuDefaults() {
    const gpu = $("dep-gpu") && $("dep-gpu").value;
    if (!gpu) return;
    let d;
    try { d = await api(`/api/defaults?gpu=${encodeURIComponent(gpu)}`); } catch (e) { return; }
    for (const [name, value] of Object.entries(d.engine)) {
      const input = $(`eng-${name}`);
      if (!input) continue;
      if (!input.dataset.touched) input.value = String(value);
      const help = $(`eng-${name}-help`);
      if (help) help.textContent = help.textContent.replace(/ Default: .*$/, "") + ` Default: ${SS.fmt(value, "int")} (vllm serve on ${gpu}).`;
    }
  }
  /* Put a run's settings back into the Run tab's form (after a reload, or "Load these settings"). */
  function fillFields(prefix, values) {
    for (const [k, v] of Object.entries(values || {})) {
      const input = $(`${prefix}-${k}`);
      if (!input) continue;
      if (input.type === "checkbox") input.checked = !!v;
      else input.value = v === null || v === undefined ? "" : String(v);
      input.dataset.touched = "1";
      input.removeAttribute("aria-invalid");
    }
  }
  /* A run's deployment and SLO (its params: today's body shape, the server translates older
     runs) back into the shared panels: after a reload, or "Load these settings". */
  function loadSettings(params) {
    if (!params || !params.deployment) return;
    for (const box of [$("engine-fields"), $("deployment-fields")]) {  // back to the defaults first
      for (const input of box.querySelectorAll("input[name], select[name]")) {
        delete input.dataset.touched;
        if (input.type === "checkbox") input.checked = input.dataset.default === "1";
        else if (input.dataset.default !== undefined) input.value = input.dataset.default;
      }
    }
    const dep = Object.assign({}, params.deployment);
    const engine = Object.assign({}, dep.engine || {});
    delete dep.engine;
    if (engine.num_gpu_blocks !== undefined) { dep.num_gpu_blocks = engine.num_gpu_blocks; delete engine.num_gpu_blocks; }
    fillFields("dep", dep);
    fillSpec(engine.speculative_config);
    delete engine.speculative_config;
    fillFields("eng", engine);
    showGpuDefaults();
    if (params.slo !== undefined) { for (const i of $("slo-fields").querySelectorAll("input[name]")) i.value = ""; fillFields("slo", params.slo); }
    if (params.recovery && $("run-recovery")) $("run-recovery").value = params.recovery;
    if ("gpu_types" in params && $("tune-gpu-types")) {  // a Tune run: the GPU types it compared, the prices given
      const types = new Set(params.gpu_types || []);
      for (const o of $("tune-gpu-types").options) o.selected = types.has(o.value);
      $("tune-gpu-prices").value = Object.entries(params.gpu_prices || {}).map(([g, usd]) => `${g}=${usd}`).join(",");
      const study = { "tune-trials": params.n_trials, "tune-verify": params.verify_seeds, "tune-trial-seeds": params.trial_seeds, "tune-pruning": params.pruning };
      for (const [id, v] of Object.entries(study)) if (v !== undefined && v !== null) $(id).value = String(v);
    }
    if ($("run-layout") && "disaggregated" in params) {  // a Run tab run (null: aggregated)
      const pd = params.disaggregated;
      $("run-layout").value = pd ? "disaggregated" : "aggregated";
      if (pd) {
        for (const pool of ["prefill", "decode"]) {
          const p = pd[pool] || {};
          $(`pd-${pool}-replicas`).value = String(p.replicas || 1);
          $(`pd-${pool}-gpu`).value = p.gpu || "";
          $(`pd-${pool}-tp`).value = p.tp ? String(p.tp) : "";
        }
        $("pd-link").value = pd.link || "rdma-400g";
        $("pd-short").value = String(pd.short_prompt_tokens || 0);
      }
      $("run-layout").dispatchEvent(new Event("change"));
    }
    if (params.failures && $("run-failures")) $("run-failures").value = params.failures.map((f) => `${f.node}@${f.time_s}${f.recover_after_s != null ? "+" + f.recover_after_s : ""}`).join(", ");
  }
  /* The deployment and SLO a run used, in one line under its title (what a person checks first). */
  function settingsLine(params) {
    if (!params || !params.deployment) return null;
    const d = params.deployment;
    const cat = state.catalog.deployment_fields.reduce((o, f) => Object.assign(o, { [f.name]: f.default }), {});
    const tp = d.tp || cat.tp;
    const flags = Object.entries(d.engine || {}).map(([k, v]) => k === "speculative_config" && v ? `speculative ${v.method} k=${v.num_speculative_tokens}${v.acceptance_rates ? ` acceptance ${v.acceptance_rates.join(",")}` : ""}` : `${k} ${typeof v === "number" ? SS.fmt(v, Number.isInteger(v) ? "int" : "float") : String(v)}`);
    const reps = d.replicas || 1;
    const slo = params.slo && Object.keys(params.slo).length
      ? Object.entries(params.slo).map(([k, v]) => (k === "min_good_fraction" ? `good=${v}` : `${k}=${v}`)).join(",") : "none";
    const pd = params.disaggregated;
    const pools = pd ? ["prefill", "decode"].map((n) => { const p = pd[n] || {}; return `${n} ${p.replicas || 1} × (${p.tp || tp} × ${p.gpu || d.gpu || cat.gpu})`; }).join(", ") : "";
    if (pd) return el("p", { class: "help run-settings" },
      `Disaggregated: ${d.model || cat.model}, ${pools}, link ${pd.link || "rdma-400g"}`
      + `${flags.length ? ", " + flags.join(", ") : ", vllm serve's defaults"} · SLO: ${slo}`);
    const types = params.gpu_types && params.gpu_types.length ? params.gpu_types.join(" | ") : null;
    return el("p", { class: "help run-settings" },
      `Deployment: ${d.model || cat.model} on ${tp} × ${types || d.gpu || cat.gpu}${reps > 1 ? `, ${reps} replicas (${d.router || cat.router})` : ""}`
      + `${flags.length ? ", " + flags.join(", ") : ", vllm serve's defaults"} · SLO: ${slo}`);
  }
  function loadButton(id, run) {
    return el("button", { type: "button", class: "secondary small", id, onclick: () => { loadSettings(run.job.params); toast("The shared panels now hold this run's deployment and SLO"); } }, "Load these settings");
  }
  function fillSelect(select, items, value) {
    clear(select, ...items.map((it) => el("option", { value: it.value, selected: it.value === value }, it.label)));
  }

  function buildForms(cat) {
    const dep = $("deployment-fields");
    for (const spec of cat.deployment_fields) {
      if (spec.name === "model") {
        const sel = el("select", { id: "dep-model", name: "model", "data-type": "string", "data-default": spec.default });
        fillSelect(sel, cat.models.map((m) => ({ value: m.name, label: `${m.name} (${m.dtype})` })), spec.default);
        dep.append(el("div", {}, el("label", { for: "dep-model" }, "Model (", el("code", {}, "--model"), ")"), sel));
      } else if (spec.name === "gpu") {
        const sel = el("select", { id: "dep-gpu", name: "gpu", "data-type": "string", "data-default": spec.default });
        fillSelect(sel, cat.gpus.map((g) => ({ value: g.name, label: `${g.name}: ${g.description}` })), spec.default);
        dep.append(el("div", {}, el("label", { for: "dep-gpu" }, "GPU (", el("code", {}, "--gpu"), ")"), sel));
      } else dep.append(inputFor(spec, "dep"));
    }
    const td = cat.tune_defaults;  // the API body's defaults = servesim tune's (servesim.tune_defaults)
    $("tune-trials").value = td.n_trials; $("tune-verify").value = td.verify_seeds;
    $("tune-trial-seeds").value = td.trial_seeds; $("tune-pruning").value = td.pruning;
    fillSelect($("tune-gpu-types"), cat.gpus.map((g) => ({ value: g.name, label: `${g.name} (${SS.fmt(g.memory_gb, "int")} GB)` })), null);
    dep.addEventListener("input", (e) => { if (e.target.name) e.target.dataset.touched = "1"; });
    const eng = $("engine-fields");
    for (const spec of cat.engine_flags) eng.append(inputFor(spec, "eng"));
    eng.addEventListener("input", (e) => { if (e.target.name) e.target.dataset.touched = "1"; });
    buildSpecFields(cat.speculative);
    $("dep-gpu").addEventListener("change", showGpuDefaults);
    const slo = $("slo-fields");
    const pdefaults = { ttft_p99_ms: 1000, tpot_p99_ms: 100 };
    for (const spec of cat.percentile_slo_fields) {
      const help = spec.name === "min_good_fraction" ? `${spec.help} Judged by the Throughput curve and Tune (a single run reports the good fraction it measured).` : spec.help;
      slo.append(inputFor(Object.assign({}, spec, { flag: spec.name, nullable: true, help }), "slo", pdefaults[spec.name] ?? null));
    }
    for (const pool of ["prefill", "decode"]) fillSelect($(`pd-${pool}-gpu`), [{ value: "", label: "same" }, ...cat.gpus.map((g) => ({ value: g.name, label: g.name }))], "");
    fillSelect($("pd-link"), (cat.links || []).map((l) => ({ value: l.name, label: `${l.name} (${SS.fmt(l.bandwidth_gbps)} Gbit/s)` })), "rdma-400g");
    const layout = () => {
      const pd = $("run-layout").value === "disaggregated";
      $("pd-fields").hidden = !pd;
      $("run-recovery-box").hidden = pd;  // a pool's loss is recovered as docs/cluster.md says, not by a strategy
      $("run-failures").placeholder = pd ? "d0@5, p0@8+4" : "n0@20+30";
    };
    $("run-layout").addEventListener("change", layout);
    layout();
    fillSelect($("gen-preset"), cat.presets.map((p) => ({ value: p, label: p })), "default");
    fillSelect($("upload-format"), [{ value: "", label: "auto-detect" }, ...cat.formats.map((f) => ({ value: f, label: f }))], "");
    SS.glossary = cat.glossary || {};
  }
  /* The "Speculative decoding" group: EngineConfig.speculative_config, vLLM's --speculative-config
     object (method, num_speculative_tokens, acceptance_rates), sent whole when a method is chosen. */
  function buildSpecFields(sp) {
    const box = $("spec-fields");
    if (!box || !sp) return;
    const help = (id, text) => el("p", { class: "field-help", id: `${id}-help` }, text);
    const method = el("select", { id: "spec-method", "aria-describedby": "spec-method-help" },
      [el("option", { value: "" }, "off"), ...sp.methods.map((m) => el("option", { value: m }, m))]);
    const k = el("input", { id: "spec-k", type: "number", min: 1, max: sp.max_num_speculative_tokens, step: 1, placeholder: "k, e.g. 3", "aria-describedby": "spec-k-help", "data-type": "integer" });
    const acc = el("input", { id: "spec-acceptance", type: "text", placeholder: "the method's preset", "aria-describedby": "spec-acceptance-help" });
    const presetHelp = () => {
      const m = method.value;
      const p = m && sp.presets[m];
      $("spec-acceptance-help").textContent = `${sp.field_help.acceptance_rates} One rate (every position) or per-position rates, comma-separated, each in [0, 1]; empty: the method's preset${p ? ` (${m}: ${p.join(", ")})` : ""}.`;
      acc.placeholder = p ? `preset ${p.slice(0, 3).join(", ")}, ...` : "the method's preset";
      k.disabled = acc.disabled = !m;
    };
    method.addEventListener("change", presetHelp);
    clear(box,
      el("div", {}, el("label", { for: "spec-method" }, el("code", {}, "method")), method, help("spec-method", `${sp.help} ${sp.field_help.method} off: no speculation.`)),
      el("div", {}, el("label", { for: "spec-k" }, el("code", {}, "num_speculative_tokens")), k, help("spec-k", `${sp.field_help.num_speculative_tokens} 1 to ${sp.max_num_speculative_tokens}.`)),
      el("div", {}, el("label", { for: "spec-acceptance" }, el("code", {}, "acceptance_rates")), acc, help("spec-acceptance", "")));
    presetHelp();
  }
  /* The group as the body's ``speculative_config`` (undefined when off); a field the browser
     cannot read is a form error naming it, as readFields does. */
  function readSpec() {
    const method = $("spec-method");
    if (!method || !method.value) return undefined;
    const k = $("spec-k");
    const acc = $("spec-acceptance");
    const out = { method: method.value };
    const bad = fieldError(k);
    k.toggleAttribute("aria-invalid", !!bad);
    if (bad) throw new ApiError({ status: 422, title: "Invalid settings", detail: `speculative_config.num_speculative_tokens: ${bad}`, errors: [{ field: "speculative_config.num_speculative_tokens", reason: bad }] });
    if (k.value !== "") out.num_speculative_tokens = Number(k.value);
    const text = acc.value.trim();
    if (text) {
      const rates = text.split(/[\s,]+/).filter((x) => x).map(Number);
      const wrong = rates.some((x) => !Number.isFinite(x));
      acc.toggleAttribute("aria-invalid", wrong);
      if (wrong) throw new ApiError({ status: 422, title: "Invalid settings", detail: "speculative_config.acceptance_rates: not a list of numbers", errors: [{ field: "speculative_config.acceptance_rates", reason: "not a list of numbers" }] });
      out.acceptance_rates = rates;
    }
    return out;
  }
  /* A run's speculative_config (or none: off) back into the group. */
  function fillSpec(sc) {
    const method = $("spec-method");
    if (!method) return;
    method.value = sc && sc.method ? sc.method : "";
    $("spec-k").value = sc && sc.num_speculative_tokens != null ? String(sc.num_speculative_tokens) : "";
    $("spec-acceptance").value = sc && sc.acceptance_rates ? sc.acceptance_rates.join(", ") : "";
    for (const i of [method, $("spec-k"), $("spec-acceptance")]) i.removeAttribute("aria-invalid");
    method.dispatchEvent(new Event("change"));
  }
  function nonNull(obj) {
    const out = {};
    for (const [k, v] of Object.entries(obj)) if (v !== null && v !== undefined) out[k] = v;
    return Object.keys(out).length ? out : null;
  }
  /* The shared panels as a body's ``deployment`` (servesim.spec.DeploymentSpec: the deployment's
     fields, and only the engine keys the user set) and ``slo`` (PercentileSLO). ``single``: a single
     run's SLO (good=FRACTION is judged by the Throughput curve and Tune only). */
  function runSettings(single) {
    const deployment = readFields($("deployment-fields"));
    const engine = readFields($("engine-fields"), true);
    const spec = readSpec();
    if (spec !== undefined) engine.speculative_config = spec;
    if (deployment.num_gpu_blocks !== null && deployment.num_gpu_blocks !== undefined) engine.num_gpu_blocks = deployment.num_gpu_blocks;
    delete deployment.num_gpu_blocks;
    deployment.engine = engine;
    const slo = readFields($("slo-fields"));
    if (single) delete slo.min_good_fraction;
    return { deployment, slo: nonNull(slo) };
  }
  function requireTrace() {
    if (!state.traceId) throw new ApiError({ status: 422, title: "No trace", detail: "choose or upload a trace on the Traces tab first" });
    return state.traceId;
  }

  /* ------------------------------------------------------------------ jobs */
  const streams = {};
  function jobBox(slot) {
    return $(`${slot}-job`);
  }
  function showProgress(slot, job, st) {
    const box = jobBox(slot);
    const pct = st.total ? Math.min(100, (100 * st.done) / st.total) : st.status === "done" ? 100 : 3;
    const running = st.status === "queued" || st.status === "running";
    const cancel = running ? el("button", { type: "button", class: "secondary small", onclick: () => cancelJob(job.id) }, "Cancel") : null;
    clear(box,
      el("div", { class: "bar", role: "progressbar", "aria-label": `${slot} progress`, "aria-valuemin": "0", "aria-valuemax": "100", "aria-valuenow": String(Math.round(pct)) }, el("div", { style: null })),
      el("div", { class: `line ${st.status === "failed" ? "error" : ""}`, "data-status": st.status }, `${st.status}${st.total ? ` · ${SS.fmt(st.done)} / ${SS.fmt(st.total)}` : ""}${st.eta_s != null && running ? ` · about ${etaText(st.eta_s)} left` : ""}${st.error ? ": " + st.error : ""}`, cancel));
    box.querySelector(".bar div").style.width = pct + "%";
  }
  function etaText(s) {
    if (s < 60) return `${Math.max(1, Math.round(s))} s`;
    return `${Math.floor(s / 60)} min ${Math.round(s % 60)} s`;
  }
  async function cancelJob(id) {
    try { await api(`/api/jobs/${id}`, { method: "DELETE" }); } catch (e) { toast(e.message); }
  }
  function follow(slot, job, onDone) {
    localStorage.setItem(`servesim.job.${slot}`, job.id);
    if (streams[slot]) streams[slot].close();
    showProgress(slot, job, { status: job.status, done: job.progress_done || 0, total: job.progress_total || 0 });
    const es = new EventSource(`/api/jobs/${job.id}/events`);
    streams[slot] = es;
    es.addEventListener("progress", (e) => {
      const st = JSON.parse(e.data);
      showProgress(slot, job, st);
      if (slot === "tune" && st.extra && st.extra.trials) liveTrials(st.extra);
    });
    es.addEventListener("end", async (e) => {
      es.close();
      const st = JSON.parse(e.data);
      showProgress(slot, job, st);
      if (st.status === "done") {
        const run = await api(`/api/runs/${job.id}`);
        onDone(run);
      }
    });
    es.onerror = () => { /* the browser reconnects on its own (retry: 2000) */ };
  }
  async function resume(slot, onDone) {
    const id = localStorage.getItem(`servesim.job.${slot}`);
    if (!id) return;
    try {
      const run = await api(`/api/runs/${id}`);
      if (run.job.status === "done") { showProgress(slot, run.job, { status: "done", done: run.job.progress_done, total: run.job.progress_total }); onDone(run); }
      else follow(slot, run.job, onDone);
    } catch (e) { localStorage.removeItem(`servesim.job.${slot}`); }
  }
  async function submit(slot, path, body, onDone) {
    const results = $(`${slot}-results`);
    if (results) clear(results);  // the last run's answer must not pass for this one's
    clear(jobBox(slot));
    try {
      const job = await api(path, { method: "POST", json: body });
      if (body.deployment) localStorage.setItem("servesim.settings", job.id);  // a reload restores these
      follow(slot, job, onDone);
    } catch (e) {
      clear(jobBox(slot), problemBlock(e));
    }
  }

  /* ------------------------------------------------------------------ traces */
  function setTrace(row) {
    state.traceId = row ? row.id : null;
    if (row) localStorage.setItem("servesim.trace", row.id); else localStorage.removeItem("servesim.trace");
    $("current-trace").textContent = row ? `${row.name} (${row.num_requests.toLocaleString("en-US")} requests)` : "none selected";
  }
  async function loadTraces() {
    state.traces = await api("/api/traces");
    const list = $("trace-list");
    if (!state.traces.length) { clear(list, el("p", { class: "empty" }, "No trace yet: upload or generate one.")); setTrace(null); return; }
    const table = el("table", { id: "traces-table" }, el("caption", {}, "Click a trace's name to use it"),
      el("thead", {}, el("tr", {}, ["name", "requests", "dropped rows", "origin", "added", ""].map((h) => el("th", { scope: "col" }, h)))));
    const body = el("tbody");
    for (const t of state.traces) {
      body.append(el("tr", { class: t.id === state.traceId ? "selected" : null },
        el("td", {}, el("button", { type: "button", class: "small secondary", onclick: () => selectTrace(t.id) }, t.name)),
        el("td", { class: "num" }, t.num_requests.toLocaleString("en-US")),
        el("td", { class: `num ${t.num_dropped ? "bad" : ""}` }, t.num_dropped.toLocaleString("en-US")),
        el("td", {}, t.origin), el("td", {}, t.created_at.replace("T", " ").slice(0, 19)),
        el("td", {}, el("button", { type: "button", class: "small secondary", "aria-label": `Delete ${t.name}`, onclick: () => deleteTrace(t) }, "Delete"))));
    }
    table.append(body);
    clear(list, table);
    const current = state.traces.find((t) => t.id === state.traceId);
    setTrace(current || state.traces[0]);
  }
  async function selectTrace(id) {
    const data = await api(`/api/traces/${id}/summary`);
    setTrace(data.trace);
    const box = clear($("trace-summary"));
    const t = data.trace;
    if (t.dropped.length) {
      box.append(el("div", { class: "section" }, el("h2", {}, `${t.name}: ${t.num_dropped} rows were rejected (the rest were kept)`),
        SS.table({ key: "dropped", title: "Rejected rows", notes: [], columns: [
          { key: "row", label: "row", kind: "int" }, { key: "field", label: "field", kind: "str" }, { key: "reason", label: "reason", kind: "str" }],
          rows: t.dropped.map((d) => [d.row, d.field ?? "–", d.reason]) })));
    }
    for (const s of data.sections) SS.section(box, s);
  }
  async function deleteTrace(t) {
    if (!window.confirm(`Delete ${t.name}?`)) return;
    try { await api(`/api/traces/${t.id}`, { method: "DELETE" }); if (state.traceId === t.id) setTrace(null); clear($("trace-summary")); await loadTraces(); }
    catch (e) { toast(e.message); }
  }
  async function useStored(row) {
    try { await loadTraces(); await selectTrace(row.id); } catch (e) { toast(e.message); }  // stored all the same
  }
  async function upload(file) {
    const status = $("trace-status");
    clear($("upload-errors"));
    status.className = "status";
    status.textContent = `Uploading ${file.name} (${(file.size / 1e6).toFixed(1)} MB)…`;
    const fmt = $("upload-format").value;
    try {
      const row = await api(`/api/traces?name=${encodeURIComponent(file.name)}${fmt ? "&format=" + encodeURIComponent(fmt) : ""}`, { method: "POST", body: file });
      await useStored(row);  // the page says "stored" once the trace is the one a Run uses, not before
      status.textContent = `${row.name}: ${row.num_requests.toLocaleString("en-US")} requests stored${row.num_dropped ? `, ${row.num_dropped} rows rejected (listed below)` : ""}.`;
    } catch (e) {
      status.className = "status error";
      status.textContent = `${file.name} was not stored.`;
      clear($("upload-errors"), problemBlock(e));
    }
  }
  function setupUpload() {
    const zone = $("dropzone");
    const input = $("upload-file");
    zone.addEventListener("click", () => input.click());
    zone.addEventListener("keydown", (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); input.click(); } });
    zone.addEventListener("dragover", (e) => { e.preventDefault(); zone.classList.add("over"); });
    zone.addEventListener("dragleave", () => zone.classList.remove("over"));
    zone.addEventListener("drop", (e) => { e.preventDefault(); zone.classList.remove("over"); if (e.dataTransfer.files[0]) upload(e.dataTransfer.files[0]); });
    input.addEventListener("change", () => { if (input.files[0]) upload(input.files[0]); input.value = ""; });
    $("generate-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const status = $("trace-status");
      status.className = "status";
      status.textContent = "Generating…";
      try {
        const row = await api("/api/traces/generate", { method: "POST", json: { preset: $("gen-preset").value, num_requests: parseInt($("gen-n").value, 10), seed: parseInt($("gen-seed").value, 10) } });
        await useStored(row);
        status.textContent = `${row.name} stored.`;
      } catch (err) { status.className = "status error"; status.textContent = ""; clear($("upload-errors"), problemBlock(err)); }
    });
  }

  /* ------------------------------------------------------------------ run */
  function parseFailures(text) {
    return text.split(",").map((s) => s.trim()).filter(Boolean).map((s) => {
      const m = /^([^@]+)@([0-9.]+)(?:\+([0-9.]+))?$/.exec(s);
      if (!m) throw new ApiError({ status: 422, title: "Bad failure", detail: `${s}: use NODE@SECONDS or NODE@SECONDS+RECOVER_AFTER` });
      return { node: m[1], time_s: parseFloat(m[2]), recover_after_s: m[3] ? parseFloat(m[3]) : null };
    });
  }
  function renderRun(run) {
    const box = clear($("run-results"));
    const r = run.result;
    const toolbar = el("div", { class: "toolbar" },
      el("strong", {}, run.job.title),
      el("a", { href: `/api/runs/${run.job.id}/result.json`, download: "" }, "Download JSON"),
      el("a", { href: `/api/runs/${run.job.id}/report.html`, download: "" }, "Download report"),
      el("a", { href: `/api/runs/${run.job.id}/requests.csv`, download: "" }, "Download per-request CSV"),
      // Compare and the basket read runs of identical replicas: a disaggregated run is not offered to them
      r.disaggregated ? [] : [
        el("button", { type: "button", class: "secondary small", onclick: () => { localStorage.setItem("servesim.compare.a", run.job.id); toast("Set as the comparison baseline (A)"); } }, "Use as baseline"),
        el("button", { type: "button", class: "secondary small", onclick: () => { localStorage.setItem("servesim.compare.b", run.job.id); toast("Set as the compared run (B)"); } }, "Compare with baseline"),
        el("button", { type: "button", class: "secondary small", id: "basket-add", onclick: () => addToBasket(run.job) }, "Add to basket")],
      loadButton("load-settings", run));
    box.append(toolbar, settingsLine(run.job.params) || "");
    for (const n of r.notes || []) box.append(el("p", { class: "help" }, "note: " + n));
    if (!r.disaggregated) costBox(box, run.job.id);  // cost reads a run of identical replicas
    const sparks = r.sparklines || {};
    const first = r.kpis ? { sparklines: sparks, before: (sec) => percentileSwitcher(sec, r.kpis, sparks) } : {};
    if (r.kpis && run.job.kind === "simulate") sloRescoreBox(box, run, sparks);
    if (r.cluster) SS.clusterRun(box, r.sections, first);  // the fleet or one replica (views.fleet)
    else r.sections.forEach((s, i) => SS.section(box, s, i === 0 ? first : {}));
  }
  /* Post-hoc SLO: the run judged at another SLO from its stored per-request records
     (POST /api/runs/{id}/slo), nothing re-simulated; the form starts at the run's own SLO. */
  const RESCORE_FIELDS = { ttft_p99_ms: "TTFT p99 cap (ms)", tpot_p99_ms: "TPOT p99 cap (ms)", e2e_p99_ms: "E2E p99 cap (ms)" };
  function sloRescoreBox(box, run, sparks) {
    const stored = (run.job.params && run.job.params.slo) || {};
    const fields = el("div", { class: "rescore-fields" });
    for (const [name, label] of Object.entries(RESCORE_FIELDS)) {
      const id = `rescore-${name}`;
      const v = stored[name];
      fields.append(el("label", { for: id }, label),
        el("input", { id, name, type: "text", inputmode: "decimal", placeholder: "no cap", value: v === null || v === undefined ? "" : String(v) }));
    }
    const out = el("div", { id: "rescore-result", "aria-live": "polite" });
    const form = el("form", { class: "inline", id: "rescore-form", "aria-label": "SLO for this run" },
      el("strong", {}, "SLO for this run"), fields,
      el("button", { type: "submit", class: "secondary small" }, "Recompute"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      const slo = {};
      for (const input of fields.querySelectorAll("input")) if (input.value.trim() !== "") slo[input.name] = input.value.trim();
      try {
        const d = await api(`/api/runs/${run.job.id}/slo`, { method: "POST", json: { slo: Object.keys(slo).length ? slo : null } });
        applyRescore(box, d, sparks, run.result);
        const scope = d.scope === "fleet" ? "; the fleet's figures (each replica's charts are the run's own)" : "";
        clear(out, el("p", { class: "help rescore-note" }, `note: ${d.note} (the stored run keeps its own SLO${scope})`));
      } catch (err) { clear(out, problemBlock(err)); }
    });
    box.append(form, out);
  }
  /* The re-scored tiles (every percentile), SLO verdict, latency/totals tables and histogram SLO
     lines in the run's view (a cluster's: the fleet's). The shown result is updated too, so a
     re-drawn view (the fleet picked again) shows the re-scored figures. */
  function applyRescore(box, d, sparks, result) {
    const key = result.cluster ? "fleet" : "simulation";
    const stored = (result.sections || []).find((x) => x.key === key);
    const sec = box.querySelector(`section[data-section="${key}"]`);
    const s = d.sections[0];
    if (!sec || !s || !stored) return;
    // the goodput and attainment sparklines counted good requests at the run's own SLO: not shown re-scored
    delete sparks.goodput;
    delete sparks.good_fraction;
    result.kpis = d.kpis;
    const caps = d.summary.slo || {};
    const verdict = (s.verdicts || []).find((v) => v.key === "slo");
    const captions = Object.fromEntries((stored.tables || []).map((t) => [t.key, t.title]));
    const fresh = Object.fromEntries((s.tables || []).filter((t) => t.key === "latency" || t.key === "totals").map((t) => [t.key, Object.assign({}, t, { title: captions[t.key] ?? t.title })]));
    stored.kpis = d.kpis.p99;
    stored.verdicts = [...(verdict ? [verdict] : []), ...(stored.verdicts || []).filter((v) => v.key !== "slo")];
    stored.tables = (stored.tables || []).map((t) => fresh[t.key] || t);
    stored.histograms = (stored.histograms || []).map((h) => ["ttft_ms", "tpot_ms", "e2e_ms"].includes(h.key) ? Object.assign({}, h, { slo: caps[h.key] ?? null }) : h);
    for (const v of sec.querySelectorAll(':scope > .verdict[data-key="slo"]')) v.remove();
    if (verdict) sec.querySelector(":scope > h2").after(SS.verdict(verdict));
    const bar = sec.querySelector(":scope > .switcher");
    if (bar) bar.remove();
    const grid = sec.querySelector(":scope > .kpis");
    if (grid) clear(grid, ...d.kpis.p99.map((k) => SS.kpi(k, sparks[k.key])));
    percentileSwitcher(sec, d.kpis, sparks);
    // the latency histograms' SLO lines move to the new caps (their counts are the run's)
    for (const h of stored.histograms) {
      if (!["ttft_ms", "tpot_ms", "e2e_ms"].includes(h.key)) continue;
      const old = sec.querySelector(`.chart[data-key="${h.key}"]`);
      if (!old) continue;
      const drawn = SS.histogram(old.parentNode, h);
      if (!drawn) continue;
      old.parentNode.insertBefore(drawn, old);
      if (window.Plotly) window.Plotly.purge(old);
      old.remove();
    }
    for (const t of Object.values(fresh)) {  // captioned as the run's own (its trace, "latency, fleet")
      const old = sec.querySelector(`table[data-key="${t.key}"]`);
      if (old) old.closest(".table-wrap").replaceWith(SS.table(t));
    }
  }
  /* $/1M tokens and goodput per $ at the GPU price the user enters (the server has no price). */
  function costBox(box, runId) {
    const out = el("div", { id: "cost-result" });
    const price = el("input", { id: "cost-price", type: "number", min: "0.01", step: "any", placeholder: "e.g. 2.50", value: localStorage.getItem("servesim.price") || "" });
    const form = el("form", { class: "inline", id: "cost-form" }, el("label", { for: "cost-price" }, "GPU price ($ per GPU-hour)"), price, el("button", { type: "submit", class: "secondary small" }, "Cost"));
    form.addEventListener("submit", async (e) => {
      e.preventDefault();
      try {
        localStorage.setItem("servesim.price", price.value);
        const d = await api(`/api/runs/${runId}/cost?usd_per_gpu_hour=${encodeURIComponent(price.value)}`);
        clear(out);
        for (const s of d.sections) SS.section(out, s);
      } catch (err) { clear(out, problemBlock(err)); }
    });
    box.append(form, out);
  }
  /* KPI tiles at p50 / p90 / p95 / p99: the server sent each set (views.simulation.kpis). */
  function percentileSwitcher(box, byPercentile, sparks) {
    const grid = box.querySelector(".kpis");
    if (!grid) return;
    const bar = el("div", { class: "switcher", role: "group", "aria-label": "Latency percentile of the tiles" });
    const apply = (p) => {
      for (const b of bar.children) b.setAttribute("aria-pressed", String(b.dataset.p === p));
      clear(grid, ...byPercentile[p].map((k) => SS.kpi(k, sparks[k.key])));
    };
    for (const p of Object.keys(byPercentile)) bar.append(el("button", { type: "button", "data-p": p, "aria-pressed": String(p === "p99"), onclick: () => apply(p) }, p));
    grid.before(bar);
  }
  function setupRun() {
    $("run-form").addEventListener("submit", (e) => {
      e.preventDefault();
      try {
        const body = Object.assign({ trace_id: requireTrace() }, runSettings(true), {
          failures: parseFailures($("run-failures").value),
          recovery: $("run-recovery").value,
        });
        if ($("run-layout").value === "disaggregated") {
          // the pools are the replicas: the deployment's model and flags apply to both
          delete body.recovery;
          body.deployment.replicas = 1;
          const pool = (n) => {
            const tp = $(`pd-${n}-tp`).value.trim();
            return { replicas: parseInt($(`pd-${n}-replicas`).value, 10) || 1, gpu: $(`pd-${n}-gpu`).value || null, tp: tp ? parseInt(tp, 10) : null };
          };
          body.disaggregated = { prefill: pool("prefill"), decode: pool("decode"), link: $("pd-link").value, short_prompt_tokens: parseInt($("pd-short").value, 10) || 0 };
        }
        submit("run", "/api/simulate", body, renderRun);
      } catch (err) { clear(jobBox("run"), problemBlock(err)); }
    });
  }

  /* ------------------------------------------------------------------ sweep */
  function renderSweep(run) {
    const box = clear($("sweep-results"));
    box.append(el("div", { class: "toolbar" }, el("strong", {}, run.job.title), el("a", { href: `/api/runs/${run.job.id}/result.json`, download: "" }, "Download JSON"),
      el("a", { href: `/api/runs/${run.job.id}/report.html`, download: "" }, "Download report"), loadButton("sweep-load-settings", run)), settingsLine(run.job.params) || "");
    for (const s of run.result.sections) SS.section(box, s);
    rateSlider(box, run.result.report);
  }
  /* Reads every metric of the sweep at the chosen rate (the measured points; no interpolation). */
  function rateSlider(box, rep) {
    const pts = (rep && rep.points) || [];
    if (pts.length < 2) return;
    const out = el("div", { class: "kv", "aria-live": "polite" });
    const input = el("input", { type: "range", id: "rate-slider", min: "0", max: String(pts.length - 1), step: "1", value: String(pts.length - 1) });
    const show = () => {
      const p = pts[parseInt(input.value, 10)];
      clear(out, ...[["rate", `${SS.fmt(p.rate_rps)} req/s`], ["status", p.status], ["throughput", `${SS.fmt(p.throughput_rps.mean)} req/s`], ["goodput", `${SS.fmt(p.goodput_rps.mean)} req/s`],
        ["TTFT p99 (worst seed)", `${SS.fmt(p.ttft_ms.p99.max)} ms`], ["TPOT p99 (worst seed)", `${SS.fmt(p.tpot_ms.p99.max)} ms`], ["E2E p99 (worst seed)", `${SS.fmt(p.e2e_ms.p99.max)} ms`]]
        .flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
    };
    input.addEventListener("input", show);
    box.append(el("div", { class: "section" }, el("h2", {}, "Read the sweep at one rate"), el("div", { class: "slider" }, el("label", { for: "rate-slider" }, "Measured rate"), input), out));
    show();
  }
  function setupSweep() {
    $("sweep-form").addEventListener("submit", (e) => {
      e.preventDefault();
      try {
        const s = runSettings();
        submit("sweep", "/api/saturate", { trace_id: requireTrace(), deployment: s.deployment, slo: s.slo, seeds: parseInt($("sweep-seeds").value, 10) }, renderSweep);
      } catch (err) { clear(jobBox("sweep"), problemBlock(err)); }
    });
  }

  /* ------------------------------------------------------------------ tune */
  function renderTune(run) {
    const box = clear($("tune-results"));
    const r = run.result;
    box.append(el("div", { class: "toolbar" }, el("strong", {}, run.job.title), el("span", { class: "help" }, r.gpu_types ? `${r.gpu_types.rows.length} GPU types compared (one study each): ${r.gpu_types.cheapest ? `${r.gpu_types.cheapest} recommended; its study ${r.study.study_name} below` : "none meets the SLO"}` : r.study ? `study ${r.study.study_name}: ${r.study.n_trials} trials, ${r.study.n_feasible} feasible` : `layouts of ${r.layouts.gpus} GPUs: ${r.layouts.recommended} recommended`), el("a", { href: `/api/runs/${run.job.id}/result.json`, download: "" }, "Download JSON"),
      el("a", { href: `/api/runs/${run.job.id}/report.html`, download: "" }, "Download report"), loadButton("tune-load-settings", run)), settingsLine(run.job.params) || "");
    const sections = [...r.sections];
    if (r.gpu_types && sections.length && sections[0].key === "gpu_types") SS.section(box, sections.shift());  // the types compared, above the chosen type's answer
    if (r.no_recommendation) box.append(SS.verdict({ key: "none", label: "No recommendation", status: "warn", text: r.no_recommendation }));
    if (r.recommendation) {
      const cmd = r.recommendation.vllm_serve_command;
      const pre = el("pre", { class: "cmd", id: "vllm-command" }, cmd);
      const copy = el("button", { type: "button", id: "copy-command", onclick: async () => {
        try { await navigator.clipboard.writeText(cmd); toast("Copied the vllm serve command"); }
        catch (err) { const range = document.createRange(); range.selectNodeContents(pre); const sel = getSelection(); sel.removeAllRanges(); sel.addRange(range); toast("Selected: press Ctrl+C to copy"); }
      } }, "Copy the vllm serve command");
      box.append(el("div", { class: "section", id: "recommendation-card" }, el("h2", {}, "Recommendation (review before use)"), pre, copy));
    }
    for (const s of sections) SS.section(box, s);
    if (r.study) trialLoader(box, r);
  }
  /* The study's trials as they finish (read from the Optuna storage by the job while it runs). */
  function liveTrials(extra) {
    const box = $("tune-results");
    let live = $("tune-live");
    if (!live) {
      clear(box, el("div", { class: "section", id: "tune-live-box" }, el("h2", {}, `Trials so far (study ${extra.study})`), el("div", { class: "chart", id: "tune-live", role: "img", "aria-label": "trials so far" })));
      live = $("tune-live");
    }
    const done = extra.trials.filter((t) => t.ttft_p99_ms !== null && t.goodput_per_gpu !== null);
    const trace = (ok) => ({
      type: "scatter", mode: "markers", name: ok ? "feasible" : "infeasible",
      x: done.filter((t) => t.feasible === ok).map((t) => t.ttft_p99_ms),
      y: done.filter((t) => t.feasible === ok).map((t) => t.goodput_per_gpu),
      text: done.filter((t) => t.feasible === ok).map((t) => `trial ${t.number}`),
      marker: { color: ok ? "#1a7f37" : "#c62828", size: 8 }, hovertemplate: "%{text}: %{x:.4g} ms, %{y:.4g}<extra></extra>",
    });
    window.Plotly.react(live, [trace(true), trace(false)], {
      margin: { l: 52, r: 12, t: 30, b: 40 }, font: { size: 11 }, showlegend: true,
      title: { text: `${extra.trials.length} trials: goodput per GPU against TTFT p99`, font: { size: 12 } },
      xaxis: { title: { text: "TTFT p99 (ms)" } }, yaxis: { title: { text: "goodput per GPU (req/s)" } },
    }, { displaylogo: false, responsive: true });
  }
  /* Load a trial's configuration (the best ones, the Pareto front) into the Run tab's form: pick it
     in the list (keyboard) or click its point in the trials scatter (the Pareto front is marked). */
  function trialLoader(box, r) {
    const byNumber = {};
    for (const t of r.trials || []) byNumber[t.number] = t;
    const front = new Set(((r.study && r.study.pareto_front) || []).map((t) => t.number));
    const choices = (r.trial_choices || []).filter((c) => byNumber[c.number]);  // labelled by the view
    const ranked = choices.map((c) => c.number);
    const card = el("div", { id: "trial-config", "aria-live": "polite" });
    const load = (n) => {
      const p = byNumber[n].params;
      const names = { tensor_parallel_size: "tp" };  // the tuner's name -> the deployment's
      for (const [k, v] of Object.entries(p)) {
        const input = $(`eng-${k}`) || $(`dep-${names[k] || k}`);
        if (!input) continue;
        if (input.type === "checkbox") input.checked = !!v; else input.value = v === null ? "" : String(v);
        input.dataset.touched = "1";
      }
      showTab($("tab-run"));
      toast(`Loaded trial ${n} into the Run tab: press Run simulation`);
    };
    const show = (n) => {
      const t = byNumber[n];
      const o = t.outcome || {};
      clear(card, el("h3", {}, `Trial ${n}${front.has(n) ? " (Pareto front)" : ""}${t.feasible ? "" : " (infeasible)"}`),
        SS.table({ key: "trial_params", title: "", notes: [], columns: [{ key: "flag", label: "setting", kind: "str" }, { key: "value", label: "value", kind: "str" }],
          rows: [...Object.entries(t.params).map(([k, v]) => [k, v === null ? "not set" : String(v)]),
            ["TTFT p99 (ms, worst seed)", o.ttft_p99_ms ? SS.fmt(o.ttft_p99_ms.max) : "–"], ["goodput per GPU (req/s)", SS.fmt(o.goodput_per_gpu ?? null)]] }),
        el("button", { type: "button", id: "trial-config-load", class: "secondary small", onclick: () => load(n) }, `Load trial ${n} into the Run tab`));
    };
    const points = r.scatter_trials || [];
    const scatter = box.querySelector("[data-section='tuning'] [data-key='trials']");
    if (scatter && window.Plotly && points.length) {
      window.Plotly.restyle(scatter, {
        "marker.color": [points.map((n) => (front.has(n) ? "#1a7f37" : byNumber[n] && byNumber[n].feasible ? "#2457c5" : "#c62828"))],
        "marker.size": [points.map((n) => (front.has(n) ? 11 : 7))],
        text: [points.map((n) => `trial ${n}${front.has(n) ? " (Pareto front)" : ""}`)],
        hovertemplate: "%{text}: %{x:.4g} ms, %{y:.4g} req/s per GPU<extra>click to see it</extra>",
      });
      scatter.on("plotly_click", (ev) => {
        const n = points[ev.points[0].pointIndex];
        if (n === undefined) return;
        show(n);
        if (ranked.includes(n)) $("trial-pick").value = String(n);
      });
    }
    const help = el("p", { class: "help" }, "Click a point of the trials scatter (green: the Pareto front) to see its configuration, or pick a feasible trial:");
    const parts = [el("h2", {}, "Try a trial's configuration"), help];
    if (ranked.length) {
      const sel = el("select", { id: "trial-pick" }, choices.map((c) => el("option", { value: String(c.number) }, c.label)));
      sel.addEventListener("change", () => show(parseInt(sel.value, 10)));
      const btn = el("button", { type: "button", id: "trial-load", class: "secondary small", onclick: () => load(parseInt(sel.value, 10)) }, "Load into the Run tab");
      parts.push(el("form", { class: "inline" }, el("label", { for: "trial-pick" }, "Feasible trial"), sel, btn));
    }
    parts.push(card);
    const chooser = el("div", { class: "section", id: "trial-chooser" }, ...parts);
    if (scatter) scatter.parentElement.after(chooser); else box.append(chooser);
  }
  /* "h100=2.5,l40s=0.9" as {gpu: price}, as --gpu-price reads it (the server checks each GPU and
     price: a price that is not a number goes as written, to be refused naming the field). */
  function gpuPrices(text) {
    const out = {};
    for (const item of text.split(",").map((x) => x.trim()).filter(Boolean)) {
      const [gpu, usd] = item.split("=").map((x) => (x || "").trim());
      if (!gpu || usd === undefined || !item.includes("=")) {
        const detail = `gpu_prices: '${item}': use GPU=PRICE pairs, e.g. h100=2.5,l40s=0.9`;
        throw new ApiError({ status: 422, title: "Invalid settings", detail, errors: [{ field: "gpu_prices", reason: detail }] });
      }
      out[gpu] = usd !== "" && Number.isFinite(Number(usd)) ? Number(usd) : usd;
    }
    return out;
  }
  function setupTune() {
    $("tune-form").addEventListener("submit", (e) => {
      e.preventDefault();
      try {
        const s = runSettings();
        const maxg = $("tune-maxgpus").value;
        const gpuTypes = [...$("tune-gpu-types").selectedOptions].map((o) => o.value);
        if (gpuTypes.length) delete s.deployment.gpu;  // each type is the study's GPU in turn
        submit("tune", "/api/tune", {
          trace_id: requireTrace(), deployment: s.deployment, slo: s.slo,
          gpu_types: gpuTypes, gpu_prices: gpuPrices($("tune-gpu-prices").value),
          n_trials: parseInt($("tune-trials").value, 10), objective: $("tune-objective").value,
          verify_seeds: parseInt($("tune-verify").value, 10), trial_seeds: parseInt($("tune-trial-seeds").value, 10),
          pruning: $("tune-pruning").value, max_gpus: maxg ? parseInt(maxg, 10) : null,
          study_name: $("tune-study").value || null,
          space: $("tune-space").value.trim() ? readJson("tune-space") : null,
        }, renderTune);
      } catch (err) { clear(jobBox("tune"), problemBlock(err)); }
    });
  }

  /* ------------------------------------------------------------------ measured vs simulated */
  let benchLoads = 0;
  async function loadBenches(selected) {
    const mine = ++benchLoads;  // an older call answering late must not empty the picker a newer one filled
    const rows = await api("/api/bench");
    if (mine !== benchLoads) return;
    const what = (b) => (b.summary.format === "sim2real" ? `sim2real experiment ${b.summary.experiment} (${b.summary.model_id})`
      : `${b.summary.num_prompts ?? b.summary.completed} prompts at ${b.summary.request_rate} req/s${b.summary.detailed ? "" : " (summary only)"}`);
    fillSelect($("bench-pick"), rows.map((b) => ({ value: b.id, label: `${b.name}: ${what(b)}` })), selected || (rows[0] || {}).value);
    const runs = (await api("/api/runs?kind=simulate")).filter((r) => r.status === "done");
    if (mine !== benchLoads) return;
    fillSelect($("bench-against"), [{ value: "", label: "its workload, with the Run tab's settings" }, ...runs.map((r) => ({ value: r.id, label: `run ${r.created_at.slice(11, 19)} ${r.title}` }))], $("bench-against").value);
  }
  async function uploadBench(file) {
    const status = $("bench-status");
    clear($("bench-errors"));
    status.className = "status";
    status.textContent = `Uploading ${file.name}…`;
    try {
      const row = await api(`/api/bench?name=${encodeURIComponent(file.name)}`, { method: "POST", body: file, type: "application/json" });
      try { await loadBenches(row.id); } catch (e) { toast(e.message); }  // the picker holds it before the page says "stored"
      status.textContent = `${row.name} stored: ${Object.keys(row.summary.stats).length} latency metrics${row.summary.detailed ? " with per-request lists" : ""}.`;
    } catch (e) {
      status.className = "status error";
      status.textContent = `${file.name} was not stored.`;
      clear($("bench-errors"), problemBlock(e));
    }
  }
  function renderOverlay(run) {
    const box = clear($("bench-results"));
    box.append(el("div", { class: "toolbar" }, el("strong", {}, run.job.title), el("a", { href: `/api/runs/${run.job.id}/result.json`, download: "" }, "Download JSON")));
    for (const n of run.result.notes || []) box.append(el("p", { class: "help" }, "note: " + n));
    for (const s of run.result.sections) SS.section(box, s);
  }
  function setupBench() {
    const input = $("bench-file");
    input.addEventListener("change", () => { if (input.files[0]) uploadBench(input.files[0]); input.value = ""; });
    $("bench-form").addEventListener("submit", (e) => {
      e.preventDefault();
      const id = $("bench-pick").value;
      if (!id) { clear(jobBox("bench"), problemBlock(new ApiError({ status: 422, title: "No benchmark", detail: "upload a vllm bench serve result first" }))); return; }
      const s = runSettings();
      const against = $("bench-against").value;
      submit("bench", `/api/bench/${id}/simulate`, { bench_id: id, deployment: s.deployment, seed: parseInt($("bench-seed").value, 10) || 0, run_id: against || null }, renderOverlay);
    });
  }

  /* ------------------------------------------------------------------ recovery, rescheduling */
  const EXAMPLES = {
    recover: {
      interrupted_node: "node-3", preemption_timestamp: "2026-01-01T00:00:00Z", network_bandwidth_gbps: 10,
      active_jobs: [
        { job_id: "job-801", prompt_tokens: 1024, generated_tokens: 128, kv_cache_checkpointed: true },
        { job_id: "job-802", prompt_tokens: 2048, generated_tokens: 64, kv_cache_checkpointed: false },
        { job_id: "job-803", prompt_tokens: 8192, generated_tokens: 900, kv_cache_checkpointed: true },
      ],
    },
    resched: {
      batch_capacity: 4,
      interrupted_requests: [
        { req_id: "req-101", tokens_processed: 512, tokens_remaining: 16, sla_budget_ms: 150 },
        { req_id: "req-102", tokens_processed: 64, tokens_remaining: 400, sla_budget_ms: 1200 },
        { req_id: "req-103", tokens_processed: 2048, tokens_remaining: 128, sla_budget_ms: 600 },
      ],
    },
  };
  function readJson(id) {
    try { return JSON.parse($(id).value); }
    catch (err) { throw new ApiError({ status: 422, title: "Not JSON", detail: `the input is not valid JSON: ${err.message}` }); }
  }
  function setupPlan(slot, path, wrap) {
    $(`${slot}-example`).addEventListener("click", () => { $(`${slot}-input`).value = JSON.stringify(EXAMPLES[slot], null, 2); });
    $(`${slot}-form`).addEventListener("submit", async (e) => {
      e.preventDefault();
      const box = $(`${slot}-results`);
      try {
        const data = await api(path, { method: "POST", json: wrap(readJson(`${slot}-input`)) });
        clear(box);
        for (const s of data.sections) SS.section(box, s);
        $(`${slot}-status`).textContent = "Planned (stored in the history).";
      } catch (err) { clear(box, problemBlock(err)); $(`${slot}-status`).textContent = ""; }
    });
  }

  /* ------------------------------------------------------------------ advisor */
  function renderAdvice(run) {
    const box = clear($("advise-results"));
    const r = run.result;
    const a = r.advice;
    const v = a.verification || {};
    box.append(el("div", { class: "section", id: "advice-card" },
      el("h2", {}, `Answered by: ${a.answered_by || (r.advisor === "claude" ? "Claude" : "the rules advisor")}`),
      a.score_words ? el("p", { class: "help", id: "advice-score" }, a.score_words) : null,
      run.job.params.task === "batching" ? settingsLine(run.job.params) : null,
      run.job.params.task === "batching" ? loadButton("advise-load-settings", run) : null,
      a.notice ? SS.verdict({ key: "notice", label: "Notice", status: "warn", text: a.notice }) : null,
      SS.verdict(a.verdict || { key: "verification", label: "simulator check", status: v.accepted ? "info" : "fail", text: v.reason || "" }),
      el("h3", {}, "Advice"), kvList(a.advice),
      v.candidates && v.candidates.length ? SS.table({
        key: "candidates", title: "Re-checked candidates", notes: [],
        columns: [{ key: "label", label: "candidate", kind: "str" }, ...Object.keys(v.candidates[0].metrics).map((k) => ({ key: k, label: k.replace(/_/g, " "), kind: "float" }))],
        rows: v.candidates.map((c) => [c.label, ...Object.values(c.metrics).map((x) => (typeof x === "number" && Number.isInteger(x) ? x.toLocaleString("en-US") : x))]),
      }) : null,
      el("p", { class: "help" }, "Requires human review: nothing is applied.")));
  }
  function kvList(obj) {
    const dl = el("dl", { class: "kv" });
    for (const [k, v] of Object.entries(obj || {})) {
      let shown;
      if (Array.isArray(v) && v.length && v.every((x) => x && typeof x === "object" && !Array.isArray(x))) {
        const keys = Object.keys(v[0]);
        shown = SS.table({ key: k, title: "", notes: [], columns: keys.map((c) => ({ key: c, label: c.replace(/_/g, " "), kind: "str" })),
          rows: v.map((x) => keys.map((c) => (typeof x[c] === "object" && x[c] !== null ? JSON.stringify(x[c]) : x[c] === null || x[c] === undefined ? "–" : String(x[c])))) });
      } else if (Array.isArray(v)) shown = v.map((x) => (typeof x === "object" ? JSON.stringify(x) : String(x))).join(", ");
      else if (v && typeof v === "object") shown = kvList(v);
      else shown = SS.fmt(v);
      dl.append(el("dt", {}, k.replace(/_/g, " ")), el("dd", {}, shown));
    }
    return dl;
  }
  function setupAdvise() {
    $("advise-form").addEventListener("submit", (e) => {
      e.preventDefault();
      try {
        const task = $("advise-task").value;
        const body = { task, advisor: $("advise-advisor").value, optimize: parseInt($("advise-optimize").value, 10) || 0 };
        if (task === "batching") { const s = runSettings(true); Object.assign(body, { trace_id: requireTrace(), deployment: s.deployment, slo: s.slo }); }
        else body.data = readJson(task === "reschedule" ? "resched-input" : "recover-input");
        submit("advise", "/api/advise", body, renderAdvice);
      } catch (err) { clear(jobBox("advise"), problemBlock(err)); }
    });
  }

  /* ------------------------------------------------------------------ compare, history */
  async function loadCompareChoices() {
    // simulations, sweeps and studies: two of one kind compare (the server refuses a mixed pair)
    const runs = (await Promise.all(["simulate", "saturate", "tune"].map((k) => api(`/api/runs?kind=${k}`)))).flat()
      .filter((r) => r.status === "done").sort((x, y) => (x.created_at < y.created_at ? 1 : -1));
    compareKinds = Object.fromEntries(runs.map((r) => [r.id, r.kind]));
    const items = runs.map((r) => ({ value: r.id, label: `${r.created_at.slice(11, 19)} ${r.kind === "simulate" ? "" : r.kind + ": "}${r.title}` }));
    const [a, b] = comparePair(runs);
    fillSelect($("compare-a"), items, a);
    fillSelect($("compare-b"), items, b);
    if (!a) { $("compare-a").selectedIndex = -1; $("compare-b").selectedIndex = -1; }  // no pair: none chosen
  }
  let compareKinds = {};
  /* The pair preselected: only two runs of one kind (a tune and a simulation do not compare). The
     stored choice when it is such a pair; else B as stored (or the newest run) with the newest
     other run of its kind as A; none when no kind has two runs. */
  function comparePair(runs) {
    const kind = (id) => (runs.find((r) => r.id === id) || {}).kind;
    const a = localStorage.getItem("servesim.compare.a"), b = localStorage.getItem("servesim.compare.b");
    if (a && b && a !== b && kind(a) && kind(a) === kind(b)) return [a, b];
    const order = kind(b) ? [runs.find((r) => r.id === b), ...runs] : runs;
    for (const r of order) {
      const other = runs.find((x) => x.kind === r.kind && x.id !== r.id);
      if (other) return [other.id, r.id];
    }
    return ["", ""];
  }
  /* Why A and B cannot be compared, in words (null: they can). */
  function compareRefusal(a, b) {
    if (!a || !b) return "Choose two runs of one kind: two simulations, two sweeps or two tuning studies.";
    const ka = compareKinds[a], kb = compareKinds[b];
    if (ka && kb && ka !== kb) return `A is a ${ka} run and B a ${kb} run: these cannot be compared. Choose two runs of one kind (two simulations, two sweeps or two tuning studies).`;
    return null;
  }
  function setupCompare() {
    $("compare-form").addEventListener("submit", async (e) => {
      e.preventDefault();
      const box = $("compare-results");
      try {
        const a = $("compare-a").value, b = $("compare-b").value;
        const refused = compareRefusal(a, b);
        if (refused) { clear(box, el("p", { class: "verdict warn", id: "compare-refused", role: "alert" }, refused)); return; }
        localStorage.setItem("servesim.compare.a", a); localStorage.setItem("servesim.compare.b", b);
        const d = await api(`/api/compare?a=${a}&b=${b}`);
        clear(box, el("div", { class: "section" }, el("h2", {}, `A: ${d.a.title} · B: ${d.b.title}`),
          el("ul", { id: "compare-traces" }, el("li", {}, "A replayed ", traceText(d.traces.a)), el("li", {}, "B replayed ", traceText(d.traces.b))),
          workloadWarning(d.workload_warning),
          el("p", {}, el("a", { href: `/api/compare/report.html?a=${a}&b=${b}`, download: "" }, "Download the report's diff (HTML)")),
          SS.table({ key: "config_diff", title: d.config_diff.length ? "Settings that differ" : "Same settings", notes: [],
            columns: [{ key: "key", label: "setting", kind: "str" }, { key: "a", label: "A", kind: "str" }, { key: "b", label: "B", kind: "str" }],
            rows: d.config_diff.map((r) => [r.key, settingText(r.a), settingText(r.b)]) }),
          d.metrics.length ? deltaTable(d.metrics) : ""));
        for (const s of d.sections || []) SS.overlaySection(box, s);  // overlaid charts (issue 30)
      } catch (err) { clear(box, problemBlock(err)); }
    });
  }
  /* A run's trace as a comparison names it: name and the start of its content digest. */
  function traceText(t) { return t ? `${t.name} (digest ${t.digest.startsWith("sha256:") ? t.digest.slice(7, 19) : t.digest.slice(0, 60)})` : "a trace that is no longer stored"; }
  function workloadWarning(text) {
    return text ? el("p", { class: "verdict warn workload-warning", role: "alert" }, el("strong", {}, "Different workloads: "), text) : "";
  }
  /* A change as a person reads it: a percentage while it is modest, the ratio B/A beyond ±100 %. */
  function changeText(r) {
    if (r.pct === null) return "–";
    if (Math.abs(r.pct) >= 1 && r.ratio !== null) return "×" + SS.fmt(r.ratio, "float", r.ratio >= 100 ? 0 : 2);
    return (r.pct > 0 ? "+" : "") + (100 * r.pct).toFixed(1) + " %";
  }
  /* A setting's value as a person reads it: SS.fmt's integers (27,819 blocks), text, dash and
     yes/no; other numbers exactly as set (0.9, not 0.90); anything structured as JSON. */
  function settingText(v) {
    if (typeof v === "number") return Number.isInteger(v) ? SS.fmt(v, "int") : String(v);
    return v !== null && typeof v === "object" ? JSON.stringify(v) : SS.fmt(v, "str");
  }

  /* The comparison basket: runs kept in this browser (localStorage), one of them the baseline. */
  const basket = {
    get: () => JSON.parse(localStorage.getItem("servesim.basket") || "[]"),
    set: (items) => localStorage.setItem("servesim.basket", JSON.stringify(items.slice(-13))),
    baseline: () => localStorage.getItem("servesim.basket.baseline"),
  };
  function addToBasket(job) {
    const items = basket.get().filter((x) => x.id !== job.id);
    items.push({ id: job.id, title: `${job.created_at.slice(11, 19)} ${job.title}` });
    basket.set(items);
    if (!basket.baseline()) localStorage.setItem("servesim.basket.baseline", job.id);
    toast(`Added to the basket (${items.length} run${items.length === 1 ? "" : "s"}): compare them on the Compare tab`);
    renderBasketList();
  }
  function renderBasketList() {
    const items = basket.get();
    const list = $("basket-list");
    if (!items.length) { clear(list, el("p", { class: "empty" }, "The basket is empty.")); return; }
    let base = basket.baseline();
    if (!items.some((x) => x.id === base)) { base = items[0].id; localStorage.setItem("servesim.basket.baseline", base); }
    const body = el("tbody");
    items.forEach((x, i) => {
      const radio = el("input", { type: "radio", name: "basket-baseline", id: `basket-base-${i}`, value: x.id, checked: x.id === base,
        onchange: () => localStorage.setItem("servesim.basket.baseline", x.id) });
      body.append(el("tr", {}, el("td", {}, el("label", { class: "check", for: `basket-base-${i}`, "aria-label": `${x.title} as the baseline` }, radio)), el("td", {}, x.title),
        el("td", {}, el("button", { type: "button", class: "small secondary", "aria-label": `Remove ${x.title} from the basket`,
          onclick: () => { basket.set(basket.get().filter((y) => y.id !== x.id)); renderBasketList(); } }, "Remove"))));
    });
    clear(list, el("table", { id: "basket-table" }, el("caption", {}, `${items.length} run(s) in the basket`),
      el("thead", {}, el("tr", {}, ["baseline", "run", ""].map((h) => el("th", { scope: "col" }, h)))), body));
  }
  async function compareBasket() {
    const box = $("basket-results");
    const items = basket.get();
    const base = basket.baseline();
    const others = items.filter((x) => x.id !== base);
    if (!base || !others.length) { clear(box, problemBlock(new ApiError({ status: 422, title: "Basket", detail: "add at least two runs to the basket" }))); return; }
    try {
      const d = await api(`/api/compare/basket?baseline=${base}&${others.map((x) => "runs=" + x.id).join("&")}`);
      clear(box, el("ul", { id: "basket-traces" }, ...[d.baseline, ...d.runs].map((j, i) => el("li", {}, `${i ? j.title : "baseline " + j.title} replayed `, traceText(d.traces[i])))),
        workloadWarning(d.workload_warning));
      if (d.config_diff.length) box.append(SS.table({ key: "basket_config", title: "Settings that differ from the baseline", notes: [],
        columns: [{ key: "key", label: "setting", kind: "str" }, { key: "baseline", label: "baseline", kind: "str" }, ...d.runs.map((r, i) => ({ key: `r${i}`, label: r.title, kind: "str" }))],
        rows: d.config_diff.map((c) => [c.key, settingText(c.baseline), ...c.runs.map(settingText)]) }));
      for (const s of d.sections) (SS.isOverlaySection(s) ? SS.overlaySection : SS.section)(box, s);
      // colour each change by whether it is an improvement (the table says which direction is better)
      const t = d.sections[0].tables[0];
      box.querySelectorAll("table[data-key='basket'] tbody tr").forEach((tr, i) => {
        const row = t.rows[i];
        for (let j = 4; j < row.length; j += 2) {
          if (row[j] === null || row[j] === 0) continue;
          tr.children[j].classList.add((row[j] > 0) === (row[1] === "higher") ? "good" : "bad");
          if (Math.abs(row[j]) >= 1) tr.children[j].textContent = changeText({ pct: row[j], ratio: row[j] > -1 ? 1 + row[j] : null });
          else if (row[j] > 0) tr.children[j].textContent = "+" + tr.children[j].textContent;
        }
      });
    } catch (err) { clear(box, problemBlock(err)); }
  }
  function setupBasket() {
    $("basket-compare").addEventListener("click", compareBasket);
    $("basket-clear").addEventListener("click", () => { basket.set([]); localStorage.removeItem("servesim.basket.baseline"); clear($("basket-results")); renderBasketList(); });
    renderBasketList();
  }
  // a difference the step-time model's error for that metric covers: neither run is better
  const noiseOnly = (r) => r.better === null && r.noise_band != null && r.delta !== null && r.delta !== 0;
  function deltaTable(rows) {
    const table = el("table", { id: "metric-deltas" }, el("caption", {}, "Metric deltas (B − A)"),
      el("thead", {}, el("tr", {}, ["metric", "A", "B", "Δ", "change"].map((h, i) => el("th", { scope: "col", class: i ? "num" : null }, h)))));
    const body = el("tbody");
    for (const r of rows) {
      const cls = r.better === null ? null : r.better ? "good" : "bad";
      body.append(el("tr", {}, el("td", {}, r.label + (r.unit ? ` (${r.unit})` : "")), el("td", { class: "num" }, SS.fmt(r.a)), el("td", { class: "num" }, SS.fmt(r.b)),
        el("td", { class: `num ${cls || ""}` }, r.delta === null ? "–" : (r.delta > 0 ? "+" : "") + SS.fmt(r.delta)),
        el("td", { class: `num ${cls || ""}` }, changeText(r) + (noiseOnly(r) ? ` (within the model's ±${(100 * r.noise_band).toFixed(1)} %)` : ""))));
    }
    table.append(body);
    return el("div", { class: "table-wrap" }, table);
  }
  const OPENERS = { overlay: ["tab-measured", renderOverlay], simulate: ["tab-run", renderRun], saturate: ["tab-sweep", renderSweep], tune: ["tab-tune", renderTune], advise: ["tab-advise", renderAdvice] };
  async function openRun(row) {
    const run = await api(`/api/runs/${row.id}`);
    if (OPENERS[row.kind]) { OPENERS[row.kind][1](run); showTab($(OPENERS[row.kind][0])); return; }
    const target = row.kind === "recover" ? "recover" : "resched";
    const box = clear($(`${target}-results`));
    for (const s of run.result.sections) SS.section(box, s);
    showTab($(`tab-${target}`));
  }
  async function loadHistory() {
    const rows = await api("/api/runs");
    const table = el("table", { id: "history-table" }, el("caption", {}, `${rows.length} jobs, newest first (kept in the workbench database)`),
      el("thead", {}, el("tr", {}, ["when (UTC)", "kind", "what", "status", "seconds", ""].map((h) => el("th", { scope: "col" }, h)))));
    const body = el("tbody");
    for (const r of rows) {
      body.append(el("tr", {}, el("td", {}, r.created_at.replace("T", " ").slice(0, 19)), el("td", {}, r.kind), el("td", {}, r.title),
        el("td", { class: r.status === "failed" ? "bad" : null, title: r.error || null }, r.status + (r.error ? `: ${r.error.slice(0, 120)}` : "")),
        el("td", { class: "num" }, r.duration_s === null ? "–" : SS.fmt(r.duration_s)),
        el("td", {}, r.status === "done" ? el("button", { type: "button", class: "small secondary", onclick: () => openRun(r) }, "Open") : null,
          r.status === "done" && r.kind === "simulate" ? el("button", { type: "button", class: "small secondary", onclick: () => addToBasket(r) }, "Add to basket") : null)));
    }
    table.append(body);
    clear($("history-list"), table);
  }

  /* ------------------------------------------------------------------ start */
  async function start() {
    try {
      state.catalog = await api("/api/catalog");
      buildForms(state.catalog);
    } catch (e) { toast(`cannot load the catalog: ${e.message}`); return; }
    setupUpload(); setupRun(); setupSweep(); setupTune(); setupCompare(); setupAdvise(); setupBench(); setupBasket();
    setupPlan("recover", "/api/recover", (record) => ({ record }));
    setupPlan("resched", "/api/reschedule", (data) => ({ data, policy: $("resched-policy").value || null }));
    $("history-refresh").addEventListener("click", loadHistory);
    await loadTraces();
    if (state.traceId) await selectTrace(state.traceId);
    showGpuDefaults();
    resume("run", renderRun); resume("sweep", renderSweep); resume("tune", renderTune); resume("advise", renderAdvice); resume("bench", renderOverlay);
    const from = localStorage.getItem("servesim.settings");  // the shared panels show what the last job used
    if (from) { try { loadSettings((await api(`/api/runs/${from}`)).job.params); } catch (e) { localStorage.removeItem("servesim.settings"); } }
    placeShared(tabs.find((t) => t.getAttribute("aria-selected") === "true") || tabs[0]);
    const wanted = tabs.find((t) => t.id === "tab-" + location.hash.slice(1));
    if (wanted) showTab(wanted);
    document.body.dataset.ready = "1";
  }
  document.addEventListener("DOMContentLoaded", start);
})();
