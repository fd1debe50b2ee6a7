// The Bulk action panel (POST /api/jobs/bulk): a filter (the list's filters), an
// action, a count that says how many jobs it reaches (POST /api/jobs/bulk/count), a
// confirmation, then the operation's progress (GET /api/jobs/bulk/{id}) until it is
// done. Producers may cancel and stop their tenant's jobs; re-queue is the admin's.
// Loaded after app.js, whose helpers (h, $, api, errorText, guard, state) it uses.
"use strict";

const BULK_FIELDS = ["status", "type", "group", "pool", "target", "worker"];
const BULK_POLL_MS = 1000;
const bulk = { filter: null, action: null };

function bulkFilter() {
  const filter = {};
  for (const name of BULK_FIELDS) {
    const value = $(`#bulk-${name}`).value.trim();
    if (value) filter[name] = value;
  }
  return filter;
}

function bulkSay(text, error = false) {
  const line = $("#bulk-message");
  line.textContent = text;
  line.classList.toggle("error", error);
}

async function bulkPost(path, body) {
  const response = await api(path, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify(body),
  });
  if (!response.ok) throw new Error(await errorText(response));
  return response.json();
}

async function bulkCount(event) {
  event.preventDefault();
  $("#bulk-confirm").hidden = true;
  const filter = bulkFilter();
  if (!Object.keys(filter).length) {
    bulkSay("Name at least one filter: an empty one would reach every job.", true);
    return;
  }
  try {
    const { matched } = await bulkPost("/api/jobs/bulk/count", { filter });
    bulk.filter = filter;
    bulk.action = $("#bulk-action").value;
    bulkSay(`${bulk.action} ${matched} jobs?`);
    $("#bulk-confirm").textContent = `Yes, ${bulk.action} ${matched} jobs`;
    $("#bulk-confirm").hidden = false;
  } catch (err) {
    bulkSay(err.message, true);
  }
}

async function bulkStart() {
  $("#bulk-confirm").hidden = true;
  try {
    const { id } = await bulkPost("/api/jobs/bulk", { filter: bulk.filter, action: bulk.action });
    bulkSay(`${id}: started`);
    await bulkFollow(id);
  } catch (err) {
    bulkSay(err.message, true);
  }
}

async function bulkFollow(id) {
  for (;;) {
    const p = await getJson(`/api/jobs/bulk/${id}`);
    const line = `${p.action}: ${p.state}, matched ${p.matched}, done ${p.done}, failed ${p.failed}`;
    bulkSay(line);
    $("#bulk-message").dataset.state = p.state;
    if (p.state === "done") {
      if (typeof refreshSoon === "function") refreshSoon();
      return;
    }
    await new Promise((resolve) => setTimeout(resolve, BULK_POLL_MS));
  }
}

function bulkRoles() {
  const role = state.me && state.me.role;
  $("#bulk").hidden = !(state.running && (role === "admin" || role === "producer"));
  const requeue = $('#bulk-action option[value="requeue"]');
  if (requeue) requeue.hidden = role !== "admin";
}

function installBulk() {
  const input = (name, hint) => h("label", {}, `${name} `,
    h("input", { id: `bulk-${name}`, name, placeholder: hint, size: 12 }));
  const section = h("section", { id: "bulk", class: "gates", "aria-labelledby": "bulk-heading",
                                 hidden: "" },
    h("h2", { id: "bulk-heading" }, "Bulk action"),
    h("form", { id: "bulk-form", class: "bulk-form", onsubmit: bulkCount },
      input("status", "pending"), input("type", ""), input("group", ""), input("pool", ""),
      input("target", ""), input("worker", ""),
      h("select", { id: "bulk-action", "aria-label": "action" },
        h("option", { value: "cancel" }, "cancel"),
        h("option", { value: "stop" }, "stop"),
        h("option", { value: "requeue" }, "requeue")),
      h("button", { type: "submit", id: "bulk-count" }, "Count")),
    h("p", { id: "bulk-message", role: "status" }),
    h("button", { id: "bulk-confirm", type: "button", hidden: "", onclick: bulkStart }, "Yes"));
  $("#app").append(section);
  setInterval(bulkRoles, 500);
}

document.addEventListener("DOMContentLoaded", installBulk);
