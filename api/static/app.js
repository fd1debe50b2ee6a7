// jobforge dashboard: plain JS, no build step. One page of jobs at a time, kept live
// from the server-sent event stream; counts and page 1 are re-read (throttled) after events.
// Running jobs' progress bars (their rows, the open detail) move with `job:progress` events.
// The side panels (fleet, groups, pools, targets, and schedules from static/schedules.js)
// are re-read every PANELS_EVERY_MS, one list call each, while the tab is visible, and
// PANELS_AFTER_EVENTS_MS after a burst of job transitions (a job's end frees its pool's
// units and moves its group's counts), at most once per that gap.
"use strict";

// The status chips: the API's statuses, and a cancelled job (failed with fail_reason
// "cancelled") on its own, as its row and GET /api/jobs/counts tell it.
const STATUSES = [
  "pending", "assigned", "running", "stop_requested", "stopped", "completed", "failed",
  "cancelled", "quarantined",
];
const EVENT_NAMES = [
  "job:created", "job:assigned", "job:running", "job:completed",
  "job:failed", "job:pending", "job:quarantined",
  "job:stop_requested", "job:stopped", "job:progress",
];
const CANCELLABLE = new Set(["pending", "assigned"]);
// POST /api/jobs/{id}/stop: a pending or assigned job is cancelled, a running one stopped.
const STOPPABLE = new Set(["pending", "assigned", "running"]);
// An attempt is under way (or about to be): its progress and log lines may still change.
const LIVE = new Set(["assigned", "running", "stop_requested"]);
// An ended job, as workflows/job_states.py's is_ended tells it: completed, quarantined or
// stopped, or failed for a final reason (a failed attempt with another to come is open).
// POST /api/ops/jobs/{id}/requeue retries it under its id.
const TERMINAL = new Set(["completed", "quarantined", "stopped"]);
const FINAL_FAILED_REASONS = new Set(["cancelled", "deadline_exceeded", "host_unavailable"]);
const TYPE_RE = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const TOKEN_KEY = "jobforge.token";
// Rows per page: 50, or ?limit=N (1…200) in the page's address.
const PAGE_SIZE = Math.min(Math.max(Number(new URLSearchParams(location.search).get("limit")) || 50, 1), 200);
const PANELS_EVERY_MS = 5000;
const PANELS_AFTER_EVENTS_MS = 1000;
// A new stream replays the transitions from this long before the page's last read: the
// Date header's second, and a job visibility showed the read late.
const SINCE_MARGIN_MS = 5000;
// Why a pending job is not running yet (`waiting_for` on a job read), in the words of
// docs/scheduling.md.
const WAITING_FOR = {
  group_paused: "its group is paused",
  group_limit: "its group's max_parallel is reached",
  pool_capacity: "its pool has no room (or a job ahead reserves it)",
  target_busy: "another job of its target holds it",
  target_halted: "its target is halted by a failed job",
  start_time: "before its earliest_start_at",
  host: "its host has not claimed it (require_host, or preferred_host within its wait)",
  no_worker: "no live worker that can run it has polled its queue in 90 s",
};
const RESULT_PREVIEW_CHARS = 2000;
const LATEST_KEEP = 5000;
// The log view polls the open attempt every LOG_POLL_MS while it runs, and keeps its
// last LOG_KEEP lines in the DOM.
const LOG_POLL_MS = 1000;
const LOG_KEEP = 2000;

const state = {
  config: null,
  me: null, // GET /api/whoami: the token's name, role, tenant and the actions it may use
  status: null, // status filter, or null for all
  type: null, // type filter, or null
  filters: {}, // every filter of the table, from the address (static/console.js)
  workers: [], // GET /api/workers, as last read
  tokens: [null], // tokens[i]: page_token of page i (page 0 has none)
  page: 0,
  nextToken: null,
  rows: new Map(), // job id → {job, tr} on screen
  latest: new Map(), // job id → its latest event (bounded), laid over fetched rows
  progress: new Map(), // job id → {attempt, progress} of its live attempt (bounded)
  queued: [], // events waiting for the next flush
  generation: 0, // bumped on each page load, so a stale answer is dropped
  pageDirty: false, // page 1 membership changed locally: re-read it
  pageReadAt: null, // the API's time (epoch ms) at the page's last read
  selected: null,
  detail: null,
  cancelMessage: null, // {id, text, error}
  stopMessage: null, // {id, text, error}: the last stop's answer
  retryMessage: null, // {id, text, error}: the last retry's answer
  log: null, // the open job's log view (see newLog)
  groups: [], // GET /api/groups, as last read or changed here
  pools: [], // GET /api/pools
  groupsSeq: 0, // bumped by a pause/resume here, so a list read begun before it is dropped
  busy: new Set(), // groups with a pause/resume in flight
  groupMessages: new Map(), // group → {text, error} of its last refused action
  targetNames: [], // GET /api/targets, as last read (and any target resumed here since)
  targetViews: new Map(), // target → {view, asOf}: the freshest view of it (see keepTarget)
  targetBusy: new Set(), // targets with a resume in flight
  targetMessages: new Map(), // target → {text, error} of its last resume here
  stream: null,
  timers: {},
  panelsSoon: false, // a read of the panels after events is due (schedulePanels)
  running: false,
};

const $ = (selector) => document.querySelector(selector);

// ---------------------------------------------------------------- helpers

function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = value;
    else if (key.startsWith("on")) el.addEventListener(key.slice(2), value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : String(child));
  }
  return el;
}

// The side's list panels, each a heading with a summary and a list: made as this script
// runs (deferred: the page is parsed, and no other script has run yet).
const GATE_PANELS = [
  ["groups", "Groups", "group-list"],
  ["pools", "Pools", "pool-list"],
  ["targets", "Targets", "target-list"],
  ["schedules", "Schedules", "schedule-list"],
];

for (const [name, title, list] of GATE_PANELS) {
  $(".side").append(
    h("section", { class: "gates", "aria-labelledby": `${name}-heading` },
      h("h2", { id: `${name}-heading` }, `${title} `, h("span", { id: `${name}-summary`, class: "muted" })),
      h("ul", { id: list, class: "gate-list" })));
}

function pad(n) {
  return String(n).padStart(2, "0");
}

function formatTime(ms) {
  if (!ms) return "—";
  const d = new Date(ms);
  const time = `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
  if (d.toDateString() === new Date().toDateString()) return time;
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${time}`;
}

function formatDuration(ms) {
  if (ms === null || ms === undefined || ms < 0) return "—";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.round(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}

function ago(ms) {
  if (!ms) return "never";
  return `${formatDuration(Math.max(Date.now() - ms, 0))} ago`;
}

// A throttled debounce: runs `wait` ms after the last call, and at least every `maxWait`.
function debounce(fn, wait, maxWait = Infinity) {
  let timer = null;
  let first = null;
  const run = () => {
    clearTimeout(timer);
    timer = null;
    first = null;
    fn();
  };
  const call = () => {
    const now = Date.now();
    if (first === null) first = now;
    clearTimeout(timer);
    timer = setTimeout(run, Math.max(0, Math.min(wait, first + maxWait - now)));
  };
  call.cancel = () => {
    clearTimeout(timer);
    timer = null;
    first = null;
  };
  return call;
}

function statusLabel(job) {
  return job.status === "failed" && job.fail_reason === "cancelled" ? "cancelled" : job.status;
}

function isEnded(job) {
  if (job.status === "failed") return FINAL_FAILED_REASONS.has(job.fail_reason);
  return TERMINAL.has(job.status);
}

function badge(job) {
  const label = statusLabel(job);
  return h("span", { class: `badge s-${label}`, "data-status": label }, label);
}

function showError(text) {
  const banner = $("#error-banner");
  banner.textContent = text || "";
  banner.hidden = !text;
}

// ---------------------------------------------------------------- API access

class Unauthorized extends Error {}

async function api(path, options = {}) {
  const token = sessionStorage.getItem(TOKEN_KEY) || "";
  const response = await fetch(path, {
    ...options,
    headers: { ...(options.headers || {}), Authorization: `Bearer ${token}` },
  });
  if (response.status === 401) {
    signOut("That token was refused; enter it again.");
    throw new Unauthorized();
  }
  return response;
}

async function errorText(response) {
  try {
    const body = await response.json();
    return body.error || `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

async function getJson(path) {
  const response = await api(path);
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

// Runs an async step; a 401 is handled by api(), other failures go to the banner.
async function guard(step) {
  try {
    await step();
  } catch (err) {
    if (!(err instanceof Unauthorized)) showError(err.message || String(err));
  }
}

// ---------------------------------------------------------------- sign in / out

// Whether the signed-in token's role may use a dashboard action (GET /api/whoami's
// `may`, from the API's route table); the buttons of the others are not shown.
function may(action) {
  return Boolean(state.me && state.me.may && state.me.may[action]);
}

function renderPrincipal() {
  const badge = $("#principal-badge");
  const me = state.me;
  badge.hidden = !me;
  if (!me) return;
  badge.dataset.role = me.role;
  badge.dataset.tenant = me.tenant || "";
  badge.title = `token ${me.name}`;
  badge.replaceChildren(
    h("span", { class: "tenant" }, me.tenant || "all tenants"),
    " · ",
    h("span", { class: "role" }, me.role),
  );
}

function signOut(message) {
  sessionStorage.removeItem(TOKEN_KEY);
  stop();
  setStreamState("signed-out", "signed out");
  $("#app").hidden = true;
  $("#job-detail").hidden = true;
  $("#sign-out").hidden = true;
  state.me = null;
  renderPrincipal();
  $("#login-form").hidden = false;
  $("#login-error").textContent = message || "";
  $("#token-input").value = "";
  $("#token-input").focus();
}

function stop() {
  state.running = false;
  dropLog();
  if (state.stream) state.stream.close();
  state.stream = null;
  for (const timer of Object.values(state.timers)) clearTimeout(timer);
  state.timers = {};
  state.panelsSoon = false;
  refreshSoon.cancel();
}

async function start() {
  stop();
  $("#login-form").hidden = true;
  setStreamState("connecting", "connecting…");
  try {
    state.config = await getJson("/api/config");
    state.me = await getJson("/api/whoami");
    renderPrincipal();
    const cacheMs = state.config.counts_cache_ms || 0;
    settleCounts =
      cacheMs > 0
        ? debounce(() => guard(() => loadCountsSince(Date.now() - cacheMs - 250)), cacheMs + 250)
        : () => {};
  } catch (err) {
    if (!(err instanceof Unauthorized)) {
      setStreamState("offline", "offline");
      $("#login-form").hidden = false;
      $("#login-error").textContent = `Cannot reach the API: ${err.message}`;
    }
    return;
  }
  state.running = true;
  $("#app").hidden = false;
  $("#sign-out").hidden = false;
  showError("");
  // The view the address names (a pasted link: after the sign-in, too).
  const asked = parseHash(location.hash).filters;
  Object.assign(state, { filters: asked, status: asked.status, type: asked.type });
  renderChips();
  renderFilterInputs();
  // The jobs table first: the other panels' reads (counts, fleet, gates) cost more as
  // the jobs pile up, and on a small server they would slow the first rows down.
  await guard(loadPage);
  await Promise.all([
    guard(loadCounts), guard(loadFleet), guard(loadGroups), guard(loadPools), guard(loadTargets),
    guard(loadSchedules),
  ]);
  applyRoute();
  openStream();
  schedulePanels();
}

// ---------------------------------------------------------------- counts and chips

function renderChips() {
  const chip = (status) =>
    h(
      "button",
      {
        class: "chip",
        type: "button",
        "data-status": status,
        onclick: () => setStatusFilter(status === "all" || state.status === status ? null : status),
      },
      h("span", { class: `dot s-${status}` }),
      status,
      h("span", { class: "count", "data-count": status }, "…"),
    );
  $("#status-chips").replaceChildren(chip("all"), ...STATUSES.map(chip));
  renderChipsPressed();
}

function renderChipsPressed() {
  for (const chip of document.querySelectorAll("#status-chips .chip")) {
    chip.setAttribute("aria-pressed", String((state.status || "all") === chip.dataset.status));
  }
}

// Shows the counts; returns when the API made them (epoch ms, X-Counts-As-Of).
async function loadCounts() {
  const type = state.type;
  const params = new URLSearchParams();
  if (type) params.set("type", type);
  const response = await api(`/api/jobs/counts?${params}`, { headers: tenantHeaders() });
  if (!response.ok) throw new Error(await errorText(response));
  const counts = await response.json();
  const asOf = Number(response.headers.get("X-Counts-As-Of")) || Date.now();
  if (!state.running || type !== state.type) return asOf;
  const total = STATUSES.reduce((sum, s) => sum + (counts[s] || 0), 0);
  for (const [status, count] of [["all", total], ...STATUSES.map((s) => [s, counts[s] || 0])]) {
    $(`#status-chips [data-count="${status}"]`).textContent = count;
  }
  return asOf;
}

// The API reuses counts for `counts_cache_ms` (METRICS_CACHE_MS), and gives a kept answer
// while it makes a fresh one: once that window has passed, the counts are read again
// until they were made after the events that asked for them (a few reads at most).
const SETTLE_TRIES = 10;
const SETTLE_RETRY_MS = 500;
let settleCounts = () => {};

async function loadCountsSince(since) {
  for (let tries = 0; tries < SETTLE_TRIES && state.running; tries += 1) {
    if ((await loadCounts()) >= since) return;
    await new Promise((resolve) => setTimeout(resolve, SETTLE_RETRY_MS));
  }
}

// Counts (and page 1, when its rows changed here) are re-read shortly after events.
const refreshSoon = debounce(
  () => {
    guard(loadCounts);
    settleCounts();
    if (state.pageDirty && state.page === 0) guard(loadPage);
  },
  500,
  2000,
);

// A chip changes the address; the route then reads the page (static/console.js).
function setStatusFilter(status) {
  filterTo({ status });
}

// ---------------------------------------------------------------- the jobs page

// Back to the first page of a new filter. The pager stays off until that page is read:
// a Next pressed meanwhile would turn the old filter's page.
function resetPages() {
  state.tokens = [null];
  state.page = 0;
  state.nextToken = null;
  renderPager();
}

// Whether transition `a` comes after `b`, each [ts, seq]: by time, then by the job's
// transition number (a job may go assigned, running and completed within a millisecond).
function comesAfter(a, b) {
  return a[0] !== b[0] ? a[0] > b[0] : a[1] > b[1];
}

// Whether `event` comes after what the row `job` shows.
function isLater(event, job) {
  return comesAfter([event.ts, event.seq], [job.updated_at, job.seq || 0]);
}

function overlay(job) {
  // A fetched row may be older than an event already seen for it.
  const event = state.latest.get(job.id);
  return event && isLater(event, job) ? applyEvent({ ...job }, event) : job;
}

async function loadPage() {
  const generation = ++state.generation;
  state.pageDirty = false;
  // A chip's name is the API's filter: `cancelled` too, and `failed` leaves those out.
  const params = pageParams(new URLSearchParams({ limit: String(PAGE_SIZE) }));
  const token = state.tokens[state.page];
  if (token) params.set("page_token", token);
  const response = await api(`/api/jobs/page?${params}`, { headers: tenantHeaders() });
  if (!response.ok) throw new Error(await errorText(response));
  const page = await response.json();
  if (generation !== state.generation || !state.running) return;
  // The API's clock at the read (X-Read-At, else its Date header, to the second): where
  // a new stream starts its replay, and what is older than the page.
  const readAt = Number(response.headers.get("X-Read-At"));
  const served = readAt || Date.parse(response.headers.get("date") || "");
  if (!Number.isNaN(served)) state.pageReadAt = served;
  state.nextToken = page.next_page_token;
  renderJobs(page.jobs.map(overlay).filter(matches));
  renderPager();
}

async function turnPage(step) {
  if (step < 0 && state.page === 0) return;
  if (step > 0) {
    if (!state.nextToken) return;
    state.tokens[state.page + 1] = state.nextToken;
  }
  state.page += step;
  $("#prev-page").disabled = true;
  $("#next-page").disabled = true;
  await guard(loadPage);
  renderPager();
}

function renderPager() {
  $("#prev-page").disabled = state.page === 0;
  $("#next-page").disabled = !state.nextToken;
  $("#page-info").textContent = `Page ${state.page + 1}`;
}

function renderJobs(jobs) {
  // A job still on the page keeps its row, refilled and moved only if its place changed:
  // a click whose press and release straddle a re-read still lands on its row (a new
  // row under the release would take the click from it).
  const kept = new Map([...state.rows].map(([id, shown]) => [id, shown.tr]));
  state.rows.clear();
  const body = $("#jobs-body");
  const rows = jobs.map((job) => {
    const tr = kept.get(job.id);
    if (!tr) return makeRow(job);
    state.rows.set(job.id, { job, tr });
    fillRow(tr, job);
    return tr;
  });
  rows.forEach((tr, i) => {
    if (body.children[i] !== tr) body.insertBefore(tr, body.children[i] || null);
  });
  while (body.children.length > rows.length) body.lastElementChild.remove();
  // What is on screen, for tests and scripts to wait on.
  body.dataset.filterStatus = state.status || "";
  body.dataset.filterType = state.type || "";
  body.dataset.page = String(state.page + 1);
  updateEmpty();
}

function updateEmpty() {
  $("#jobs-empty").hidden = state.rows.size > 0;
}

function makeRow(job) {
  const cell = (field, cls) => h("td", { "data-field": field, class: cls });
  const tr = h(
    "tr",
    { "data-job-id": job.id, tabindex: "0" },
    cell("id", "mono"),
    cell("type"),
    cell("priority", "num"),
    cell("status"),
    cell("attempts", "num"),
    cell("worker", "mono"),
    cell("created"),
    cell("updated"),
    cell("reason", "reason"),
  );
  tr.addEventListener("click", () => openJob(job.id));
  tr.addEventListener("keydown", (e) => {
    if (e.key === "Enter") openJob(job.id);
  });
  state.rows.set(job.id, { job, tr });
  fillRow(tr, job);
  return tr;
}

function fillRow(tr, job) {
  const set = (field, value, title) => {
    const td = tr.querySelector(`[data-field="${field}"]`);
    if (value instanceof Node) td.replaceChildren(value);
    else td.textContent = value;
    td.title = title || "";
  };
  tr.dataset.status = job.status;
  tr.classList.toggle("selected", job.id === state.selected);
  set("id", job.id, job.id);
  set("type", job.type);
  set("priority", job.priority);
  const bar = rowProgress(job);
  set("status", bar ? h("span", { class: "status-cell" }, badge(job), bar) : badge(job));
  set("attempts", job.attempts);
  set("worker", job.worker_id || "—");
  set("created", formatTime(job.created_at), new Date(job.created_at).toISOString());
  set("updated", formatTime(job.updated_at), new Date(job.updated_at).toISOString());
  const reason = job.status !== "completed" && job.fail_reason ? job.fail_reason : "";
  set("reason", reason, reason);
}

function matches(job) {
  return matchesFilters(job, false);
}

function applyEvent(job, event) {
  job.status = event.status;
  job.attempts = event.attempts;
  job.worker_id = event.worker_id;
  job.updated_at = event.ts;
  job.seq = event.seq;
  if (event.reason) job.fail_reason = event.reason;
  return job;
}

function summaryOf(event) {
  return applyEvent(
    { id: event.id, type: event.type, priority: event.priority, created_at: event.created_at,
      fail_reason: null },
    event,
  );
}

function remember(event) {
  state.latest.delete(event.id);
  state.latest.set(event.id, event);
  if (state.latest.size > LATEST_KEEP) state.latest.delete(state.latest.keys().next().value);
}

// Whether `progress` is at least as recent as `current` (either may be missing).
function newer(progress, current) {
  return Boolean(progress) && (!current || (progress.at || 0) >= (current.at || 0));
}

// Keep a live attempt's progress, from a job:progress event or a read of the job; the
// freshest wins.
function keepProgress(id, attempt, progress) {
  const known = state.progress.get(id);
  if (known && known.attempt === attempt && !newer(progress, known.progress)) return known;
  state.progress.delete(id);
  state.progress.set(id, { attempt, progress });
  if (state.progress.size > LATEST_KEEP) state.progress.delete(state.progress.keys().next().value);
  return state.progress.get(id);
}

// A job:progress event: the row's bar and, if the job is open, the detail's, in place
// (no read of the job).
function showProgress(event) {
  const kept = keepProgress(event.id, event.attempt, event.progress);
  const shown = state.rows.get(event.id);
  if (shown) fillRow(shown.tr, shown.job);
  const detail = state.detail;
  if (!detail || detail.id !== event.id || state.selected !== event.id) return;
  if (!LIVE.has(detail.status) || detail.attempt !== kept.attempt) return;
  if (!newer(kept.progress, detail.progress)) return;
  detail.progress = kept.progress;
  const bar = $("#detail-progress");
  if (bar) bar.replaceWith(progressBar(detail));
}

// Rows on screen change in place. Jobs new to page 1 are gathered in `fresh` first,
// so a burst of thousands of jobs builds at most one page of rows.
function handleEvent(event, fresh) {
  if (event.event === "job:progress") {
    showProgress(event);
    return;
  }
  // A transition ends what the attempt said of its progress; after a stop request the
  // solver still runs (and reports) until it is killed.
  if (event.status !== "stop_requested") state.progress.delete(event.id);
  remember(event);
  if (event.id === state.selected) detailSoon();
  const shown = state.rows.get(event.id);
  if (shown) {
    if (!isLater(event, shown.job)) return;
    applyEvent(shown.job, event);
    if (matches(shown.job)) {
      fillRow(shown.tr, shown.job);
    } else {
      shown.tr.remove();
      state.rows.delete(event.id);
      state.pageDirty = true;
    }
  } else if (fresh.has(event.id)) {
    applyEvent(fresh.get(event.id), event);
  } else if (state.page === 0 && (event.event === "job:created" || state.status)) {
    // A transition from before the page's read (a stream replaying from before it) is
    // in that read, on this page or another: the re-read places it, not the top.
    if (state.pageReadAt && event.ts < state.pageReadAt) state.pageDirty = true;
    else fresh.set(event.id, summaryOf(event));
  }
}

function flushEvents() {
  state.timers.flush = null;
  const events = state.queued;
  state.queued = [];
  const fresh = new Map();
  for (const event of events) handleEvent(event, fresh);
  if (events.some((event) => event.event !== "job:progress")) panelsSoon();
  // Newest on top now; the throttled re-read of page 1 then puts it in the API's order.
  const added = [...fresh.values()].filter((job) => matchesFilters(job, true))
    .slice(-PAGE_SIZE).reverse();
  // A new job a gate filter may hold shows with the page's re-read.
  if (fresh.size && !added.length) state.pageDirty = true;
  if (added.length) {
    const body = $("#jobs-body");
    body.prepend(...added.map(makeRow));
    while (state.rows.size > PAGE_SIZE) {
      const last = body.lastElementChild;
      state.rows.delete(last.dataset.jobId);
      last.remove();
    }
    state.pageDirty = true;
  }
  updateEmpty();
  refreshSoon();
}

// ---------------------------------------------------------------- the event stream

function setStreamState(name, text) {
  const el = $("#stream-status");
  el.dataset.state = name;
  el.textContent = text;
}

async function streamUrl() {
  const params = new URLSearchParams();
  // What changed from the page's last read on: a job made while the stream was opening
  // is replayed, not lost (the read's own moment may lag visibility: a margin back).
  if (state.pageReadAt) params.set("since", String(state.pageReadAt - SINCE_MARGIN_MS));
  // A stream token even when the stream is open: without one it carries only the jobs
  // that have no tenant.
  const response = await api("/api/events/token", { method: "POST" });
  if (response.ok) {
    params.set("token", (await response.json()).token);
  } else if (state.config.events_require_token) {
    throw new Error(await errorText(response));
  }
  const query = params.toString();
  return query ? `/api/jobs/events?${query}` : "/api/jobs/events";
}

async function openStream() {
  if (!state.running) return;
  let url;
  try {
    url = await streamUrl();
  } catch (err) {
    if (err instanceof Unauthorized) return;
    setStreamState("down", "stream unavailable");
    state.timers.stream = setTimeout(openStream, 3000);
    return;
  }
  if (!state.running) return;
  const source = new EventSource(url);
  state.stream = source;
  source.onopen = () => {
    setStreamState("live", "live");
    // A connection starts at "now" (a new API process's feed, at its first client):
    // re-read what changed between the page's last read and this moment, the first
    // connection's included.
    guard(loadPage);
    refreshSoon();
  };
  source.onerror = () => {
    if (state.stream !== source) return;
    if (source.readyState === EventSource.CLOSED) {
      // Refused (an expired stream token, or the API went away): start over.
      source.close();
      state.stream = null;
      setStreamState("down", "reconnecting…");
      state.timers.stream = setTimeout(openStream, 2000);
    } else {
      setStreamState("down", "reconnecting…");
    }
  };
  const receive = (message) => {
    if (state.stream !== source) return;
    state.queued.push(JSON.parse(message.data));
    if (!state.timers.flush) state.timers.flush = setTimeout(flushEvents, 50);
  };
  for (const name of EVENT_NAMES) source.addEventListener(name, receive);
}

// ---------------------------------------------------------------- job detail

const detailSoon = debounce(() => {
  if (state.selected) guard(() => loadDetail(state.selected));
}, 250, 1000);

function selectJob(id) {
  if (state.selected !== id) {
    state.cancelMessage = null;
    state.stopMessage = null;
    state.retryMessage = null;
    dropLog();
    if (state.targetMessages.size) {
      state.targetMessages.clear();
      renderTargets();
    }
  }
  state.selected = id;
  for (const { job, tr } of state.rows.values()) tr.classList.toggle("selected", job.id === id);
  const panel = $("#job-detail");
  panel.hidden = false;
  if (!state.detail || state.detail.id !== id) {
    panel.replaceChildren(detailHeader(id), h("p", { class: "muted" }, "Loading…"));
  }
  guard(() => loadDetail(id));
}

function closeDetail() {
  state.selected = null;
  state.detail = null;
  dropLog();
  $("#job-detail").hidden = true;
  for (const { tr } of state.rows.values()) tr.classList.remove("selected");
}

async function loadDetail(id) {
  const response = await api(`/api/jobs/${encodeURIComponent(id)}`);
  if (state.selected !== id) return;
  if (!response.ok) {
    $("#job-detail").replaceChildren(
      detailHeader(id),
      h("p", { class: "error" }, await errorText(response)),
    );
    return;
  }
  state.detail = await response.json();
  if (LIVE.has(state.detail.status) && state.detail.progress) {
    // A job:progress event may have brought a later one than this read.
    const kept = keepProgress(id, state.detail.attempt, state.detail.progress);
    state.detail.progress = kept.progress;
  }
  const { target } = state.detail;
  if (state.selected === id) renderDetail(state.detail);
  // The detail is authoritative: bring the row up to date too.
  const shown = state.rows.get(id);
  if (shown && state.detail.transitions.length) {
    const last = state.detail.transitions[state.detail.transitions.length - 1];
    if (!comesAfter([shown.job.updated_at, shown.job.seq || 0], [last.ts, last.seq])) {
      Object.assign(shown.job, {
        status: state.detail.status,
        attempts: state.detail.attempts,
        worker_id: state.detail.worker_id,
        fail_reason: state.detail.fail_reason ?? shown.job.fail_reason,
        updated_at: last.ts,
        seq: last.seq,
      });
      fillRow(shown.tr, shown.job);
    }
  }
  if (target && state.selected === id) await loadTarget(target);
}

function temporalUrl(id) {
  const { temporal_ui_url: ui, namespace } = state.config;
  return `${ui}/namespaces/${encodeURIComponent(namespace)}/workflows/${encodeURIComponent(id)}`;
}

function detailHeader(id) {
  return h(
    "header",
    { class: "detail-head" },
    h("h2", {}, "Job ", h("code", { id: "detail-id" }, id)),
    h("button", { id: "close-detail", class: "link", type: "button", onclick: closeJob,
                  "aria-label": "Close" }, "✕"),
  );
}

function definitionList(pairs) {
  return h("dl", {}, pairs.filter(Boolean).map(([term, value, id]) =>
    [h("dt", {}, term), h("dd", { id }, value)]));
}

function pre(text, id) {
  return h("pre", { id }, text);
}

function resultPreview(job) {
  if (job.result === null || job.result === undefined) return pre("—", "detail-result");
  const text = JSON.stringify(job.result, null, 2);
  if (text.length <= RESULT_PREVIEW_CHARS) return pre(text, "detail-result");
  const more = text.length - RESULT_PREVIEW_CHARS;
  return pre(`${text.slice(0, RESULT_PREVIEW_CHARS)}\n… (${more} more characters)`, "detail-result");
}

function table(id, headings, rows) {
  if (!rows.length) return h("p", { id, class: "muted" }, "None.");
  return h(
    "table",
    { id, class: "mini" },
    h("thead", {}, h("tr", {}, headings.map((t) => h("th", {}, t)))),
    h("tbody", {}, rows.map((cells) => h("tr", {}, cells.map((c) => h("td", {}, c))))),
  );
}

function renderDetail(job) {
  const message = state.cancelMessage && state.cancelMessage.id === job.id ? state.cancelMessage : null;
  const stopped = state.stopMessage && state.stopMessage.id === job.id ? state.stopMessage : null;
  const retried = state.retryMessage && state.retryMessage.id === job.id ? state.retryMessage : null;
  const actions = h(
    "div",
    { class: "actions" },
    badge(job),
    h("a", { id: "temporal-link", href: temporalUrl(job.id), target: "_blank", rel: "noopener" },
      "Open in Temporal UI ↗"),
    CANCELLABLE.has(job.status) && may("cancel") &&
      h("button", { id: "cancel-button", class: "danger", type: "button",
                    onclick: () => cancelJob(job.id) }, "Cancel job"),
    STOPPABLE.has(job.status) && may("stop") &&
      h("button", { id: "stop-button", class: "danger", type: "button",
                    title: "POST /api/jobs/{id}/stop: a running job's solver is killed",
                    onclick: () => stopJob(job.id) }, "Stop job"),
    isEnded(job) && may("retry") &&
      h("button", { id: "retry-button", class: "danger", type: "button",
                    title: "POST /api/ops/jobs/{id}/requeue: run it again under the same id, " +
                           "with max_attempts more attempts",
                    onclick: () => retryJob(job.id) }, "Retry"),
    message && h("span", { id: "cancel-message", class: message.error ? "error" : "ok" },
                 message.text),
    stopped && h("span", { id: "stop-message", class: stopped.error ? "error" : "ok",
                           "data-status": stopped.status }, stopped.text),
    retried && h("span", { id: "retry-message", class: retried.error ? "error" : "ok",
                           "data-status": retried.status }, retried.text),
  );
  const waited = job.claimed_at ? job.claimed_at - job.created_at : null;
  const ran = job.claimed_at && job.completed_at ? job.completed_at - job.claimed_at : null;
  const scheduling = schedulingPairs(job);
  const parts = [
    detailHeader(job.id),
    actions,
    progressBar(job),
    definitionList([
      ["Type", job.type],
      ["Priority", job.priority],
      ["Attempts", `${job.attempts} / ${job.max_attempts}`, "detail-attempts"],
      (job.status === "pending" || job.waiting_for) &&
        ["Waiting for", waitingFor(job.waiting_for), "detail-waiting-for"],
      ["Worker", job.worker_id ? entityLink("worker", job.worker_id) : "—", "detail-worker"],
      job.host && ["Host", job.host, "detail-host"],
      ["Fail reason", job.fail_reason || "—"],
      ["Solver", job.solver_url || "registered for the type"],
      ["Max runtime", formatDuration(job.max_runtime_ms)],
    ]),
    scheduling.length > 0 && h("h3", {}, "Scheduling"),
    scheduling.length > 0 && definitionList(scheduling),
    job.target && h("h3", {}, "Target"),
    job.target && targetPanel(job.target),
    h("h3", {}, "Timeline"),
    timeline(job),
    h("h3", {}, "Timings"),
    definitionList([
      ["Created", formatTime(job.created_at)],
      ["Last claimed", formatTime(job.claimed_at)],
      ["Last heartbeat", formatTime(job.heartbeat_at), "detail-heartbeat"],
      job.lease_expires_at && ["Lease expires", formatTime(job.lease_expires_at), "detail-lease"],
      ["Completed", formatTime(job.completed_at)],
      ["Created → claimed", formatDuration(waited)],
      ["Claimed → done", formatDuration(ran)],
    ]),
    h("h3", {}, "Params"),
    pre(JSON.stringify(job.params, null, 2), "detail-params"),
    h("h3", {}, "Result"),
    resultPreview(job),
    job.result_hash && h("p", { class: "muted mono small" }, `sha256 ${job.result_hash}`),
    h("h3", {}, "Fail history"),
    table("detail-failures", ["When", "Worker", "Reason"],
      job.fail_history.map((f) => [formatTime(f.ts), f.worker_id || "—", f.reason])),
    h("h3", {}, "Transitions"),
    table("detail-transitions", ["#", "When", "Status", "Attempt", "Worker", "Reason"],
      job.transitions.map((t) => [t.seq, formatTime(t.ts), t.status, t.attempt,
                                  t.worker_id || "—", t.reason || ""])),
    job.log_tail && h("h3", {}, "Log tail"),
    job.log_tail && pre(job.log_tail, "detail-log"),
  ];
  if (!state.log || state.log.id !== job.id) {
    dropLog();
    state.log = newLog(job.id);
  }
  const log = state.log;
  renderLogControls(log, job);
  // The log view is one element kept across renders (its lines stay, its scroll too).
  const { scrollTop } = log.lines;
  const stick = atBottom(log.lines);
  $("#job-detail").replaceChildren(...parts.filter(Boolean), h("h3", {}, "Log"), log.section);
  log.lines.scrollTop = stick ? log.lines.scrollHeight : scrollTop;
  followLog(job);
}

function percentOf(progress) {
  return Math.round(progress.fraction * 1000) / 10;
}

// A row's progress: a small bar in its status cell while the job is live and has told it.
function rowProgress(job) {
  const known = LIVE.has(job.status) ? state.progress.get(job.id) : null;
  if (!known) return null;
  const percent = percentOf(known.progress);
  const fill = h("span", { class: "fill" });
  fill.style.width = `${percent}%`;
  const { message } = known.progress;
  return h("span", {
    class: "bar row-progress", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
    "aria-valuenow": String(percent), "aria-label": "Progress",
    "data-fraction": String(known.progress.fraction),
    title: message ? `${percent}% · ${message}` : `${percent}%`,
  }, fill);
}

// A live attempt's last progress (`JOBFORGE_PROGRESS <fraction> [message]` from its
// solver), as read with the detail and moved by job:progress events.
function progressBar(job) {
  if (!LIVE.has(job.status)) return false;
  const { progress } = job;
  if (!progress) {
    return h("p", { id: "detail-progress", class: "muted small", "data-fraction": "" },
             "No progress reported yet.");
  }
  const percent = percentOf(progress);
  const fill = h("span", { class: "fill" });
  fill.style.width = `${percent}%`;
  return h(
    "div",
    { id: "detail-progress", class: "progress", "data-fraction": String(progress.fraction) },
    h("span", { class: "bar", role: "progressbar", "aria-valuemin": "0", "aria-valuemax": "100",
                "aria-valuenow": String(percent), "aria-label": "Progress" }, fill),
    h("span", { class: "small" },
      h("span", { id: "detail-progress-percent", class: "num" }, `${percent}%`),
      progress.message && [" · ", h("span", { id: "detail-progress-message" }, progress.message)],
      progress.at && h("span", { class: "muted", title: new Date(progress.at).toISOString() },
                       ` · ${ago(progress.at)}`)),
  );
}

// The Stop and Retry buttons: one call on the open job, its answer kept in `state[key]`
// ({id, status, text, error}) and shown under the detail.
async function jobAction(id, { button, path, key, accepted, refused }) {
  const control = $(button);
  if (control) control.disabled = true;
  await guard(async () => {
    const response = await api(path, { method: "POST" });
    if (response.ok) {
      const status = statusLabel(await response.json());
      state[key] = { id, status, text: `${accepted}: ${status}.`, error: false };
    } else {
      state[key] = { id, status: "", text: `${refused}: ${await errorText(response)}`, error: true };
    }
    if (state.detail && state.detail.id === id && state.selected === id) renderDetail(state.detail);
    await loadDetail(id);
  });
  refreshSoon();
}

function stopJob(id) {
  return jobAction(id, { button: "#stop-button", path: `/api/jobs/${encodeURIComponent(id)}/stop`,
                         key: "stopMessage", accepted: "Stop accepted", refused: "Not stopped" });
}

function retryJob(id) {
  return jobAction(id, { button: "#retry-button",
                         path: `/api/ops/jobs/${encodeURIComponent(id)}/requeue`,
                         key: "retryMessage", accepted: "Retry accepted", refused: "Not retried" });
}

// ---------------------------------------------------------------- the log view

// One attempt's lines (GET /api/jobs/{id}/logs), read from `offset` on: every
// LOG_POLL_MS while that attempt runs, once otherwise. It shows the current attempt (and
// moves on to the next one when it begins) unless an earlier one is picked.
function newLog(id) {
  const lines = h("div", { id: "log-lines", class: "log-lines", role: "log", tabindex: "0" });
  const controls = h("div", { class: "log-controls small" });
  return {
    id,
    pinned: null, // an attempt picked in the selector, or null: the current one
    attempt: null, // the attempt shown
    offset: 0,
    dropped: 0, // lines let go of to keep LOG_KEEP
    seq: 0, // bumped on a reset, so an answer for what was shown before is dropped
    timer: null,
    busy: false,
    readKey: null, // `${attempt}:${status}` of the last read of an ended attempt
    lines,
    controls,
    section: h("div", { id: "detail-logs", "data-job-id": id }, controls, lines),
  };
}

function dropLog() {
  if (state.log) {
    clearTimeout(state.log.timer);
    state.log.seq += 1;
  }
  state.log = null;
}

function resetLog(log, attempt) {
  clearTimeout(log.timer);
  log.timer = null;
  log.seq += 1;
  log.attempt = attempt;
  log.offset = 0;
  log.dropped = 0;
  log.readKey = null;
  log.lines.replaceChildren();
  log.lines.dataset.count = "0";
}

function renderLogControls(log, job) {
  const shown = log.pinned ?? log.attempt ?? (job.attempt || null);
  const select = job.attempts > 1 && h(
    "select",
    { id: "log-attempt", "aria-label": "Attempt",
      onchange: (e) => pickAttempt(Number(e.target.value)) },
    Array.from({ length: job.attempts }, (_, i) => {
      const n = i + 1;
      return h("option", { value: n, selected: n === shown },
               n === job.attempt ? `attempt ${n} (current)` : `attempt ${n}`);
    }),
  );
  const empty = log.lines.childElementCount === 0;
  log.controls.replaceChildren(...[
    select || (shown ? h("span", { class: "muted" }, `attempt ${shown}`) : false),
    log.dropped > 0 && h("span", { id: "log-dropped", class: "muted" },
                         `${log.dropped} earlier lines not shown (the last ${LOG_KEEP} are)`),
    empty && h("span", { id: "log-empty", class: "muted" },
               job.attempt ? "No output yet." : "No attempt yet."),
  ].filter(Boolean));
}

function pickAttempt(n) {
  const log = state.log;
  const job = state.detail;
  if (!log || !job || job.id !== log.id) return;
  log.pinned = n === job.attempt ? null : n;
  resetLog(log, n);
  renderLogControls(log, job);
  followLog(job);
}

// Reads now unless a read is under way or due, or this attempt has ended and was read
// since (the detail re-renders often; an ended attempt is read once).
function followLog(job) {
  const log = state.log;
  if (!log || log.id !== job.id) return;
  const current = job.attempt || null;
  if (log.pinned === null && current !== null && log.attempt !== null && current !== log.attempt) {
    resetLog(log, current); // the next attempt began
  }
  if (log.busy || log.timer || log.readKey === `${log.pinned ?? current}:${job.status}`) return;
  pollLog(log);
}

async function pollLog(log) {
  log.timer = null;
  log.busy = true;
  const { seq } = log;
  const job = state.detail && state.detail.id === log.id ? state.detail : null;
  const attempt = log.pinned ?? log.attempt ?? (job && job.attempt ? job.attempt : null);
  // Whether the attempt ran as this read began: if not, this read gets all it wrote.
  const live = job !== null && log.pinned === null && LIVE.has(job.status);
  const key = job ? `${attempt}:${job.status}` : null;
  const params = new URLSearchParams({ offset: String(log.offset) });
  if (attempt !== null) params.set("attempt", String(attempt));
  let failed = false;
  try {
    const body = await getJson(`/api/jobs/${encodeURIComponent(log.id)}/logs?${params}`);
    if (state.log === log && seq === log.seq) {
      if (log.attempt === null) log.attempt = body.attempt;
      log.offset = body.next_offset;
      appendLines(log, body.lines);
      if (!live) log.readKey = key;
    }
  } catch (err) {
    if (err instanceof Unauthorized) return;
    failed = true; // tried again on the next beat while the job runs
  } finally {
    log.busy = false;
  }
  if (state.log !== log) return;
  if (seq !== log.seq || live || (failed && job && LIVE.has(job.status))) {
    log.timer = setTimeout(() => pollLog(log), seq !== log.seq ? 0 : LOG_POLL_MS);
  }
  if (job) renderLogControls(log, job);
}

function atBottom(el) {
  return el.scrollHeight - el.scrollTop - el.clientHeight < 24;
}

function appendLines(log, lines) {
  if (!lines.length) return;
  const stick = atBottom(log.lines);
  const kept = lines.slice(-LOG_KEEP);
  log.dropped += lines.length - kept.length;
  log.lines.append(...kept.map((line) => h(
    "div",
    { class: `log-line ${line.stream}`, "data-stream": line.stream },
    h("span", { class: "log-stream" }, line.stream),
    h("span", { class: "log-text" }, line.text),
  )));
  let extra = log.lines.childElementCount - LOG_KEEP;
  log.dropped += Math.max(extra, 0);
  while (extra-- > 0) log.lines.firstElementChild.remove();
  log.lines.dataset.count = String(log.lines.childElementCount);
  if (stick) log.lines.scrollTop = log.lines.scrollHeight;
}

function waitingFor(reason) {
  if (!reason) return h("span", { class: "muted", "data-waiting-for": "" }, "— (queued for a worker)");
  return h("span", { "data-waiting-for": reason }, h("code", {}, reason), " ",
           h("span", { class: "muted" }, WAITING_FOR[reason] || ""));
}

// The scheduling fields a job was submitted with (none for a plain job).
function schedulingPairs(job) {
  return [
    job.group && ["Group", detailGroup(job), "detail-group"],
    job.pool && ["Pool", entityLink("pool", job.pool), "detail-pool"],
    job.pool && ["Cost units", job.cost_units, "detail-cost-units"],
    job.target && ["Target", entityLink("target", job.target), "detail-target-name"],
    job.earliest_start_at && ["Earliest start", formatTime(job.earliest_start_at), "detail-earliest-start"],
    job.deadline_at && ["Deadline", formatTime(job.deadline_at), "detail-deadline"],
    job.require_host && ["Required host", job.require_host, "detail-require-host"],
    job.preferred_host && ["Preferred host", job.preferred_host, "detail-preferred-host"],
  ].filter(Boolean);
}

// The job's group, and Pause / Resume for it: the panel of groups is under this one.
// Its state comes from the last list read (or, before the group is listed, from the
// job's own waiting reason).
function detailGroup(job) {
  const known = state.groups.find((g) => g.group === job.group);
  const paused = known ? known.paused : job.waiting_for === "group_paused";
  if (!known && !paused) return h("span", { "data-group": job.group }, entityLink("group", job.group));
  const action = paused ? "resume" : "pause";
  return h(
    "span",
    { class: "inline", "data-group": job.group, "data-paused": String(paused) },
    entityLink("group", job.group),
    paused && h("span", { class: "state paused" }, "paused"),
    may("pause_group") &&
    h("button", { id: `detail-group-${action}`, type: "button", disabled: state.busy.has(job.group),
                  onclick: () => setGroupPaused(job.group, !paused) },
      paused ? "Resume group" : "Pause group"),
  );
}

// ---------------------------------------------------------------- targets

// The Targets panel and an open job's target show one view per target: the freshest one
// read (GET /api/targets each beat, GET /api/targets/{t} when a detail opens) or answered
// by a resume here. A list answer may be counts_cache_ms old (METRICS_CACHE_MS) and gate
// memos reach visibility a moment after a change, so it counts as that much older than
// its request; a view read or answered since is not overwritten by it.
const MEMO_LAG_MS = 1000;

// A target may be `tenant/name`: the route takes the slash as is.
function targetPath(name) {
  return name.split("/").map(encodeURIComponent).join("/");
}

function keepTarget(view, asOf) {
  const known = state.targetViews.get(view.target);
  if (!known || asOf >= known.asOf) state.targetViews.set(view.target, { view, asOf });
}

async function loadTargets() {
  const asOf = Date.now() - (state.config.counts_cache_ms || 0) - MEMO_LAG_MS;
  const targets = await getJson("/api/targets");
  if (!state.running) return;
  for (const view of targets) keepTarget(view, asOf);
  state.targetNames = targets.map((t) => t.target);
  const kept = new Set(state.targetNames);
  if (state.detail && state.detail.target) kept.add(state.detail.target);
  for (const name of state.targetViews.keys()) if (!kept.has(name)) state.targetViews.delete(name);
  renderTargets();
  renderEntity();
}

async function loadTarget(name) {
  const asOf = Date.now();
  keepTarget(await getJson(`/api/targets/${targetPath(name)}`), asOf);
  renderTargets();
}

function renderTargets() {
  const views = state.targetNames.filter((name) => state.targetViews.has(name))
    .map((name) => state.targetViews.get(name).view);
  const halted = views.filter((t) => t.halted).length;
  $("#targets-summary").textContent = views.length ? `${halted} of ${views.length} halted` : "";
  const list = $("#target-list");
  list.replaceChildren(...views.map(targetItem));
  if (!views.length) list.append(h("li", { class: "muted" }, "No targets yet."));
  const shown = $("#detail-target");
  if (shown && state.detail && state.detail.target) shown.replaceWith(targetPanel(state.detail.target));
}

function haltedByLink(id) {
  return h("button", { class: "link mono halted-by", type: "button", title: "Open this job",
                       onclick: () => openJob(id) }, id);
}

// Resume (retry) and Resume (skip) for a halted target; `attrs(how)` names each button.
function resumeButtons(name, attrs) {
  if (!may("resume_target")) return [];
  const busy = state.targetBusy.has(name);
  const button = (how, label, title) =>
    h("button", { ...attrs(how), type: "button", title, disabled: busy,
                  onclick: () => resumeTarget(name, how) }, label);
  return [
    button("retry", "Resume (retry)", "Re-queue the job that halted it; it runs first"),
    button("skip", "Resume (skip)", "Leave the job that halted it quarantined; run the next"),
  ];
}

function targetItem(t) {
  const message = state.targetMessages.get(t.target);
  return h(
    "li",
    { class: "gate", "data-target": t.target, "data-halted": String(t.halted) },
    h("span", { class: "name", title: t.target }, entityLink("target", t.target)),
    h("span", { class: `state ${t.halted ? "halted" : "open"}`, "data-field": "state" },
      t.halted ? "halted" : "open"),
    t.halted_by && h("span", { class: "muted small", "data-field": "halted-by" },
                     "halted by ", haltedByLink(t.halted_by)),
    h("span", { class: "muted small" },
      h("span", { "data-field": "running" }, `${t.running} running`), " · ",
      h("span", { "data-field": "pending" }, `${t.pending} pending`)),
    t.halted && h("span", { class: "gate-actions" }, resumeButtons(
      t.target, (how) => ({ class: `target-resume-${how}`, "data-action": how }))),
    message && message.error && h("span", { class: "small error", role: "alert" }, message.text),
  );
}

// The open job's target, as the panel has it (or as read when the detail opened).
function targetPanel(name) {
  const known = state.targetViews.get(name);
  if (!known) {
    return h("div", { id: "detail-target", "data-target": name }, h("p", { class: "muted" }, "Loading…"));
  }
  const { view } = known;
  const message = state.targetMessages.get(name);
  return h(
    "div",
    { id: "detail-target", "data-target": name, "data-halted": String(view.halted) },
    definitionList([
      ["State", h("span", { class: `state ${view.halted ? "halted" : "open"}` },
                  view.halted ? "halted" : "open"), "target-state"],
      view.halted_by && ["Halted by", haltedByLink(view.halted_by), "target-halted-by"],
      ["Jobs", `${view.running} running · ${view.pending} pending`, "target-counts"],
    ]),
    view.halted && h("div", { class: "actions" },
                     resumeButtons(name, (how) => ({ id: `target-resume-${how}` }))),
    message && h("p", { id: "target-message", class: message.error ? "error" : "ok" }, message.text),
  );
}

async function resumeTarget(name, how) {
  if (state.targetBusy.has(name)) return;
  state.targetBusy.add(name);
  state.targetMessages.delete(name);
  renderTargets();
  await guard(async () => {
    const response = await api(`/api/targets/${targetPath(name)}/resume`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ job: how }),
    });
    if (response.ok) {
      // As of its answer: a read sent while the resume was under way may predate it.
      keepTarget(await response.json(), Date.now());
      // A target the last list read did not have yet (visibility lags a new gate) joins it.
      if (!state.targetNames.includes(name)) state.targetNames = [...state.targetNames, name].sort();
      state.targetMessages.set(name, { text: `Resumed (${how}).`, error: false });
    } else {
      state.targetMessages.set(name, { text: `Not resumed: ${await errorText(response)}`, error: true });
    }
  });
  state.targetBusy.delete(name);
  renderTargets();
  // The open job of this target now runs, or waits for something else.
  if (state.detail && state.detail.target === name) detailSoon();
  refreshSoon();
}

async function cancelJob(id) {
  const button = $("#cancel-button");
  if (button) button.disabled = true;
  await guard(async () => {
    const response = await api(`/api/jobs/${encodeURIComponent(id)}`, { method: "DELETE" });
    if (response.status === 204) {
      state.cancelMessage = { id, text: "Cancelled.", error: false };
    } else {
      state.cancelMessage = { id, text: `Not cancelled: ${await errorText(response)}`, error: true };
    }
    if (state.detail && state.detail.id === id && state.selected === id) renderDetail(state.detail);
    await loadDetail(id);
  });
  refreshSoon();
}

// ---------------------------------------------------------------- fleet

async function loadFleet() {
  const workers = await getJson("/api/workers");
  if (!state.running) return;
  state.workers = workers;
  const alive = workers.filter((w) => w.alive).length;
  $("#fleet-summary").textContent = `${alive} of ${workers.length} alive`;
  $("#fleet-list").replaceChildren(
    ...workers.map((w) =>
      h(
        "li",
        { class: "worker", "data-worker-id": w.worker_id, "data-alive": String(w.alive) },
        h("span", { class: `dot ${w.alive ? "alive" : "dead"}`, title: w.alive ? "alive" : "dead" }),
        h("span", { class: "name", title: w.worker_id }, entityLink("worker", w.worker_id, w.name || w.worker_id)),
        h("span", { class: "chip small active-jobs", "data-count": w.active_jobs },
          `${w.active_jobs} active`),
        h("span", { class: "muted small" },
          `${w.kind} · ${w.cores == null ? "cores not reported" : `${w.cores} ${w.cores === 1 ? "core" : "cores"}`} · ${w.ram_gb == null ? "memory not reported" : `${w.ram_gb} GB`} · heartbeat ${ago(w.last_heartbeat)}`),
        hostLine(w.info),
        w.tags.length > 0 && h("span", { class: "tags" }, w.tags.map((t) => h("code", {}, t))),
      ),
    ),
  );
  if (!workers.length) $("#fleet-list").append(h("li", { class: "muted" }, "No workers registered."));
  if (route.entity && route.entity.kind === "worker") renderEntity();
}

const GIB = 2 ** 30;

// A worker's latest host telemetry (its registry heartbeat), in one compact line; a
// field the host could not read is left out.
function hostLine(info) {
  if (!info) return false;
  const gb = (bytes) => (bytes / GIB).toFixed(1);
  const parts = [
    info.cpu_percent != null && ["cpu", `CPU ${Math.round(info.cpu_percent)}%`, "busy, all cores"],
    info.mem_total_bytes != null && info.mem_used_bytes != null &&
      ["mem", `mem ${gb(info.mem_used_bytes)}/${gb(info.mem_total_bytes)} GB`, "used / total"],
    info.load_avg && ["load", `load ${info.load_avg[0].toFixed(2)}`,
      `load average 1/5/15 min: ${info.load_avg.map((l) => l.toFixed(2)).join(" ")}`],
    ["running", `${info.running_jobs} running`, "jobs running on the host"],
    info.version && ["version", `v${info.version}`, "jobforge version"],
  ].filter(Boolean);
  const disk = info.disk_free_bytes != null ? ` · disk free ${gb(info.disk_free_bytes)} GB` : "";
  return h("span", { class: "host muted small", title: `host telemetry${disk}` },
    parts.map(([field, text, title], i) => [
      i > 0 && " · ",
      h("span", { "data-field": field, title }, text),
    ]));
}

// ---------------------------------------------------------------- groups and pools

function countChips(counts) {
  const shown = STATUSES.filter((s) => counts[s]);
  if (!shown.length) return h("span", { class: "counts muted small" }, "no jobs");
  return h("span", { class: "counts small" }, shown.map((s) =>
    h("span", { class: "count-chip", "data-status": s, "data-count": counts[s] },
      h("span", { class: `dot s-${s}` }), `${counts[s]} ${s}`)));
}

async function loadGroups() {
  const seq = state.groupsSeq;
  const groups = await getJson("/api/groups");
  if (!state.running || seq !== state.groupsSeq) return;
  state.groups = groups;
  renderGroups();
}

function renderGroups() {
  const groups = state.groups;
  const open = $("#detail-group");
  if (open && state.detail && state.detail.group) open.replaceChildren(detailGroup(state.detail));
  const paused = groups.filter((g) => g.paused).length;
  $("#groups-summary").textContent = groups.length ? `${paused} of ${groups.length} paused` : "";
  const list = $("#group-list");
  list.replaceChildren(...groups.map(groupItem));
  if (!groups.length) list.append(h("li", { class: "muted" }, "No groups yet."));
  if (route.entity && route.entity.kind === "group") renderEntity();
}

function groupItem(g) {
  const message = state.groupMessages.get(g.group);
  const action = g.paused ? "resume" : "pause";
  return h(
    "li",
    { class: "gate", "data-group": g.group, "data-paused": String(g.paused) },
    h("span", { class: "name", title: g.group }, entityLink("group", g.group)),
    h("span", { class: `state ${g.paused ? "paused" : "open"}`, "data-field": "state" },
      g.paused ? "paused" : "active"),
    may("pause_group") &&
    h("button", { type: "button", class: `group-${action}`, "data-action": action,
                  disabled: state.busy.has(g.group),
                  onclick: () => setGroupPaused(g.group, !g.paused) },
      g.paused ? "Resume" : "Pause"),
    h("span", { class: "muted small limits" },
      h("span", { "data-field": "max-parallel" }, `max_parallel ${g.max_parallel ?? "∞"}`), " · ",
      h("span", { "data-field": "weight" }, `weight ${g.weight}`)),
    countChips(g.counts),
    message && h("span", { class: "small error", role: "alert" }, message),
  );
}

async function setGroupPaused(name, paused) {
  if (state.busy.has(name)) return;
  state.busy.add(name);
  state.groupsSeq += 1;
  state.groupMessages.delete(name);
  renderGroups();
  await guard(async () => {
    const response = await api(`/api/groups/${encodeURIComponent(name)}/${paused ? "pause" : "resume"}`,
                               { method: "POST" });
    if (response.ok) {
      const view = await response.json();
      // A group the last list read did not have yet (visibility lags a new gate) joins it.
      state.groups = [...state.groups.filter((g) => g.group !== view.group), view]
        .sort((a, b) => (a.group < b.group ? -1 : a.group > b.group ? 1 : 0));
    } else {
      state.groupMessages.set(name, `Not ${paused ? "paused" : "resumed"}: ${await errorText(response)}`);
    }
  });
  state.busy.delete(name);
  renderGroups();
  // An open job of this group now waits for something else (or runs).
  if (state.detail && state.detail.group === name) detailSoon();
}

async function loadPools() {
  const pools = await getJson("/api/pools");
  if (!state.running) return;
  state.pools = pools;
  const list = $("#pool-list");
  list.replaceChildren(...pools.map(poolItem));
  $("#pools-summary").textContent = pools.length ? `${pools.length}` : "";
  if (!pools.length) list.append(h("li", { class: "muted" }, "No pools yet."));
  if (route.entity && route.entity.kind === "pool") renderEntity();
}

function poolItem(p) {
  const full = p.in_use >= p.capacity;
  const bar = h("span", { class: "fill" });
  bar.style.width = `${p.capacity > 0 ? Math.min(100, (100 * p.in_use) / p.capacity) : 100}%`;
  return h(
    "li",
    { class: "gate", "data-pool": p.pool, "data-full": String(full) },
    h("span", { class: "name", title: p.pool }, entityLink("pool", p.pool)),
    h("span", { class: "small units", title: "units in use / capacity" },
      h("span", { "data-field": "in-use" }, p.in_use), " / ",
      h("span", { "data-field": "capacity" }, p.capacity), " units"),
    h("span", { class: "bar", role: "img", "aria-label": `${p.in_use} of ${p.capacity} units in use` }, bar),
    h("span", { class: "muted small" },
      h("span", { "data-field": "pending" }, `${p.pending} pending`), " · ",
      h("span", { "data-field": "running" }, `${p.running} running`)),
  );
}

// ---------------------------------------------------------------- the refresh cadence

async function refreshPanels() {
  // A pending job's detail can change with no event of its own (its group paused from
  // the CLI, its target halted by another job), and so does a live one's (its heartbeat
  // and lease are read live; its progress also comes as job:progress events): one more
  // read for it, not one per row. Any other open job's group and target come from the
  // panels' lists.
  const open = state.detail && state.detail.id === state.selected ? state.detail : null;
  const detail = open && (open.status === "pending" || LIVE.has(open.status))
    ? () => loadDetail(open.id) : null;
  await Promise.all([
    guard(loadFleet), guard(loadGroups), guard(loadPools), guard(loadTargets),
    guard(loadSchedules),
    detail && guard(detail),
  ]);
}

// One timer at a time: the next regular read, or the one after events, which then
// starts the regular cadence again.
function schedulePanels(delay = PANELS_EVERY_MS) {
  clearTimeout(state.timers.panels);
  state.timers.panels = setTimeout(async () => {
    state.timers.panels = null;
    state.panelsSoon = false;
    if (!document.hidden) await refreshPanels();
    if (state.running && !state.timers.panels) schedulePanels();
  }, delay);
}

function panelsSoon() {
  if (!state.running || state.panelsSoon) return;
  state.panelsSoon = true;
  schedulePanels(PANELS_AFTER_EVENTS_MS);
}

// ---------------------------------------------------------------- wiring

// A link with the token in its fragment (`/#token=…`, as `jobforge dev` prints it) signs
// in like a typed token. A fragment never reaches the server or its logs; it is taken out
// of the address bar (and so of history and bookmarks) at once.
function tokenFromFragment() {
  const token = new URLSearchParams(location.hash.slice(1)).get("token");
  if (token === null) return false;
  history.replaceState(null, "", location.pathname + location.search);
  if (!token.trim()) return false;
  sessionStorage.setItem(TOKEN_KEY, token.trim());
  return true;
}

document.addEventListener("DOMContentLoaded", () => {
  tokenFromFragment();
  $("#login-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const token = $("#token-input").value.trim();
    if (!token) return;
    sessionStorage.setItem(TOKEN_KEY, token);
    $("#login-error").textContent = "";
    start();
  });
  $("#sign-out").addEventListener("click", () => signOut(""));
  $("#prev-page").addEventListener("click", () => turnPage(-1));
  $("#next-page").addEventListener("click", () => turnPage(1));
  document.addEventListener("keydown", (e) => {
    if (e.key === "Escape" && state.selected) closeJob();
  });
  // A token link opened in a tab that already shows the dashboard, or another view
  // (a link, back, forward).
  window.addEventListener("hashchange", () => {
    if (tokenFromFragment()) start();
    else applyRoute();
  });
  if (sessionStorage.getItem(TOKEN_KEY)) start();
  else signOut("");
});
