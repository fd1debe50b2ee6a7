// jobforge dashboard: every view has an address (hash routes), the jobs table's
// filters, a job's attempt timeline, and the audit view. Loaded after app.js, whose
// state and helpers it uses.
//
//   #/jobs?status=failed&type=x&group=&pool=&target=&worker=&tenant=&id=   the table
//   #/jobs/{id}                     a job (its detail over the table)
//   #/groups/{name}, #/pools/{name}, #/targets/{name}, #/workers/{id}
//                                   the table narrowed to it, with its panel on top
//   #/audit                         who changed which job, and when
//
// Back and forward walk these (hashchange); a link opened in a new tab shows its view
// once the token is entered (the hash stays in the address through the sign-in).
"use strict";

// The table's filters besides status and type, each a query parameter of
// GET /api/jobs/page (tenant goes as X-Tenant; `id` as id_prefix), with the pattern
// the API checks.
const GATE_RE = /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}(\/[A-Za-z0-9][A-Za-z0-9._:@-]{0,63})?$/;
const FILTERS = {
  status: /^[a-z_]+$/,
  type: TYPE_RE,
  group: GATE_RE,
  pool: GATE_RE,
  target: GATE_RE,
  worker: /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}$/,
  tenant: /^[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}$/,
  id: /^[A-Za-z0-9_:-]{1,64}$/,
};
// An entity route narrows the table by one filter.
const ENTITIES = { groups: "group", pools: "pool", targets: "target", workers: "worker" };
const AUDIT_LIMIT = 100;

const route = {
  view: "jobs", // "jobs", "job", "entity" or "audit"
  job: null, // the job of a #/jobs/{id}
  entity: null, // {kind, name} of an entity route
  listHash: "#/jobs", // the last table address, where closing a job goes back to
};

function emptyFilters() {
  return Object.fromEntries(Object.keys(FILTERS).map((k) => [k, null]));
}

// `#/...` → {view, job, entity, filters}; anything unknown is the plain table.
function parseHash(hash) {
  const raw = hash.startsWith("#/") ? hash.slice(2) : "";
  const [path, query = ""] = raw.split(/\?(.*)/s);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const filters = emptyFilters();
  for (const [key, value] of new URLSearchParams(query)) {
    if (key in FILTERS && FILTERS[key].test(value)) filters[key] = value;
  }
  if (parts[0] === "audit") return { view: "audit", job: null, entity: null, filters };
  if (parts[0] === "jobs" && parts.length >= 2) {
    return { view: "job", job: parts.slice(1).join("/"), entity: null, filters };
  }
  if (parts[0] in ENTITIES && parts.length >= 2) {
    const name = parts.slice(1).join("/");
    const kind = ENTITIES[parts[0]];
    if (FILTERS[kind].test(name)) {
      filters[kind] = name;
      return { view: "entity", job: null, entity: { kind, name, section: parts[0] }, filters };
    }
  }
  return { view: "jobs", job: null, entity: null, filters };
}

function filterQuery(filters) {
  const params = new URLSearchParams();
  for (const key of Object.keys(FILTERS)) if (filters[key]) params.set(key, filters[key]);
  const text = params.toString();
  return text ? `?${text}` : "";
}

function listHashOf(filters) {
  return `#/jobs${filterQuery(filters)}`;
}

function navigate(hash) {
  if (location.hash !== hash) location.hash = hash; // one history entry; hashchange routes
  else applyRoute();
}

// The table with `changes` to its filters (status and type included).
function filterTo(changes) {
  const filters = { ...state.filters, ...changes };
  if (route.entity && changes[route.entity.kind] === undefined) {
    // An entity's page keeps its own filter in its path.
    const { section, name } = route.entity;
    filters[route.entity.kind] = null;
    navigate(`#/${section}/${targetPath(name)}${filterQuery(filters)}`);
    return;
  }
  navigate(listHashOf(filters));
}

function openJob(id) {
  navigate(`#/jobs/${encodeURIComponent(id)}${filterQuery(state.filters)}`);
}

function closeJob() {
  navigate(route.listHash);
}

function sameFilters(a, b) {
  return Object.keys(FILTERS).every((k) => (a[k] || null) === (b[k] || null));
}

// Shows the view the address names (after sign-in, and on every hashchange).
function applyRoute() {
  if (!state.running) return;
  const next = parseHash(location.hash);
  route.view = next.view;
  route.job = next.job;
  route.entity = next.entity;
  if (next.view !== "job" && next.view !== "audit") route.listHash = location.hash || "#/jobs";
  document.body.dataset.view = next.view;
  $("#audit").hidden = next.view !== "audit";
  $("#jobs-section").hidden = next.view === "audit";
  for (const link of document.querySelectorAll(".views a")) {
    link.setAttribute("aria-current", String(link.dataset.view === (next.view === "audit" ? "audit" : "jobs")));
  }
  if (next.view === "audit") {
    if (state.selected) closeDetail();
    guard(loadAudit);
    return;
  }
  if (!sameFilters(next.filters, state.filters)) {
    const typeChangedNow = next.filters.type !== state.filters.type ||
      next.filters.tenant !== state.filters.tenant;
    state.filters = next.filters;
    state.status = next.filters.status;
    state.type = next.filters.type;
    resetPages();
    renderChipsPressed();
    renderFilterInputs();
    guard(loadPage);
    if (typeChangedNow) guard(loadCounts);
  } else {
    renderFilterInputs();
  }
  renderEntity();
  if (next.view === "job") {
    if (state.selected !== next.job) selectJob(next.job);
  } else if (state.selected) {
    closeDetail();
  }
}

// ---------------------------------------------------------------- filter inputs

function renderFilterInputs() {
  for (const input of document.querySelectorAll("[data-filter]")) {
    const value = state.filters[input.dataset.filter] || "";
    if (document.activeElement !== input || !input.value) input.value = value;
    input.setCustomValidity("");
  }
  const body = $("#jobs-body");
  for (const key of Object.keys(FILTERS)) {
    body.dataset[`filter${key[0].toUpperCase()}${key.slice(1)}`] = state.filters[key] || "";
  }
}

const filterInputChanged = debounce(() => {
  const changes = {};
  for (const input of document.querySelectorAll("[data-filter]")) {
    const key = input.dataset.filter;
    const value = input.value.trim();
    if (value && !FILTERS[key].test(value)) {
      input.setCustomValidity(`not a valid ${key}`);
      input.reportValidity();
      return;
    }
    input.setCustomValidity("");
    if ((value || null) !== (state.filters[key] || null)) changes[key] = value || null;
  }
  if (Object.keys(changes).length) filterTo(changes);
}, 300);

// The page's query: every filter but the tenant (a header) and the id (id_prefix).
function pageParams(params) {
  const f = state.filters;
  for (const key of ["status", "type", "group", "pool", "target", "worker"]) {
    if (f[key]) params.set(key, f[key]);
  }
  if (f.id) params.set("id_prefix", f.id);
  return params;
}

function tenantHeaders() {
  return state.filters.tenant ? { "X-Tenant": state.filters.tenant } : {};
}

// Whether a row still belongs in the table. A row made from an event (`fresh`) has no
// group, pool or target: with one of those filters it waits for the page's re-read.
function matchesFilters(job, fresh) {
  const f = state.filters;
  if (f.status && statusLabel(job) !== f.status) return false;
  if (f.type && job.type !== f.type) return false;
  if (f.worker && job.worker_id !== f.worker) return false;
  if (f.id && !job.id.startsWith(f.id)) return false;
  if (f.tenant && (job.tenant || null) !== f.tenant) return false;
  return !(fresh && (f.group || f.pool || f.target));
}

// ---------------------------------------------------------------- entity pages

function entityLink(kind, name, label) {
  const section = Object.keys(ENTITIES).find((s) => ENTITIES[s] === kind);
  return h("a", { href: `#/${section}/${targetPath(name)}`, class: `entity-link ${kind}-link`,
                  "data-entity": kind, title: `Open ${kind} ${name}` }, label || name);
}

// The panel of the group, pool, target or worker the page is about, above the table.
function renderEntity() {
  const box = $("#entity-view");
  const entity = route.entity;
  box.hidden = !entity;
  if (!entity) {
    box.replaceChildren();
    return;
  }
  const { kind, name } = entity;
  let item = null;
  if (kind === "group") {
    const g = state.groups.find((x) => x.group === name);
    item = g && groupItem(g);
  } else if (kind === "pool") {
    const p = state.pools.find((x) => x.pool === name);
    item = p && poolItem(p);
  } else if (kind === "target") {
    const t = state.targetViews.get(name);
    item = t && targetItem(t.view);
  } else if (kind === "worker") {
    const w = (state.workers || []).find((x) => x.worker_id === name);
    item = w && h("div", { class: "muted small" },
                  `${w.alive ? "alive" : "dead"} · ${w.active_jobs} active · ${w.kind}`);
  }
  box.dataset.kind = kind;
  box.dataset.name = name;
  box.replaceChildren(
    h("h2", {}, `${kind[0].toUpperCase()}${kind.slice(1)} `, h("code", { id: "entity-name" }, name),
      " ", h("a", { href: "#/jobs", class: "small" }, "all jobs")),
    item ? h("ul", { class: "gate-list" }, item) : h("p", { class: "muted small" }, "Not listed (yet)."),
  );
}

// ---------------------------------------------------------------- timeline

const PHASES = new Set(["pending", "assigned", "running", "stop_requested"]);

// A job's attempts from its transitions: each a run of phases (pending, assigned,
// running) from the pending that queued it to the transition that ended it (`end`),
// and what became of the job then (`then`: re-queued, quarantined…).
function attemptsOf(job) {
  const ts = job.transitions;
  const attempts = [];
  let current = null;
  const live = !isEnded(job) && job.status !== "failed";
  for (let i = 0; i < ts.length; i += 1) {
    const t = ts[i];
    const next = ts[i + 1];
    const last = attempts[attempts.length - 1];
    if (!PHASES.has(t.status)) {
      if (current) current.end = t;
      else if (last && !last.then) last.then = t;
      current = null;
      continue;
    }
    if (t.status === "pending" && current && current.phases.some((p) => p.status !== "pending")) {
      current.end = t; // re-queued with no failure of its own (a lease lost, a recall)
      current = null;
    }
    if (!current) {
      if (last && last.end && !last.then && t.status === "pending") last.then = t;
      current = { attempt: t.attempt, phases: [], worker: null, end: null, then: null };
      attempts.push(current);
    }
    if (t.status !== "pending") current.attempt = t.attempt;
    if (t.worker_id) current.worker = t.worker_id;
    const until = next ? next.ts : live ? Date.now() : t.ts;
    current.phases.push({ status: t.status, start: t.ts, ms: Math.max(until - t.ts, 0) });
  }
  return attempts;
}

function transitionText(t) {
  if (t.status === "pending") return `re-queued${t.reason ? `: ${t.reason}` : ""}`;
  const label = t.status === "failed" && t.reason === "cancelled" ? "cancelled" : t.status;
  const why = `${label}${t.reason && t.reason !== label ? `: ${t.reason}` : ""}`;
  return t.by ? `${why} (by ${t.by})` : why;
}

function endText(attempt, job) {
  if (!attempt.end) return isEnded(job) || job.status === "failed" ? "—" : "under way";
  const then = attempt.then && attempt.then !== attempt.end ? ` → ${transitionText(attempt.then)}` : "";
  return `${transitionText(attempt.end)}${then}`;
}

function timeline(job) {
  const attempts = attemptsOf(job);
  if (!attempts.length) return h("p", { id: "detail-timeline", class: "muted" }, "No transitions.");
  const total = Math.max(...attempts.map((a) => a.phases.reduce((s, p) => s + p.ms, 0)), 1);
  return h("div", { id: "detail-timeline", class: "timeline" }, attempts.map((a, i) => {
    const host = a.worker && a.worker === job.worker_id ? job.host : null;
    return h(
      "div",
      { class: "attempt", "data-attempt": a.attempt || i + 1, "data-worker": a.worker || "",
        "data-host": host || "", "data-end": a.end ? a.end.status : "" },
      h("div", { class: "attempt-meta small" },
        h("strong", {}, `Attempt ${a.attempt || i + 1}`), " · worker ",
        a.worker ? entityLink("worker", a.worker) : "—",
        host && [" · host ", h("code", { class: "attempt-host" }, host)],
        " · ", h("span", { class: "attempt-end" }, endText(a, job))),
      h("div", { class: "attempt-bar" }, a.phases.map((p) => {
        const seg = h("span", { class: `phase s-${p.status}`, "data-phase": p.status,
                                "data-ms": String(p.ms),
                                title: `${p.status} ${formatDuration(p.ms)} from ${formatTime(p.start)}` },
                      `${p.status} ${formatDuration(p.ms)}`);
        seg.style.flexGrow = String(Math.max(p.ms / total, 0.08));
        return seg;
      })),
    );
  }));
}

// ---------------------------------------------------------------- audit

async function loadAudit() {
  const body = await getJson(`/api/audit?limit=${AUDIT_LIMIT}`);
  if (route.view !== "audit") return;
  const rows = body.entries.map((e) => e.gate ? auditGateRow(e) : h(
    "tr",
    { "data-job-id": e.job_id, "data-by": e.by, "data-status": e.status },
    h("td", { title: new Date(e.ts).toISOString() }, formatTime(e.ts)),
    h("td", { class: "audit-by" }, e.by),
    h("td", {}, e.status === "failed" && e.reason === "cancelled" ? "cancelled" : e.status,
      e.reason && e.reason !== "cancelled" ? h("span", { class: "muted" }, ` (${e.reason})`) : ""),
    h("td", { class: "mono" }, h("a", { href: `#/jobs/${encodeURIComponent(e.job_id)}` }, e.job_id)),
    h("td", {}, e.type),
  ));
  $("#audit-body").replaceChildren(...rows);
  $("#audit-empty").hidden = rows.length > 0;
  $("#audit-summary").textContent =
    `${rows.length} changes among the ${body.jobs_read} latest jobs and ${body.gates_read ?? 0} gates`;
}

// A gate's change: who paused, resumed, set or locked which group, pool or target.
function auditGateRow(e) {
  return h(
    "tr",
    { "data-gate": e.gate, "data-by": e.by ?? "", "data-action": e.action },
    h("td", { title: new Date(e.ts).toISOString() }, formatTime(e.ts)),
    h("td", { class: "audit-by" }, e.by ?? "—"),
    h("td", {}, e.action, e.detail ? h("span", { class: "muted" }, ` (${e.detail})`) : ""),
    h("td", { class: "mono" }, e.gate),
    h("td", { class: "muted" }, "gate"),
  );
}

document.addEventListener("DOMContentLoaded", () => {
  for (const input of document.querySelectorAll("[data-filter]")) {
    input.addEventListener("input", filterInputChanged);
  }
  $("#audit-refresh").addEventListener("click", () => guard(loadAudit));
});
