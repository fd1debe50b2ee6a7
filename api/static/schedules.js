// The Schedules panel (GET /api/schedules, re-read with the other side panels): each
// schedule's timing, its next firing, its last firing's job and that job's status, and
// Pause / Resume and Trigger buttons. Loaded after app.js, whose helpers it uses.
"use strict";

const schedules = {
  list: [], // GET /api/schedules, as last read or changed here
  seq: 0, // bumped by a change here, so a list read begun before it is dropped
  busy: new Set(), // schedules with a change in flight
  messages: new Map(), // schedule → its last refused change
};

async function loadSchedules() {
  const seq = schedules.seq;
  const listed = await getJson("/api/schedules");
  if (!state.running || seq !== schedules.seq) return;
  schedules.list = listed;
  renderSchedules();
}

function renderSchedules() {
  const listed = schedules.list;
  const paused = listed.filter((s) => s.paused).length;
  $("#schedules-summary").textContent = listed.length ? `${paused} of ${listed.length} paused` : "";
  const list = $("#schedule-list");
  list.replaceChildren(...listed.map(scheduleItem));
  if (!listed.length) list.append(h("li", { class: "muted" }, "No schedules yet."));
}

function scheduleWhen(s) {
  return s.cron !== null ? `cron ${s.cron}` : `every ${formatDuration(s.interval * 1000)}`;
}

function scheduleItem(s) {
  const last = s.recent.length ? s.recent[s.recent.length - 1] : null;
  const next = s.paused ? null : s.next_firings[0];
  const busy = schedules.busy.has(s.id);
  const message = schedules.messages.get(s.id);
  const action = s.paused ? "resume" : "pause";
  return h(
    "li",
    { class: "gate", "data-schedule": s.id, "data-paused": String(s.paused) },
    h("span", { class: "name", title: s.id }, s.id),
    h("span", { class: `state ${s.paused ? "paused" : "open"}`, "data-field": "state" },
      s.paused ? "paused" : "active"),
    may("change_schedule") && h("span", { class: "gate-actions" },
      h("button", { type: "button", class: `schedule-${action}`, disabled: busy,
                    onclick: () => changeSchedule(s.id, action) },
        s.paused ? "Resume" : "Pause"),
      h("button", { type: "button", class: "schedule-trigger", disabled: busy,
                    onclick: () => changeSchedule(s.id, "trigger") }, "Trigger")),
    h("span", { class: "muted small" },
      h("span", { "data-field": "when" }, scheduleWhen(s)), " · ",
      h("span", { "data-field": "type" }, s.job.type), " · ",
      h("span", { "data-field": "next", title: next ? new Date(next).toISOString() : "" },
        next ? `next ${formatTime(next)}` : "no next firing")),
    h("span", { class: "small", "data-field": "last" },
      last
        ? [h("button", { class: "link mono", type: "button", title: "Open this job",
                         "data-job": last.job_id, onclick: () => openJob(last.job_id) },
             last.job_id),
           " ",
           h("span", { "data-field": "last-status" }, last.status || "…")]
        : h("span", { class: "muted" }, "not fired yet")),
    message && h("span", { class: "small error", role: "alert" }, message),
  );
}

async function changeSchedule(id, action) {
  if (schedules.busy.has(id)) return;
  schedules.busy.add(id);
  schedules.seq += 1;
  schedules.messages.delete(id);
  renderSchedules();
  await guard(async () => {
    const response = await api(`/api/schedules/${encodeURIComponent(id)}/${action}`,
                               { method: "POST" });
    if (response.ok) {
      const view = await response.json();
      // A schedule the last list read did not have yet (visibility lags) joins it.
      schedules.list = [...schedules.list.filter((s) => s.id !== view.id), view]
        .sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    } else {
      schedules.messages.set(id, `Not ${action === "trigger" ? "triggered" : `${action}d`}: ${await errorText(response)}`);
    }
  });
  schedules.busy.delete(id);
  renderSchedules();
}
