// The ferrymq console's page: plain JavaScript, no build step, nothing from elsewhere.
//
// Every string the node sends (topic names, message bodies, properties, client ids) goes
// into the page as text (``el`` makes text nodes; nothing here assigns HTML), and the
// Content-Security-Policy forbids inline script: a name such as "<img onerror=...>" is
// shown as those characters and runs nothing.
"use strict";

const POLL_MS = 2000;
const state = { session: null, view: null };

// ---- DOM helpers -------------------------------------------------------------------------
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = String(value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

function table(headers, rows, attrs) {
  const head = el("tr", {}, headers.map((h) => {
    const [label, numeric] = Array.isArray(h) ? h : [h, false];
    return el("th", { class: numeric ? "number" : null }, label);
  }));
  return el("table", attrs || {}, el("thead", {}, head), el("tbody", {}, rows));
}

function cell(value, cls) {
  return el("td", { class: cls || null }, value);
}

function num(value) {
  return el("td", { class: "number" }, typeof value === "number" ? value.toLocaleString("en") : value);
}

function badge(textValue, kind) {
  return el("span", { class: "badge " + (kind || "") }, textValue);
}

function bytes(n) {
  if (n < 1024) return n + " B";
  const units = ["KiB", "MiB", "GiB", "TiB"];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) { value /= 1024; unit++; }
  return value.toFixed(1) + " " + units[unit];
}

function notice(message, isError) {
  const box = document.getElementById("notice");
  box.textContent = message;
  box.className = "notice" + (isError ? " error" : "");
  box.hidden = !message;
}

// ---- the API -----------------------------------------------------------------------------
class ApiError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

async function api(method, path, body) {
  const headers = { "Accept": "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET" && state.session) headers["X-CSRF-Token"] = state.session.csrf;
  const response = await fetch(path, {
    method,
    headers,
    body: body === undefined ? undefined : JSON.stringify(body),
    credentials: "same-origin",
    cache: "no-store",
  });
  let answer = {};
  try { answer = await response.json(); } catch (e) { answer = {}; }
  if (response.status === 401 && path !== "/api/login") {
    showLogin("Your session ended: log in again.");
  }
  if (!response.ok) throw new ApiError(response.status, answer.error || response.statusText);
  return answer;
}

// ---- login -------------------------------------------------------------------------------
function showLogin(message) {
  stopView();
  state.session = null;
  document.getElementById("nav").hidden = true;
  document.getElementById("logout").hidden = true;
  document.getElementById("whoami").textContent = "";
  clear(document.getElementById("view"));
  document.getElementById("login").hidden = false;
  document.getElementById("login-error").textContent = message || "";
}

function loggedIn(session) {
  state.session = session;
  document.getElementById("login").hidden = true;
  document.getElementById("nav").hidden = false;
  document.getElementById("logout").hidden = false;
  const who = session.auth ? session.user + (session.admin ? " (admin)" : "") : "authentication off";
  document.getElementById("whoami").textContent = who;
  route();
}

async function login(event) {
  event.preventDefault();
  const accessKey = document.getElementById("access-key").value;
  const secretKey = document.getElementById("secret-key").value;
  try {
    const session = await api("POST", "/api/login", { access_key: accessKey, secret_key: secretKey });
    document.getElementById("secret-key").value = "";
    loggedIn(session);
  } catch (error) {
    document.getElementById("login-error").textContent = error.message;
  }
}

async function logout() {
  try { await api("POST", "/api/logout", {}); } catch (e) { /* the session is gone anyway */ }
  showLogin("Logged out.");
}

// ---- pages -------------------------------------------------------------------------------
function stopView() {
  if (state.view && state.view.stop) state.view.stop();
  state.view = null;
}

const PAGES = { cluster: clusterPage, topics: topicsPage };

function route() {
  if (!state.session) return;
  const name = (location.hash.replace(/^#\//, "").split("/")[0]) || "cluster";
  const page = PAGES[name] || clusterPage;
  stopView();
  notice("");
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === name);
  }
  const view = clear(document.getElementById("view"));
  state.view = page(view);
}

// A view that asks ``load`` every ``POLL_MS`` and draws what it gets, never more than one
// request at a time, until the page changes. ``draw(data, unchanged)``: ``unchanged`` when
// the answer is the same as the last one but for heartbeat times (the page need not
// rebuild its tables, and an element a user is about to click stays where it is).
function poller(load, draw, onError) {
  let timer = null;
  let stopped = false;
  let last = null;
  async function tick() {
    try {
      const data = await load();
      const key = JSON.stringify(data, (k, v) => (k === "last_heartbeat_ms" ? undefined : v));
      // A view that could not draw now (a field being edited) returns false: next time.
      if (!stopped && draw(data, key === last) !== false) last = key;
    } catch (error) {
      if (!stopped && onError) onError(error);
    }
    if (!stopped) timer = setTimeout(tick, POLL_MS);
  }
  tick();
  return {
    stop() { stopped = true; clearTimeout(timer); },
    now() { clearTimeout(timer); tick(); },
  };
}

// ---- cluster -----------------------------------------------------------------------------
function clusterPage(view) {
  const updated = el("p", { class: "updated", id: "cluster-updated" });
  const body = el("div", { id: "cluster" });
  const progress = el("div", { id: "failover-progress" });
  view.append(el("h1", {}, "Cluster"), updated, progress, body);
  let following = null;
  const chosenTargets = {}; // the failover target picked per group survives each redraw

  function drawn(data, unchanged) {
    updated.textContent = "Updated " + new Date().toLocaleTimeString() + " (every 2 s)";
    if (unchanged) return;
    clear(body);
    const node = data.this_node;
    const raft = data.raft;
    body.append(el("div", { class: "facts", id: "routing-facts" },
      el("div", {}, el("span", {}, "Answered by"), node.id + " (" + node.software_version + ")"),
      el("div", {}, el("span", {}, "Raft leader"), el("span", { class: "mono", id: "raft-leader" }, raft.leader || "none")),
      el("div", {}, el("span", {}, "Raft term"), String(raft.term)),
      el("div", {}, el("span", {}, "Commit index"), String(raft.commit_index)),
      el("div", {}, el("span", {}, "Quorum"), raft.has_quorum ? badge("yes", "ok") : badge("no", "bad")),
      el("div", {}, el("span", {}, "Routing format"), String(data.routing_format)),
    ));
    body.append(el("h2", {}, "Broker groups"));
    body.append(table(
      ["Group", "Master", ["Epoch", true], "In-sync set", ["In-sync epoch", true], "Planned failover"],
      data.broker_groups.map((group) => {
        const slaves = data.nodes.filter((n) => n.broker_group === group.name && n.id !== group.master);
        const target = el("select", { "data-group": group.name, class: "failover-target" },
          el("option", { value: "" }, "best in-sync slave"),
          slaves.map((n) => el("option", { value: n.id, selected: chosenTargets[group.name] === n.id }, n.id)));
        target.addEventListener("change", () => { chosenTargets[group.name] = target.value; });
        const button = el("button", {
          type: "button", class: "secondary failover", "data-group": group.name,
          disabled: !group.master || slaves.length === 0 || following !== null,
          onclick: () => startFailover(group.name, target.value),
        }, "Fail over");
        return el("tr", { "data-group": group.name },
          cell(group.name), cell(group.master ? group.master : badge("none", "bad"), "master"),
          num(group.epoch), cell(group.in_sync.join(", ")), num(group.in_sync_epoch),
          el("td", {}, target, " ", button));
      }), { id: "broker-groups" }));
    body.append(el("h2", {}, "Nodes"));
    body.append(table(
      ["Node", "Group", "Role", "State", "In sync", ["Log end", true], ["Lag", true], "Damaged log", "Version", ["Routing format", true], "Address"],
      data.nodes.map((n) => el("tr", { "data-node": n.id },
        cell(n.id), cell(n.broker_group),
        el("td", { class: "role" }, badge(n.role, n.role === "MASTER" ? "master" : "")),
        el("td", {}, n.alive ? badge("up", "ok") : badge("down", "down")),
        el("td", {}, n.in_sync ? "yes" : "no"),
        num(n.max_offset), el("td", { class: "number lag" }, bytes(n.lag_bytes)),
        el("td", { class: "damaged" }, n.damaged_log ? badge("damaged", "bad") : "no"),
        cell(n.software_version || "0.1.0"), num(n.routing_format),
        cell(n.address, "mono"))),
      { id: "nodes" }));
    body.append(el("h2", {}, "Raft voters"));
    body.append(table(["Voter", "Reachable", "Leader"],
      raft.voters.map((v) => el("tr", {},
        cell(v.address, "mono"),
        el("td", {}, v.reachable ? badge("yes", "ok") : badge("no", "bad")),
        el("td", {}, v.leader ? badge("leader", "leader") : ""))),
      { id: "voters" }));
    if (node.figures) {
      const f = node.figures;
      body.append(el("h2", {}, "This node (" + node.id + ")"));
      body.append(el("div", { class: "facts" },
        el("div", {}, el("span", {}, "Messages in/s (10 s, 1 min)"), f.put_rates.slice(0, 2).map((r) => r.toFixed(1)).join(" / ")),
        el("div", {}, el("span", {}, "Messages out/s (10 s, 1 min)"), f.got_rates.slice(0, 2).map((r) => r.toFixed(1)).join(" / ")),
        el("div", {}, el("span", {}, "Stored since start"), f.put_total.toLocaleString("en")),
        el("div", {}, el("span", {}, "Delivered since start"), f.got_total.toLocaleString("en")),
        el("div", {}, el("span", {}, "Sends open"), String(f.sends_open)),
      ));
    }
  }

  function drawProgress(p) {
    clear(progress);
    const seconds = (p.elapsed_ms / 1000).toFixed(1) + " s";
    let line;
    if (p.state === "running") {
      line = "Failover of " + p.broker_group + ": the master is handing over (waiting for the target to hold its whole log, then the vote)… " + seconds;
    } else if (p.state === "done") {
      line = "Failover of " + p.broker_group + " done: new master " + p.new_master + " (epoch " + p.epoch + "), writes paused " + p.writes_unavailable_ms + " ms, in " + seconds + ".";
    } else {
      line = "Failover of " + p.broker_group + " failed after " + seconds + ": " + p.reason;
    }
    progress.append(el("div", { class: "progress " + p.state, id: "failover-state", "data-state": p.state }, line));
  }

  async function startFailover(group, target) {
    try {
      const started = await api("POST", "/api/failover", { broker_group: group, target_node: target });
      following = started.id;
      drawProgress(started);
      follow();
    } catch (error) {
      notice(error.message, true);
    }
  }

  async function follow() {
    while (following !== null && !poll.stopped) {
      await new Promise((resolve) => setTimeout(resolve, 400));
      try {
        const p = await api("GET", "/api/failover/" + following);
        drawProgress(p);
        if (p.state !== "running") { following = null; poll.now(); }
      } catch (error) {
        notice(error.message, true);
        following = null;
      }
    }
  }

  const poll = poller(() => api("GET", "/api/cluster"), drawn, (error) => notice(error.message, true));
  return { stop() { poll.stopped = true; following = null; poll.stop(); } };
}

// ---- topics ------------------------------------------------------------------------------
const TYPES = ["", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"];
const PERMISSIONS = ["READ_WRITE", "READ", "WRITE"];
const PAGE_SIZE = 50;

function topicsPage(view) {
  let offset = 0;
  let filterText = "";
  const filter = el("input", { id: "topic-filter", placeholder: "Filter by name", type: "search" });
  const counter = el("span", { class: "muted", id: "topic-count" });
  const previous = el("button", { type: "button", class: "secondary", id: "topics-previous" }, "Previous");
  const next = el("button", { type: "button", class: "secondary", id: "topics-next" }, "Next");
  const body = el("div", { id: "topics" });
  const name = el("input", { id: "new-topic-name", required: true, maxlength: 255 });
  const type = el("select", { id: "new-topic-type" }, TYPES.map((t) => el("option", { value: t }, t || "any (UNSPECIFIED)")));
  const queues = el("input", { id: "new-topic-queues", type: "number", min: 1, max: 1024, value: 4 });
  const permission = el("select", { id: "new-topic-permission" }, PERMISSIONS.map((p) => el("option", { value: p }, p)));
  const create = el("form", { class: "inline", id: "create-topic" },
    el("label", {}, "Name", name), el("label", {}, "Type", type),
    el("label", {}, "Queues per group", queues), el("label", {}, "Permission", permission),
    el("button", { type: "submit", id: "create-topic-button" }, "Create topic"));
  view.append(el("h1", {}, "Topics"), create,
    el("div", { class: "toolbar" }, filter, previous, next, counter), body);

  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await api("POST", "/api/topics", {
        name: name.value, message_type: type.value, queue_count: Number(queues.value), permission: permission.value,
      });
      notice("Created topic " + made.name + ".");
      name.value = "";
      poll.now();
    } catch (error) { notice(error.message, true); }
  });
  let typing = null;
  filter.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { filterText = filter.value; offset = 0; poll.now(); }, 250);
  });
  previous.addEventListener("click", () => { offset = Math.max(0, offset - PAGE_SIZE); poll.now(); });
  next.addEventListener("click", () => { offset += PAGE_SIZE; poll.now(); });

  async function update(topic, queueCount, newPermission) {
    try {
      await api("PUT", "/api/topics/" + encodeURIComponent(topic.name), {
        queue_count: queueCount, permission: newPermission,
      });
      notice("Updated topic " + topic.name + ".");
      poll.now();
    } catch (error) { notice(error.message, true); }
  }

  async function remove(topic) {
    if (!window.confirm("Delete topic " + topic.name + " and its messages?")) return;
    try {
      await api("DELETE", "/api/topics/" + encodeURIComponent(topic.name));
      notice("Deleted topic " + topic.name + ".");
      poll.now();
    } catch (error) { notice(error.message, true); }
  }

  function drawn(data, unchanged) {
    if (unchanged) return;
    const focused = document.activeElement;
    if (focused && body.contains(focused) && focused.matches("input, select")) return false;
    clear(body);
    const last = Math.min(data.offset + data.topics.length, data.total);
    counter.textContent = data.total === 0 ? "no topics" :
      (data.offset + 1) + "-" + last + " of " + data.total.toLocaleString("en") +
      " · retention " + (data.retention_ms / 3600000).toFixed(0) + " h";
    previous.disabled = data.offset === 0;
    next.disabled = last >= data.total;
    body.append(table(
      ["Topic", "Type", "Permission", "Queues per group", ["Messages here", true], ["In/s", true], ["Out/s", true], "Change"],
      data.topics.map((t) => {
        const count = t.queues.length ? t.queues[0].count : 0;
        const queueInput = el("input", { type: "number", min: 1, max: 1024, value: count, class: "edit-queues", "aria-label": "queues" });
        const permissionInput = el("select", { class: "edit-permission", "aria-label": "permission" },
          PERMISSIONS.map((p) => el("option", { value: p, selected: p === t.permission }, p)));
        return el("tr", { "data-topic": t.name },
          cell(t.name, "mono topic-name"), cell(t.message_type), cell(t.permission),
          cell(t.queues.map((q) => q.broker_group + ": " + q.count).join(", ")),
          num(t.messages_here), num(t.in_per_s), num(t.out_per_s),
          el("td", {}, queueInput, " ", permissionInput, " ",
            el("button", { type: "button", class: "secondary update-topic", onclick: () => update(t, Number(queueInput.value), permissionInput.value) }, "Save"),
            " ",
            el("button", { type: "button", class: "danger delete-topic", onclick: () => remove(t) }, "Delete")));
      }), { id: "topic-table" }));
  }

  const poll = poller(
    () => api("GET", "/api/topics?" + new URLSearchParams({ filter: filterText, offset: offset, limit: PAGE_SIZE })),
    drawn, (error) => notice(error.message, true));
  return poll;
}

// ---- start -------------------------------------------------------------------------------
document.addEventListener("DOMContentLoaded", async () => {
  document.getElementById("login").addEventListener("submit", login);
  document.getElementById("logout").addEventListener("click", logout);
  window.addEventListener("hashchange", route);
  try {
    loggedIn(await api("GET", "/api/session"));
  } catch (error) {
    showLogin("");
  }
});
