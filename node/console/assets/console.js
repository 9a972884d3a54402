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
  document.getElementById("nav-users").hidden = !session.admin;
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

const PAGES = {
  cluster: clusterPage, topics: topicsPage, groups: groupsPage, messages: messagesPage, users: usersPage,
  producers: producersPage,
};

function route() {
  if (!state.session) return;
  const parts = location.hash.replace(/^#\//, "").split("/");
  const name = parts[0] || "cluster";
  const page = PAGES[name] || clusterPage;
  stopView();
  notice("");
  for (const link of document.querySelectorAll("#nav a")) {
    link.classList.toggle("active", link.dataset.page === name);
  }
  const view = clear(document.getElementById("view"));
  state.view = page(view, parts.slice(1).map(decodeURIComponent));
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
function clusterPage(view, path) {
  if (path && path[0]) return nodeConfigPage(view, path[0]);
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
    const mayReadConfig = !state.session.auth || state.session.admin; // the service's rule: admins
    body.append(table(
      ["Node", "Group", "Role", "State", "In sync", ["Log end", true], ["Lag", true], "Damaged log", "Version", ["Routing format", true], "Address", "Configuration"],
      data.nodes.map((n) => el("tr", { "data-node": n.id },
        cell(n.id), cell(n.broker_group),
        el("td", { class: "role" }, badge(n.role, n.role === "MASTER" ? "master" : "")),
        el("td", {}, n.alive ? badge("up", "ok") : badge("down", "down")),
        el("td", {}, n.in_sync ? "yes" : "no"),
        num(n.max_offset), el("td", { class: "number lag" }, bytes(n.lag_bytes)),
        el("td", { class: "damaged" }, n.damaged_log ? badge("damaged", "bad") : "no"),
        cell(n.software_version || "0.1.0"), num(n.routing_format),
        cell(n.address, "mono"),
        el("td", {}, mayReadConfig ? el("a", { href: "#/cluster/" + encodeURIComponent(n.id) + "/config", class: "node-config" }, "Configuration") : ""))),
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
    const seconds = p.elapsed_ms < 1000 ? p.elapsed_ms + " ms" : (p.elapsed_ms / 1000).toFixed(1) + " s";
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

// A node's configuration as it runs (``#/cluster/<node>/config``): its options by section,
// secrets shown only as set or not, and the same settings under RocketMQ's broker names.
// Another node's is read at that node by the console's own node, as this user.
function nodeConfigPage(view, nodeId) {
  const body = el("div", { id: "node-config" });
  const reload = el("button", { type: "button", class: "secondary", id: "node-config-reload", onclick: () => load() }, "Reload");
  view.append(el("h1", {}, "Configuration of ", el("span", { class: "mono", id: "node-config-id" }, nodeId)),
    el("div", { class: "toolbar" }, el("a", { href: "#/cluster" }, "Back to the cluster"), reload),
    el("p", { class: "hint" }, "As the node runs now (its node.toml, the environment and command line applied). Secrets are never shown, only whether they are set."),
    body);
  let stopped = false;

  function draw(config) {
    clear(body);
    body.append(el("div", { class: "facts" },
      el("div", {}, el("span", {}, "Node"), config.node_id),
      el("div", {}, el("span", {}, "Broker group"), config.broker_group)));
    const sections = [];
    for (const s of config.settings) {
      if (!sections.length || sections[sections.length - 1].name !== s.section) sections.push({ name: s.section, rows: [] });
      sections[sections.length - 1].rows.push(s);
    }
    for (const section of sections) {
      body.append(el("h2", {}, "[" + section.name + "]"));
      body.append(table(["Option", "Value"], section.rows.map((s) => el("tr", { "data-option": s.name },
        cell(s.name, "mono"),
        el("td", { class: "mono" }, s.redacted ? badge(s.value ? "set, not shown" : "not set", s.value ? "warn" : "") : s.value))),
      { id: "config-" + section.name, class: "node-config-section" }));
    }
    body.append(el("h2", {}, "Under RocketMQ's broker names (mqadmin getBrokerConfig)"));
    body.append(table(["Property", "Value"], config.broker_properties.map((p) => el("tr", { "data-property": p.name },
      cell(p.name, "mono"), cell(p.value, "mono"))), { id: "broker-properties" }));
  }

  async function load() {
    try {
      const config = await api("GET", "/api/nodes/" + encodeURIComponent(nodeId) + "/config");
      if (!stopped) { notice(""); draw(config); }
    } catch (error) {
      if (!stopped) notice(error.message, true);
    }
  }

  load();
  return { stop() { stopped = true; } };
}

// ---- topics ------------------------------------------------------------------------------
const TYPES = ["", "NORMAL", "FIFO", "DELAY", "TRANSACTION", "PRIORITY", "LITE"];
const PERMISSIONS = ["READ_WRITE", "READ", "WRITE"];
const PAGE_SIZE = 50;

// A list filtered and paged on the node: the filter applies 250 ms after typing stops and
// goes back to the first page; Previous and Next move a page. ``refresh()`` asks again.
function pagedFilter(filter, previous, next, refresh) {
  const state = { filter: "", offset: 0 };
  let typing = null;
  filter.addEventListener("input", () => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.filter = filter.value; state.offset = 0; refresh(); }, 250);
  });
  previous.addEventListener("click", () => { state.offset = Math.max(0, state.offset - PAGE_SIZE); refresh(); });
  next.addEventListener("click", () => { state.offset += PAGE_SIZE; refresh(); });
  return state;
}

function topicsPage(view, path) {
  const selected = path[0] || null;
  const detail = el("div", { id: "topic-detail" });
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
  const send = sendForm(() => selected, () => poll.now());
  view.append(el("h1", {}, "Topics"), create,
    el("div", { class: "toolbar" }, filter, previous, next, counter), body, detail, send.form);

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
  const paging = pagedFilter(filter, previous, next, () => poll.now());

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
          el("td", { class: "mono topic-name" },
            el("a", { href: "#/topics/" + encodeURIComponent(t.name), class: "topic-link" }, t.name)),
          cell(t.message_type), cell(t.permission),
          cell(t.queues.map((q) => q.broker_group + ": " + q.count).join(", ")),
          num(t.messages_here), num(t.in_per_s), num(t.out_per_s),
          el("td", {}, queueInput, " ", permissionInput, " ",
            el("button", { type: "button", class: "secondary update-topic", onclick: () => update(t, Number(queueInput.value), permissionInput.value) }, "Save"),
            " ",
            el("button", { type: "button", class: "danger delete-topic", onclick: () => remove(t) }, "Delete")));
      }), { id: "topic-table" }));
  }

  function drawDetail(t) {
    clear(detail);
    send.show(t);
    if (!t) return;
    detail.append(el("h2", {}, "Queues of ", el("span", { class: "mono", id: "topic-detail-name" }, t.name)),
      el("p", { class: "hint" }, "Offsets are read on this node's broker group (" + t.broker_group_here +
        "); another group's queues are on its own nodes."),
      table(["Broker group", ["Queue", true], ["Min offset", true], ["Max offset", true], ["Messages", true]],
        t.queue_offsets.map((q) => el("tr", {},
          cell(q.broker_group), num(q.queue_id),
          num(q.min_offset < 0 ? "elsewhere" : q.min_offset), num(q.max_offset < 0 ? "elsewhere" : q.max_offset),
          num(q.min_offset < 0 ? "" : q.max_offset - q.min_offset))),
        { id: "topic-queues" }));
    drawConsumers(t);
  }

  // The groups consuming the topic (a committed offset, a POP position or a live 4.x
  // subscriber on a broker group), each linking to its group page.
  function drawConsumers(t) {
    const how = (c) => [c.committed ? "committed offsets" : "", c.popping ? "POP" : "", c.subscribed ? "4.x subscriber online" : ""].filter(Boolean).join(", ");
    detail.append(el("h2", {}, "Consuming groups"), t.consumers.length
      ? table(["Group", "Broker group", "Known by"],
        t.consumers.map((c) => el("tr", { "data-group": c.group },
          el("td", {}, el("a", { href: "#/groups/" + encodeURIComponent(c.group), class: "mono" }, c.group)),
          cell(c.broker_group), cell(how(c)))),
        { id: "topic-consumers" })
      : el("p", { class: "muted", id: "topic-consumers-none" }, "No group consumes it yet."));
  }

  const poll = poller(async () => {
    const listed = await api("GET", "/api/topics?" + new URLSearchParams({ filter: paging.filter, offset: paging.offset, limit: PAGE_SIZE }));
    let shown = null;
    if (selected) {
      try { shown = await api("GET", "/api/topics/" + encodeURIComponent(selected)); } catch (error) { notice(error.message, true); }
    }
    return { listed, shown };
  }, (data, unchanged) => {
    if (unchanged) return undefined;
    drawDetail(data.shown);
    return drawn(data.listed, false);
  }, (error) => notice(error.message, true));
  return poll;
}

// A test message to the shown topic (POST /api/topics/<name>/messages), sent as this user
// through the node's send service: PUBLISH on the topic, the topic's type and the body's
// limits are its rules, and its refusal is shown. Built once (the poll never redraws it).
function sendForm(topic, changed) {
  const tag = el("input", { id: "send-tag", maxlength: 1024 });
  const keys = el("input", { id: "send-keys", maxlength: 1024, placeholder: "space-separated" });
  const group = el("input", { id: "send-message-group", maxlength: 1024, placeholder: "FIFO topics" });
  const liteTopic = el("input", { id: "send-lite-topic", maxlength: 1024, placeholder: "LITE topics" });
  const body = el("textarea", { id: "send-body", rows: 4, cols: 60 });
  const result = el("p", { id: "send-result" });
  const form = el("form", { class: "inline", id: "send-message", hidden: true },
    el("h2", {}, "Send a test message"),
    el("label", {}, "Tag", tag), el("label", {}, "Keys", keys),
    el("label", {}, "Message group", group), el("label", {}, "Lite topic", liteTopic),
    el("label", {}, "Body", body),
    el("button", { type: "submit", id: "send-button" }, "Send"), result);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    result.textContent = "";
    const ask = { body: body.value, keys: keys.value.split(/\s+/).filter(Boolean) };
    if (tag.value) ask.tag = tag.value;
    if (group.value) ask.message_group = group.value;
    if (liteTopic.value) ask.lite_topic = liteTopic.value;
    try {
      const sent = await api("POST", "/api/topics/" + encodeURIComponent(topic()) + "/messages", ask);
      result.textContent = "Sent: message id " + sent.message_id + ", broker group " + sent.broker_group +
        ", queue " + (sent.queue_id < 0 ? "unknown" : sent.queue_id) + ", offset " + sent.queue_offset + ".";
      notice("Sent a test message to " + sent.topic + ".");
      changed();
    } catch (error) {
      result.textContent = "Not sent: " + error.message;
      notice(error.message, true);
    }
  });
  return {
    form,
    show(t) { form.hidden = !t; },
  };
}

// ---- consumer groups ---------------------------------------------------------------------
function groupsPage(view, path) {
  let selected = path[0] || null;
  const filter = el("input", { id: "group-filter", placeholder: "Filter by name", type: "search" });
  const counter = el("span", { class: "muted", id: "group-count" });
  const previous = el("button", { type: "button", class: "secondary", id: "groups-previous" }, "Previous");
  const next = el("button", { type: "button", class: "secondary", id: "groups-next" }, "Next");
  const list = el("div", { id: "groups" });
  const detail = el("div", { id: "group-detail" });
  const edit = editGroupForm(() => selected, () => poll.now());
  const reset = resetForm(() => selected, () => poll.now());
  const deadLetters = deadLetterPanel(() => selected, () => poll.now());
  const newName = el("input", { id: "new-group-name", required: true, maxlength: 255 });
  const newAttempts = el("input", { id: "new-group-attempts", type: "number", min: 1, max: 999, value: 16 });
  const newFifo = el("input", { id: "new-group-fifo", type: "checkbox" });
  const create = el("form", { class: "inline", id: "create-group" },
    el("label", {}, "Name", newName), el("label", {}, "Max delivery attempts", newAttempts),
    el("label", {}, "FIFO", newFifo), el("button", { type: "submit", id: "create-group-button" }, "Create group"));
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const made = await api("POST", "/api/groups", {
        name: newName.value, max_delivery_attempts: Number(newAttempts.value), fifo: newFifo.checked,
      });
      notice("Created consumer group " + made.name + ".");
      newName.value = "";
      poll.now();
    } catch (error) { notice(error.message, true); }
  });
  view.append(el("h1", {}, "Consumer groups"), create,
    el("p", { class: "hint" }, "Members are the clients this node hears from; offsets, lag and messages in flight are read at each broker group's master."),
    el("div", { class: "toolbar" }, filter, previous, next, counter), list, detail, edit.form,
    reset.form, deadLetters.panel);
  const paging = pagedFilter(filter, previous, next, () => poll.now());

  async function remove(name) {
    if (!window.confirm("Delete consumer group " + name + "?")) return;
    try {
      await api("DELETE", "/api/groups/" + encodeURIComponent(name));
      notice("Deleted consumer group " + name + ".");
      if (selected === name) selected = null;
      poll.now();
    } catch (error) { notice(error.message, true); }
  }

  function drawList(data) {
    clear(list);
    const last = Math.min(data.offset + data.groups.length, data.total);
    counter.textContent = data.total === 0 ? "no groups" : (data.offset + 1) + "-" + last + " of " + data.total.toLocaleString("en");
    previous.disabled = data.offset === 0;
    next.disabled = last >= data.total;
    list.append(table(
      ["Group", ["Members", true], ["Lag", true], ["In flight (POP)", true], ["Retry messages", true], ["DLQ messages", true], ["Max attempts", true], "FIFO", ""],
      data.groups.map((g) => el("tr", { "data-group": g.name },
        cell(g.name, "mono group-name"), num(g.members), num(g.lag), num(g.in_flight),
        num(g.retry_messages), num(g.dlq_messages), num(g.max_delivery_attempts), cell(g.fifo ? "yes" : "no"),
        el("td", {},
          el("a", { href: "#/groups/" + encodeURIComponent(g.name), class: "group-details" }, "Details"), " ",
          el("button", { type: "button", class: "danger delete-group", onclick: () => remove(g.name) }, "Delete")))),
      { id: "group-table" }));
  }

  function drawDetail(g) {
    clear(detail);
    edit.show(g);
    reset.show(g);
    deadLetters.show(g);
    if (!g) return;
    detail.append(el("h2", {}, "Group ", el("span", { class: "mono", id: "group-detail-name" }, g.name)),
      el("div", { class: "facts" },
        el("div", {}, el("span", {}, "Total lag"), el("b", { id: "group-lag" }, String(g.lag))),
        el("div", {}, el("span", {}, "In flight (POP)"), el("b", { id: "group-in-flight" }, String(g.in_flight))),
        el("div", {}, el("span", {}, "Retry messages"), String(g.retry_messages)),
        el("div", {}, el("span", {}, "DLQ messages"), String(g.dlq_messages)),
        el("div", {}, el("span", {}, "Max delivery attempts"), el("b", { id: "group-max-attempts" }, String(g.max_delivery_attempts))),
        el("div", {}, el("span", {}, "FIFO"), el("b", { id: "group-fifo" }, g.fifo ? "yes" : "no")),
        el("div", {}, el("span", {}, "Lite exclusive"), el("b", { id: "group-lite-exclusive" }, g.lite_exclusive ? "yes" : "no")),
        g.settings ? el("div", {}, el("span", {}, "Consume type"), g.settings.consume_type + " / " + g.settings.message_model) : null));
    detail.append(el("h2", {}, "Members"), table(["Client id", "Address", "Language", ["Version", true], "Last heartbeat"],
      g.members.map((m) => el("tr", {},
        cell(m.client_id, "mono member-id"), cell(m.address || "unknown", "mono"), cell(m.language || "unknown"),
        num(m.version === null ? "" : m.version), cell(new Date(m.last_heartbeat_ms).toLocaleTimeString()))),
      { id: "group-members" }));
    if (g.subscriptions.length) {
      detail.append(el("h2", {}, "Subscriptions"), table(["Topic", "Expression", "Type"],
        g.subscriptions.map((s) => el("tr", {}, cell(s.topic, "mono"), cell(s.expression, "mono"), cell(s.type))),
        { id: "group-subscriptions" }));
    }
    // A LITE topic's rows are its lite topics (their offsets count messages).
    detail.append(el("h2", {}, "Progress per queue"), table(
      ["Topic", ["Queue or lite topic", true], "Broker group", ["Broker offset", true], ["Consumer offset", true], ["Lag", true], ["In flight", true]],
      g.topics.flatMap((t) => t.queues.map((q) => el("tr", { "data-topic": t.topic, "data-lite-topic": q.lite_topic || null },
        cell(t.topic, "mono"), q.lite_topic ? cell(q.lite_topic, "mono number lite-topic") : num(q.queue_id), cell(q.broker_group), num(q.broker_offset),
        num(q.consumer_offset), num(q.lag), num(q.in_flight)))),
      { id: "group-queues" }));
  }

  const poll = poller(async () => {
    const listed = await api("GET", "/api/groups?" + new URLSearchParams({ filter: paging.filter, offset: paging.offset, limit: PAGE_SIZE }));
    let shown = null;
    if (selected) {
      try { shown = await api("GET", "/api/groups/" + encodeURIComponent(selected)); } catch (error) {
        notice(error.message, true);
        selected = null;
      }
    }
    return { listed, shown };
  }, (data, unchanged) => {
    if (unchanged) return;
    drawList(data.listed);
    drawDetail(data.shown);
  }, (error) => notice(error.message, true));
  return poll;
}

// A group changed in place (PUT /api/groups/<name>): built once, filled from the group when
// another group is shown or after a save (the poll never overwrites what is being typed).
// A lower maximum counts at each message's next delivery, FIFO from the next receive.
function editGroupForm(group, changed) {
  const attempts = el("input", { id: "edit-group-attempts", type: "number", min: 1, max: 1000, required: true });
  const fifo = el("input", { id: "edit-group-fifo", type: "checkbox" });
  const exclusive = el("input", { id: "edit-group-lite-exclusive", type: "checkbox" });
  const save = el("button", { type: "submit", id: "edit-group-save" }, "Save changes");
  const form = el("form", { class: "inline", id: "edit-group", hidden: true },
    el("h2", {}, "Edit group"),
    el("label", {}, "Max delivery attempts", attempts), el("label", {}, "FIFO", fifo),
    el("label", {}, "Lite exclusive", exclusive), save,
    el("p", { class: "hint" }, "A lower maximum applies at each message's next delivery (one in flight that already used it goes to the dead-letter queue then); FIFO takes effect at the next receive, lite exclusive at the next lite subscription."));
  let filledFor = null;

  function fill(g) {
    attempts.value = g.max_delivery_attempts;
    fifo.checked = g.fifo;
    exclusive.checked = g.lite_exclusive;
    filledFor = g.name;
  }

  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    try {
      const name = group();
      const done = await api("PUT", "/api/groups/" + encodeURIComponent(name), {
        max_delivery_attempts: Number(attempts.value), fifo: fifo.checked, lite_exclusive: exclusive.checked,
      });
      fill(done);
      notice("Updated consumer group " + done.name + ".");
      changed();
    } catch (error) { notice(error.message, true); }
  });
  return {
    form,
    show(g) {
      form.hidden = !g;
      if (!g) { filledFor = null; return; }
      if (filledFor !== g.name) fill(g);
    },
  };
}

// A group's offsets on a topic reset to a time, the earliest or the latest message: built once
// (the poll redraws the details beside it, never what is typed here); Preview asks for a dry
// run, Reset asks for confirmation first. ``group()`` names the selected group.
function resetForm(group, changed) {
  const topic = el("input", { id: "reset-topic", required: true, maxlength: 255, list: "reset-topics" });
  const topics = el("datalist", { id: "reset-topics" });
  const target = el("select", { id: "reset-to" },
    el("option", { value: "time" }, "a time"), el("option", { value: "earliest" }, "the earliest message"),
    el("option", { value: "latest" }, "the latest message"));
  const when = el("input", { id: "reset-time", type: "datetime-local", step: 1 });
  const result = el("div", { id: "reset-result" });
  const preview = el("button", { type: "button", class: "secondary", id: "reset-preview" }, "Preview");
  const apply = el("button", { type: "submit", class: "danger", id: "reset-apply" }, "Reset offsets");
  const form = el("form", { class: "inline", id: "reset-offsets", hidden: true },
    el("h2", {}, "Reset offsets"),
    el("label", {}, "Topic", topic), topics, el("label", {}, "To", target),
    el("label", {}, "Time (this browser's zone)", when), preview, apply, result);
  target.addEventListener("change", () => { when.disabled = target.value !== "time"; });

  function destination() {
    if (target.value !== "time") return target.value;
    const ms = new Date(when.value).getTime();
    if (!when.value || Number.isNaN(ms)) throw new Error("Give the time to reset to.");
    return ms;
  }

  async function run(dryRun) {
    clear(result);
    try {
      const to = destination();
      if (!dryRun && !window.confirm("Reset the offsets of " + group() + " on " + topic.value + "?")) return;
      const done = await api("POST", "/api/groups/" + encodeURIComponent(group()) + "/reset",
        { topic: topic.value, to: to, dry_run: dryRun });
      result.append(el("p", {}, dryRun ? "Where the offsets would go:" : "Offsets reset:"),
        table(["Broker group", ["Queue", true], ["Old offset", true], ["New offset", true]],
          done.queues.map((q) => el("tr", {}, cell(q.broker_group), num(q.queue_id),
            num(q.old_offset < 0 ? "none" : q.old_offset), num(q.new_offset))),
          { id: "reset-queues" }));
      if (!dryRun) { notice("Reset the offsets of " + done.group + " on " + done.topic + "."); changed(); }
    } catch (error) { notice(error.message, true); }
  }

  preview.addEventListener("click", () => run(true));
  form.addEventListener("submit", (event) => { event.preventDefault(); run(false); });
  return {
    form,
    show(g) {
      form.hidden = !g;
      if (!g) return;
      const known = [...new Set([...g.topics.map((t) => t.topic), ...g.subscriptions.map((s) => s.topic)])];
      if (topics.dataset.names !== known.join("\n")) {
        topics.dataset.names = known.join("\n");
        clear(topics);
        topics.append(...known.map((name) => el("option", { value: name })));
      }
    },
  };
}

// A group's dead-letter queue on a broker group, each entry with a checkbox, and its resend
// to the group (``node/services/dead_letter_resend.py``): the selected entries, or every one
// from the first to the last, sent in parts of RESEND_PART with the progress shown. Built
// once and loaded on demand (the poll never redraws it, so what is ticked stays ticked).
const RESEND_PART = 1000;
const DEAD_LETTERS_SHOWN = 200;

function deadLetterPanel(group, changed) {
  const brokerGroup = el("select", { id: "dlq-broker-group" });
  const load = el("button", { type: "button", class: "secondary", id: "dlq-load" }, "Load");
  const listing = el("div", { id: "dlq-listing" });
  const resendSelected = el("button", { type: "button", class: "danger", id: "dlq-resend-selected" }, "Resend selected");
  const resendAll = el("button", { type: "button", class: "danger", id: "dlq-resend-all" }, "Resend all");
  const progress = el("progress", { id: "dlq-progress", max: 1, value: 0, hidden: true });
  const result = el("p", { id: "dlq-result" });
  const panel = el("section", { id: "dead-letters", hidden: true },
    el("h2", {}, "Dead letters"),
    el("p", { class: "hint" }, "Resending gives a dead letter back to this group only (its POP consumers and its 4.x push consumers through %RETRY%), with its message id and a fresh attempt count. A dead letter resent before is skipped."),
    el("div", { class: "toolbar" }, el("label", {}, "Broker group", brokerGroup), load),
    listing, el("div", { class: "toolbar" }, resendSelected, resendAll, progress), result);
  let shownGroup = null;
  let page = null;

  function path() { return "/api/groups/" + encodeURIComponent(group()) + "/dead-letters"; }

  async function reload() {
    try {
      page = await api("GET", path() + "?" + new URLSearchParams({ broker_group: brokerGroup.value, limit: DEAD_LETTERS_SHOWN }));
      draw();
    } catch (error) { notice(error.message, true); }
  }

  function draw() {
    clear(listing);
    const last = page.max_offset - 1;
    listing.append(el("p", { class: "muted", id: "dlq-bounds" }, page.max_offset > page.min_offset
      ? "Offsets " + page.min_offset + " to " + last + " on " + page.broker_group + (page.entries.length < page.max_offset - page.min_offset ? " (the last " + page.entries.length + " shown)" : "")
      : "No dead letters on " + page.broker_group + "."));
    listing.append(table(["", ["Offset", true], "Message id", "Topic", "Tags", "Keys", ["Attempts", true], "Stored", ["Size", true], "Resent"],
      page.entries.map((e) => el("tr", { "data-offset": e.offset },
        el("td", {}, el("input", { type: "checkbox", class: "dlq-pick", "data-offset": e.offset })),
        num(e.offset), cell(e.message_id, "mono"), cell(e.origin_topic, "mono"), cell(e.tags, "mono"), cell(e.keys, "mono"),
        num(e.attempts), cell(new Date(e.store_timestamp_ms).toLocaleString()), num(bytes(e.body_bytes)),
        cell(e.resent ? badge("resent", "ok") : ""))),
      { id: "dlq-table" }));
    resendSelected.disabled = resendAll.disabled = page.max_offset <= page.min_offset;
  }

  // Each part is one call; the counts add up over the parts.
  async function resend(parts, what) {
    if (!window.confirm("Resend " + what + " of " + group() + " to the group?")) return;
    clear(result);
    progress.hidden = false;
    progress.max = parts.length;
    progress.value = 0;
    let resent = 0;
    let skipped = 0;
    try {
      for (const part of parts) {
        let ask = part;
        while (ask) {  // what one call's byte bound left is asked for again
          const done = await api("POST", path() + "/resend", { broker_group: page.broker_group, ...ask });
          resent += done.resent.length;
          skipped += done.already_resent.length;
          ask = done.not_yet.length ? { offsets: done.not_yet } : null;
        }
        progress.value += 1;
        result.textContent = "Resending: part " + progress.value + " of " + parts.length + "...";
      }
      result.textContent = "Resent " + resent + "; " + skipped + " already resent before (skipped).";
      notice("Resent " + resent + " dead letters of " + group() + ".");
      changed();
    } catch (error) {
      result.textContent = "Stopped after " + resent + " resent, " + skipped + " skipped: " + error.message;
      notice(error.message, true);
    }
    progress.hidden = true;
    reload();
  }

  resendSelected.addEventListener("click", () => {
    const offsets = [...listing.querySelectorAll(".dlq-pick:checked")].map((box) => Number(box.dataset.offset));
    if (!offsets.length) { notice("Tick the dead letters to resend.", true); return; }
    resend([{ offsets }], offsets.length + " dead letter(s)");
  });
  resendAll.addEventListener("click", () => {
    const parts = [];
    for (let first = page.min_offset; first < page.max_offset; first += RESEND_PART) {
      parts.push({ from_offset: first, to_offset: Math.min(first + RESEND_PART, page.max_offset) - 1 });
    }
    resend(parts, "all " + (page.max_offset - page.min_offset) + " dead letters");
  });
  load.addEventListener("click", reload);
  brokerGroup.addEventListener("change", reload);
  return {
    panel,
    show(g) {
      panel.hidden = !g;
      if (!g) { shownGroup = null; return; }
      const known = [...new Set([g.broker_group_here, ...g.topics.flatMap((t) => t.queues.map((q) => q.broker_group))])].sort();
      if (brokerGroup.dataset.names !== known.join("\n")) {
        brokerGroup.dataset.names = known.join("\n");
        clear(brokerGroup);
        brokerGroup.append(...known.map((name) => el("option", { value: name, selected: name === g.broker_group_here }, name)));
      }
      if (shownGroup !== g.name) { shownGroup = g.name; clear(result); reload(); }
    },
  };
}

// ---- producers ---------------------------------------------------------------------------
// Online producers per producer group, as each broker group's master hears them: RocketMQ
// 4.x clients name their producer groups in heartbeats (5.x clients and the SDK do not, and
// no client says which topics it sends to).
function producersPage(view) {
  const list = el("div", { id: "producers" });
  view.append(el("h1", {}, "Producers"),
    el("p", { class: "hint" }, "RocketMQ 4.x producers, by producer group, as the broker groups' masters hear their heartbeats (a producer is listed for 120 s after its last one). 5.x clients and the ferrymq SDK do not announce producer groups."),
    list);
  return poller(() => api("GET", "/api/producers"), (data, unchanged) => {
    if (unchanged) return;
    clear(list);
    const rows = data.groups.flatMap((g) => g.clients.map((c) => el("tr", { "data-group": g.group },
      cell(g.group, "mono"), cell(c.client_id, "mono producer-id"), cell(c.address, "mono"), cell(c.language),
      num(c.version), cell(c.broker_groups.join(", ")))));
    list.append(rows.length
      ? table(["Producer group", "Client id", "Address", "Language", ["Version", true], "Broker groups"], rows, { id: "producer-table" })
      : el("p", { class: "muted", id: "producers-none" }, "No producer online."));
  }, (error) => notice(error.message, true));
}

// ---- messages ----------------------------------------------------------------------------
function bodyBytes(message) {
  const raw = atob(message.body_base64);
  const data = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) data[i] = raw.charCodeAt(i);
  return data;
}

function hexDump(data) {
  const lines = [];
  for (let at = 0; at < data.length; at += 16) {
    const row = Array.from(data.slice(at, at + 16));
    const hex = row.map((b) => b.toString(16).padStart(2, "0")).join(" ");
    const ascii = row.map((b) => (b >= 32 && b < 127 ? String.fromCharCode(b) : ".")).join("");
    lines.push(at.toString(16).padStart(8, "0") + "  " + hex.padEnd(48) + "  " + ascii);
  }
  return lines.join("\n");
}

function bodyAs(message, format) {
  const data = bodyBytes(message);
  const textValue = new TextDecoder("utf-8").decode(data);
  if (format === "hex") return hexDump(data);
  if (format === "json") {
    try { return JSON.stringify(JSON.parse(textValue), null, 2); } catch (e) { return "(not JSON) " + e.message; }
  }
  return textValue;
}

function messageCard(message) {
  const body = el("pre", { class: "mono message-body" }, bodyAs(message, "text"));
  const formats = el("select", { class: "body-format", "aria-label": "body format" },
    ["text", "json", "hex"].map((f) => el("option", { value: f }, f)));
  formats.addEventListener("change", () => { body.textContent = bodyAs(message, formats.value); });
  const stored = message.stored;
  return el("div", { class: "message", "data-message-id": message.message_id },
    el("h2", {}, el("span", { class: "mono" }, message.message_id)),
    el("div", { class: "facts" },
      el("div", {}, el("span", {}, "Topic"), el("span", { class: "mono message-topic" }, message.topic)),
      el("div", {}, el("span", {}, "Queue / offset"), message.queue_id + " / " + message.queue_offset),
      el("div", {}, el("span", {}, "Tag"), el("span", { class: "message-tag" }, message.tag || "none")),
      el("div", {}, el("span", {}, "Keys"), el("span", { class: "message-keys" }, message.keys.join(", ") || "none")),
      el("div", {}, el("span", {}, "Born"), new Date(message.born_timestamp_ms).toISOString()),
      el("div", {}, el("span", {}, "Stored"), new Date(message.store_timestamp_ms).toISOString()),
      el("div", {}, el("span", {}, "Reconsumed"), message.reconsume_times === null ? "unknown" : String(message.reconsume_times)),
      el("div", {}, el("span", {}, "Stored at"), el("span", { class: "message-stored" },
        stored.broker_group + " (read at " + stored.node + "), CommitLog offset " + stored.commitlog_offset +
        (stored.commitlog_segment ? " in segment " + stored.commitlog_segment : "") +
        (stored.size === null ? "" : ", " + stored.size + " bytes")))),
    el("h2", {}, "Properties"),
    table(["Name", "Value"], Object.entries(message.properties).map(([k, v]) => el("tr", {},
      cell(k, "mono property-name"), cell(v, "mono property-value"))), { class: "message-properties" }),
    el("h2", {}, "Body (" + message.body_bytes + " bytes) ", formats), body,
    resendPanel(message), historyPanel(message));
}

// ---- "Resend to a group": one online client of the group consumes the message directly --
// (RocketMQ Dashboard's semantics, node/services/direct_consume.py): nothing is stored. The
// groups offered are the topic's consuming groups, the clients the chosen group's members.
let resendPanels = 0;

function resendPanel(message) {
  const id = "resend-" + (++resendPanels);
  const group = el("input", { class: "resend-group", required: true, maxlength: 255, list: id + "-groups" });
  const groups = el("datalist", { id: id + "-groups" });
  const client = el("input", { class: "resend-client", maxlength: 256, list: id + "-clients", placeholder: "any online member" });
  const clients = el("datalist", { id: id + "-clients" });
  const send = el("button", { type: "submit", class: "resend-send" }, "Resend");
  const result = el("div", { class: "resend-result" });
  const form = el("form", { class: "inline resend-form" },
    el("label", {}, "Group", group), groups, el("label", {}, "Client", client), clients, send);
  group.addEventListener("focus", async () => {
    if (groups.childElementCount) return;
    try {
      const topic = await api("GET", "/api/topics/" + encodeURIComponent(message.topic));
      for (const c of topic.consumers || []) groups.append(el("option", { value: c.group }));
    } catch (error) { /* the list is a convenience: any group may be typed */ }
  });
  group.addEventListener("change", async () => {
    clear(clients);
    try {
      const found = await api("GET", "/api/groups/" + encodeURIComponent(group.value));
      for (const m of found.members) clients.append(el("option", { value: m.client_id }));
    } catch (error) { /* as above */ }
  });
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    send.disabled = true;
    clear(result).append(el("p", { class: "muted" }, "Waiting for the client's answer..."));
    try {
      const done = await api("POST", "/api/messages/consume-directly", {
        topic: message.topic, group: group.value, client_id: client.value,
        message_id: message.offset_message_id, broker_group: message.stored.broker_group,
      });
      clear(result).append(el("p", { class: "resend-outcome" },
        badge(done.outcome, done.outcome === "consumed" ? "ok" : "bad"), " ",
        (done.client_answer ? done.client_answer + " " : "") + "from client ",
        el("span", { class: "mono resend-client-id" }, done.client_id),
        " (" + done.protocol + ", connected to " + done.node + "), answered in " + done.waited_ms + " ms" +
        (done.remark ? ": " + done.remark : "")));
    } catch (error) {
      clear(result).append(el("p", { class: "error resend-error" }, error.message));
    } finally { send.disabled = false; }
  });
  return el("div", { class: "message-resend" }, el("h2", {}, "Resend to a group"),
    el("p", { class: "hint" }, "One online client of the group runs its listener on this message and says what it answered, as RocketMQ Dashboard's resend does. Nothing is stored and no offset moves (a group's dead letters, resent from its page, are stored again instead)."),
    form, result);
}

// ---- a message's delivery history (per consumer group, read at its broker group's master) --
function historyTime(ms) {
  return ms ? new Date(ms).toISOString() : "";
}

function historyGroup(group) {
  const events = group.events.map((e) => el("tr", { class: "history-event" },
    cell(historyTime(e.time_ms), "mono"), cell(e.kind, "history-kind"),
    num(e.attempt || ""), cell(e.detail, "history-detail")));
  return el("div", { class: "history-group", "data-group": group.group },
    el("h3", {}, el("span", { class: "mono history-group-name" }, group.group), " ",
      badge(group.state, group.state === "dead-lettered" ? "bad" : group.state === "consumed" ? "ok" : "")),
    el("p", { class: "history-state" }, group.state_text),
    events.length ? table(["Time", "Event", ["Attempt", true], "Detail"], events, { class: "history-events" })
      : el("p", { class: "muted" }, "No delivery, ack or copy of this message in the records read."));
}

function historyPanel(message) {
  const body = el("div", { class: "history-body" });
  const button = el("button", { type: "button", class: "secondary history-refresh" }, "Show history");
  button.addEventListener("click", async () => {
    const query = {
      broker_group: message.stored.broker_group, topic: message.topic,
      queue: String(message.queue_id), offset: String(message.queue_offset),
    };
    button.disabled = true;
    try {
      const found = await api("GET", "/api/messages/history?" + new URLSearchParams(query));
      clear(body);
      body.append(el("p", { class: "muted history-read" },
        "Read at " + found.node + " (" + found.broker_group + "), " + found.records_scanned +
        " records, " + new Date().toISOString()));
      if (found.truncated) body.append(el("p", { class: "error history-truncated" }, found.note));
      if (!found.groups.length) {
        body.append(el("p", { class: "muted history-none" }, "No consumer group has a position in this queue."));
      }
      for (const group of found.groups) body.append(historyGroup(group));
      button.textContent = "Refresh history";
    } catch (error) {
      clear(body);
      body.append(el("p", { class: "error history-error" }, error.message));
    } finally { button.disabled = false; }
  });
  return el("div", { class: "message-history" }, el("h2", {}, "Delivery history ", button), body);
}

function messagesPage(view) {
  const topic = el("input", { id: "message-topic", placeholder: "topic" });
  const kind = el("select", { id: "message-search" },
    el("option", { value: "key" }, "by key"), el("option", { value: "id" }, "by message id"),
    el("option", { value: "offset" }, "by queue offset"), el("option", { value: "time" }, "by store time"));
  const key = el("input", { id: "message-key", placeholder: "key" });
  const id = el("input", { id: "message-id", placeholder: "message id", size: 34 });
  const queue = el("input", { id: "message-queue", type: "number", min: 0, value: 0, "aria-label": "queue" });
  const offset = el("input", { id: "message-offset", type: "number", min: 0, value: 0, "aria-label": "offset" });
  const begin = el("input", { id: "message-begin", type: "datetime-local", step: 1, "aria-label": "from" });
  const end = el("input", { id: "message-end", type: "datetime-local", step: 1, "aria-label": "to" });
  const fields = {
    key: [el("label", {}, "Key", key)],
    id: [el("label", {}, "Message id", id)],
    offset: [el("label", {}, "Queue", queue), el("label", {}, "Offset", offset)],
    time: [el("label", {}, "From", begin), el("label", {}, "To", end)],
  };
  const variable = el("span", { class: "toolbar" });
  const form = el("form", { class: "inline", id: "message-form" },
    el("label", {}, "Topic", topic), el("label", {}, "Search", kind), variable,
    el("button", { type: "submit", id: "message-find" }, "Find"));
  const results = el("div", { id: "message-results" });
  view.append(el("h1", {}, "Messages"), form, results);
  function showFields() { clear(variable); variable.append(...fields[kind.value]); }
  kind.addEventListener("change", showFields);
  showFields();
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const query = { topic: topic.value };
    if (kind.value === "key") query.key = key.value;
    if (kind.value === "id") query.id = id.value;
    if (kind.value === "offset") { query.queue = queue.value; query.offset = offset.value; }
    if (kind.value === "time") {
      query.begin = String(begin.value ? new Date(begin.value).getTime() : 0);
      if (end.value) query.end = String(new Date(end.value).getTime());
    }
    clear(results);
    try {
      const found = await api("GET", "/api/messages?" + new URLSearchParams(query));
      notice("");
      results.append(el("p", { class: "muted", id: "message-count" },
        found.messages.length + " message(s), searched in " + found.broker_groups.join(", ")));
      for (const message of found.messages) results.append(messageCard(message));
    } catch (error) { notice(error.message, true); }
  });
  return null;
}

// ---- users and ACL entries -----------------------------------------------------------------
function usersPage(view) {
  const accessKey = el("input", { id: "new-user-access-key", required: true });
  const secretKey = el("input", { id: "new-user-secret-key", type: "password", required: true, autocomplete: "new-password" });
  const admin = el("input", { id: "new-user-admin", type: "checkbox" });
  const create = el("form", { class: "inline", id: "create-user" },
    el("label", {}, "Access key", accessKey), el("label", {}, "Secret key", secretKey),
    el("label", {}, "Admin", admin), el("button", { type: "submit", id: "create-user-button" }, "Create user"));
  const body = el("div", { id: "users" });
  view.append(el("h1", {}, "Users and ACLs"), create, body);

  async function act(method, path, payload, done) {
    try {
      await api(method, path, payload);
      notice(done);
      load();
      return true;
    } catch (error) {
      notice(error.message, true);
      return false;
    }
  }
  create.addEventListener("submit", async (event) => {
    event.preventDefault();
    const made = await act("POST", "/api/users",
      { access_key: accessKey.value, secret_key: secretKey.value, admin: admin.checked },
      "Created user " + accessKey.value + ".");
    secretKey.value = "";
    if (made) { accessKey.value = ""; admin.checked = false; }
  });

  function userRow(u) {
    const path = "/api/users/" + encodeURIComponent(u.access_key);
    const effect = el("select", { class: "grant-effect", "aria-label": "effect" }, ["ALLOW", "DENY"].map((v) => el("option", { value: v }, v)));
    const action = el("select", { class: "grant-action", "aria-label": "action" }, ["PUBLISH", "SUBSCRIBE"].map((v) => el("option", { value: v }, v)));
    const kind = el("select", { class: "grant-kind", "aria-label": "kind" }, ["TOPIC", "GROUP"].map((v) => el("option", { value: v }, v)));
    const pattern = el("input", { class: "grant-pattern", placeholder: "name or prefix*", "aria-label": "pattern" });
    return el("tr", { "data-user": u.access_key },
      cell(u.access_key, "mono user-name"),
      el("td", {}, u.admin ? badge("admin", "master") : "no", " ",
        el("button", { type: "button", class: "secondary toggle-admin",
          onclick: () => act("PUT", path, { admin: !u.admin }, "Changed " + u.access_key + "'s admin rights.") },
        u.admin ? "Revoke admin" : "Make admin")),
      el("td", { class: "acl" }, u.acl.length === 0 ? "none" : u.acl.map((e) => el("div", { class: "acl-entry" },
        el("span", { class: "mono" }, e.effect + " " + e.action + " " + e.kind + " " + e.pattern), " ",
        el("button", { type: "button", class: "secondary revoke",
          onclick: () => act("POST", path + "/revoke", e, "Revoked an entry of " + u.access_key + ".") }, "Revoke")))),
      el("td", {}, effect, " ", action, " ", kind, " ", pattern, " ",
        el("button", { type: "button", class: "secondary grant",
          onclick: () => act("POST", path + "/grant", { effect: effect.value, action: action.value, kind: kind.value, pattern: pattern.value },
            "Granted " + u.access_key + " an entry.") }, "Grant")),
      el("td", {}, el("button", { type: "button", class: "danger delete-user",
        onclick: () => { if (window.confirm("Delete user " + u.access_key + "?")) act("DELETE", path, undefined, "Deleted user " + u.access_key + "."); } }, "Delete")));
  }

  async function load() {
    try {
      const data = await api("GET", "/api/users");
      clear(body);
      body.append(table(["User", "Admin", "ACL entries", "Grant", ""], data.users.map(userRow), { id: "user-table" }));
    } catch (error) { notice(error.message, true); }
  }
  load();
  return null;
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
