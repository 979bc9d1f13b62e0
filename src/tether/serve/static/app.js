// tether inspector: vanilla JavaScript over the /v1 API. No build step, no dependencies.
"use strict";

function cookie(name) {
  const found = document.cookie.split("; ").find((c) => c.startsWith(name + "="));
  return found ? decodeURIComponent(found.slice(name.length + 1)) : "";
}

async function api(method, path, body) {
  const headers = { "X-Tether-CSRF": cookie("tether_csrf") };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  const response = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const data = await response.json().catch(() => ({}));
  if (!response.ok) throw new Error((data.code ? data.code + ": " : "") + (data.message || response.status));
  return data;
}

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") node.className = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child instanceof Node ? child : String(child ?? ""));
  return node;
}

// An id as one URL path segment: percent-encoded; "." and ".." (which a browser removes from a
// path, "%2E" spelled too) behind "%00", which the server drops. See tether/serve/_ids.py.
function seg(id) {
  const s = encodeURIComponent(id);
  return s === "." || s === ".." ? "%00" + s : s;
}

// Characters that do not print as themselves (controls, bidi marks and overrides, zero-width and
// format characters, spaces other than a plain space): shown as \uXXXX, as the server shows them.
const HIDDEN = /(?! )[\p{C}\p{Z}]/gu;

function escaped(ch) {
  const code = ch.codePointAt(0);
  return code <= 0xffff ? "\\u" + code.toString(16).padStart(4, "0") : "\\U" + code.toString(16).padStart(8, "0");
}

// An id (or a short name) for the page: isolated in <bdi>, its invisible characters made visible.
function idNode(id) {
  const text = String(id ?? "");
  const node = el("bdi", {});
  let last = 0;
  for (const m of text.matchAll(HIDDEN)) {
    node.append(text.slice(last, m.index), el("span", { class: "ctl" }, escaped(m[0])));
    last = m.index + m[0].length;
  }
  node.append(text.slice(last));
  return node;
}

// Plain text (a history line) with its invisible characters made visible.
function visible(text) {
  return String(text ?? "").replace(HIDDEN, escaped);
}

function show(target, text, isError) {
  if (!target) return;
  target.textContent = text;
  target.classList.toggle("error", !!isError);
}

// ---------------------------------------------------------------- the task list, live
function taskRow(s) {
  const link = el("a", { href: "/tasks/" + seg(s.task_id) }, idNode(s.task_id));
  return el("tr", { "data-task": s.task_id, class: "flash" },
    el("td", {}, link), el("td", {}, idNode(s.type)),
    el("td", { class: "status " + s.status }, s.status, s.requested ? el("span", { class: "pill requested" }, REQUESTED[s.requested]) : ""),
    el("td", {}, s.position || ""), el("td", {}, idNode(s.waiting_for || "")), el("td", {}, idNode(s.held_by || "")),
    el("td", {}, s.updated_at ? timeNode(s.updated_at) : ""));
}

const REQUESTED = { answer: "answered", cancel: "cancel requested", retry: "retry requested" };

function matches(s) {
  const status = document.getElementById("status-filter").value;
  const q = document.getElementById("search").value.toLowerCase();
  if (status && s.status !== status) return false;
  return !q || `${s.task_id} ${s.type} ${s.user_id || ""}`.toLowerCase().includes(q);
}

function initTaskList(table) {
  const body = table.tBodies[0];
  const search = document.getElementById("search");
  search.addEventListener("input", () => {
    const q = search.value.toLowerCase();
    for (const row of body.rows) row.hidden = q && !row.textContent.toLowerCase().includes(q);
  });
  const events = new EventSource("/v1/events");
  events.addEventListener("closed", () => events.close());  // the key was revoked: no reconnecting
  events.addEventListener("task", (msg) => {
    const s = JSON.parse(msg.data);
    const old = body.querySelector(`tr[data-task="${CSS.escape(s.task_id)}"]`);
    if (!matches(s)) { if (old) old.remove(); return; }
    const row = taskRow(s);
    if (old) old.replaceWith(row); else body.prepend(row);
  });
}

// ---------------------------------------------------------------- forms from JSON schemas
function fieldFor(schema, name, required) {
  schema = schema || {};
  const label = schema.title || name;
  const type = Array.isArray(schema.type) ? schema.type.find((t) => t !== "null") : schema.type;
  if (type === "object" && schema.properties) {
    const box = el("fieldset", {}, el("legend", {}, label || "answer"));
    const fields = Object.entries(schema.properties).map(([key, sub]) => {
      const f = fieldFor(sub, key, (schema.required || []).includes(key));
      box.append(f.node);
      return [key, f];
    });
    return { node: box, read: () => {
      const out = {};
      for (const [key, f] of fields) { const v = f.read(); if (v !== undefined) out[key] = v; }
      return out;
    } };
  }
  let input;
  let read;
  if (type === "boolean") {
    input = el("input", { type: "checkbox", name });
    read = () => input.checked;
  } else if (Array.isArray(schema.enum)) {
    input = el("select", { name }, ...schema.enum.map((v) => el("option", { value: JSON.stringify(v) }, String(v))));
    read = () => JSON.parse(input.value);
  } else if (type === "integer" || type === "number") {
    input = el("input", { type: "number", name, step: type === "integer" ? "1" : "any" });
    read = () => (input.value === "" ? undefined : Number(input.value));
  } else if (type === "string") {
    input = el("input", { type: "text", name });
    read = () => (input.value === "" && !required ? undefined : input.value);
  } else {
    input = el("textarea", { name, rows: "3", placeholder: "JSON, or plain text" });
    read = () => { try { return JSON.parse(input.value); } catch { return input.value; } };
  }
  if (required) input.required = true;
  const text = label ? label + (schema.description ? ` — ${schema.description}` : "") : "answer";
  return { node: el("label", {}, text + " ", input), read };
}

function initInput(section) {
  const schemaNode = section.querySelector("script.schema");
  const schema = schemaNode ? JSON.parse(schemaNode.textContent) : null;
  const form = section.querySelector("form.answer");
  const field = fieldFor(schema, schema ? "" : "value", true);
  form.append(field.node, el("button", { type: "submit" }, "Send"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const { task, key } = section.dataset;
    const result = section.querySelector(".result");
    try {
      const out = await api("POST", `/v1/tasks/${seg(task)}/inputs/${seg(key)}`,
        { value: field.read() });
      form.querySelector("button").disabled = true;
      if (document.getElementById("task")) { flash(`Answered ${key}: a worker continues the task.`); return; }
      show(result, `answered; the task is ${out.status}: a worker continues it`);
    } catch (err) { show(result, err.message, true); }
  });
}

// ---------------------------------------------------------------- a call in doubt, settled by a person
function initDoubt(section) {
  const path = `/v1/tasks/${seg(section.dataset.task)}/calls/${section.dataset.n}/resolve`;
  const result = section.querySelector(".result");
  const settle = async (body) => {
    try {
      const out = await api("POST", path, body);
      for (const button of section.querySelectorAll("button")) button.disabled = true;
      if (document.getElementById("task")) { flash(`Call #${section.dataset.n} settled: a worker continues the task.`); return; }
      show(result, `settled; the task is ${out.status}: a worker continues it`);
    } catch (err) { show(result, err.message, true); }
  };
  const happened = section.querySelector("form.happened");
  happened.addEventListener("submit", (ev) => {
    ev.preventDefault();
    let value;
    try { value = JSON.parse(happened.elements.result.value); } catch (err) {
      show(result, `the result must be JSON (a string is quoted: "ch_123"): ${err.message}`, true);
      return;
    }
    settle({ happened: true, result: value });
  });
  section.querySelector("form.not-happened").addEventListener("submit", (ev) => {
    ev.preventDefault();
    settle({ happened: false });
  });
}

// ---------------------------------------------------------------- times, read where the reader is
const RELATIVE = new Intl.RelativeTimeFormat(undefined, { numeric: "auto" });
const UNITS = [["year", 31536000], ["month", 2592000], ["week", 604800], ["day", 86400], ["hour", 3600], ["minute", 60]];

function relative(date) {
  const seconds = (date.getTime() - Date.now()) / 1000;
  if (Math.abs(seconds) < 5) return seconds < 0 ? "just now" : "in a moment";
  if (Math.abs(seconds) < 60) return RELATIVE.format(Math.round(seconds), "second");
  for (const [unit, size] of UNITS) {
    if (Math.abs(seconds) >= size || unit === "minute") return RELATIVE.format(Math.round(seconds / size), unit);
  }
  return date.toLocaleString();
}

const EXACT = { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short" };

// Every <time datetime>: relative in its text, the exact local time (and UTC) on hover.
function localTimes(root) {
  for (const node of (root || document).querySelectorAll("time[datetime]")) {
    const date = new Date(node.getAttribute("datetime"));
    if (Number.isNaN(date.getTime())) continue;
    if (!node.dataset.utc) node.dataset.utc = node.textContent;
    node.textContent = relative(date);
    node.title = `${date.toLocaleString(undefined, EXACT)} (${node.dataset.utc})`;
  }
}

function timeNode(iso) {
  const node = el("time", { datetime: iso }, iso);
  localTimes({ querySelectorAll: () => [node] });
  return node;
}

// ---------------------------------------------------------------- the state, as a tree
function pointer(parts) {
  return parts.map((p) => "/" + String(p).replaceAll("~", "~0").replaceAll("/", "~1")).join("");
}

function isEmpty(v) {
  return v === null || v === "" || (Array.isArray(v) && v.length === 0)
    || (typeof v === "object" && v !== null && !Array.isArray(v) && Object.keys(v).length === 0);
}

// Draws `value` into `box`: objects and arrays fold (open down to what changed), leaves read as
// key: value; `patch` (RFC 6902) marks what the event changed. Empty top-level fields go in one line.
function drawTree(box, value, patch) {
  const changed = new Set();
  const above = new Set([""]);
  for (const op of patch || []) {
    for (const path of [op.path, op.from]) {
      if (path === undefined) continue;
      changed.add(path);
      const parts = path.split("/");
      for (let i = 1; i < parts.length; i++) above.add(parts.slice(0, i).join("/"));
    }
  }
  const node = (label, v, parts, depth) => {
    const path = pointer(parts);
    const mark = changed.has(path);
    const key = el("span", { class: "key", title: path || "/" }, label);
    if (v !== null && typeof v === "object" && !isEmpty(v)) {
      const entries = Array.isArray(v) ? v.map((x, i) => [`${i + 1}.`, x, i]) : Object.entries(v).map(([k, x]) => [k, x, k]);
      const kids = el("ul", { role: "group" }, ...entries.map(([l, x, k]) => node(l, x, [...parts, k], depth + 1)));
      const size = Array.isArray(v) ? `${v.length} item${v.length === 1 ? "" : "s"}` : `${entries.length} field${entries.length === 1 ? "" : "s"}`;
      const details = el("details", {}, el("summary", {}, key, " ", el("span", { class: "size" }, size),
        mark ? el("span", { class: "changed-tag" }, "changed") : ""), kids);
      details.open = depth < 1 || above.has(path) || mark;
      return el("li", { class: mark ? "changed" : "" }, details);
    }
    const text = typeof v === "string" ? JSON.stringify(v) : JSON.stringify(v);
    return el("li", { class: "leaf" + (mark ? " changed" : "") }, key, ": ",
      el("span", { class: "value " + (v === null ? "null" : typeof v) }, text),
      mark ? el("span", { class: "changed-tag" }, "changed") : "");
  };
  box.replaceChildren();
  const top = el("ul", { class: "tree-root" });
  const empty = [];
  const first = ["task_id", "type", "status", "position", "waiting", "failure", "output"];
  const keys = Object.keys(value || {}).sort((a, b) => (first.indexOf(a) + 1 || 99) - (first.indexOf(b) + 1 || 99));
  for (const [k, v] of keys.map((k) => [k, value[k]])) {
    if (isEmpty(v) && !changed.has(pointer([k]))) empty.push(k); else top.append(node(k, v, [k], 0));
  }
  box.append(top);
  if (empty.length) box.append(el("p", { class: "empty-fields" }, "Empty: " + empty.join(", ")));
}

// ---------------------------------------------------------------- the conversation, calls beside their results
function drawTranscript(chat, messages) {
  const calls = new Map();
  chat.replaceChildren();
  for (const m of messages) {
    const answers = m.role === "tool" ? (m.answers && m.answers.length ? m.answers : [m.tool_call_id]).filter(Boolean) : [];
    const home = answers.map((id) => calls.get(id)).find(Boolean);
    if (home) {  // a tool result: under the call it answers
      home.append(el("div", { class: "tool-result" }, el("span", { class: "role" }, "result"), m.content || ""));
      continue;
    }
    const bubble = el("div", { class: "msg " + m.role, id: `msg-${m.seq}` },
      el("span", { class: "role" }, m.role + (m.name ? ` · ${m.name}` : "")), m.content || "");
    if (m.role === "tool" && answers.length) bubble.append(el("span", { class: "call-id" }, `result of ${answers.join(", ")}`));
    for (const call of m.tool_calls || []) {
      const block = el("div", { class: "tool-call", id: "call-" + call.id },
        el("div", { class: "call-head" }, el("code", {}, `${call.name}(${JSON.stringify(call.arguments || {})})`),
          el("span", { class: "call-id" }, call.id)));
      calls.set(call.id, block);
      bubble.append(block);
    }
    chat.append(bubble);
  }
}

// ---------------------------------------------------------------- a task
function flash(text) {
  sessionStorage.setItem("tether-flash", text);
  location.reload();
}

function timelinePoint(h) {
  const button = el("button", { type: "button", class: "at", "aria-label": `Show the state after event #${h.seq}` },
    h.boundary ? el("span", { class: "boundary" }, h.boundary) : "",
    el("span", { class: "seq" }, "#" + h.seq), " ", el("span", { class: "type" }, h.type), " ",
    el("span", { class: "what" }, visible(h.summary)));
  return el("li", { class: "point " + h.type, "data-seq": String(h.seq) }, button, timeNode(h.at));
}

function initTask(root) {
  const id = root.dataset.task;
  const base = "/v1/tasks/" + seg(id);
  const result = document.getElementById("action-result");
  const timeline = document.getElementById("timeline");
  const tree = document.getElementById("state-tree");
  const said = sessionStorage.getItem("tether-flash");
  if (said) { sessionStorage.removeItem("tether-flash"); show(result, said); }
  const initial = JSON.parse(document.getElementById("state-data").textContent);
  drawTree(tree, initial.state, initial.changes.patch);
  const select = async (li) => {
    for (const other of timeline.querySelectorAll("li.selected")) other.classList.remove("selected");
    li.classList.add("selected");
    const seq = Number(li.dataset.seq);
    document.getElementById("at").textContent = "#" + seq;
    document.getElementById("changes-at").textContent = "#" + seq;
    const forkAt = root.querySelector("form.fork input[name=at]");
    if (forkAt) forkAt.value = seq;
    try {
      const state = await api("GET", `${base}/state?at=${seq}`);
      const diff = seq > 1 ? await api("GET", `${base}/diff?a=${seq - 1}&b=${seq}`) : { text: "the first event", patch: [] };
      document.getElementById("diff").textContent = diff.text.split("\n").map(visible).join("\n");  // lines kept
      drawTree(tree, state, diff.patch);
    } catch (err) { document.getElementById("diff").textContent = err.message; }
  };
  timeline.addEventListener("click", (ev) => { const li = ev.target.closest("li.point"); if (li) select(li); });
  const older = document.getElementById("older");
  if (older) older.addEventListener("click", async () => {
    const before = Number(older.dataset.before);
    try {
      const page = await api("GET", `${base}/history?after=0&limit=${Math.max(1, before - 1)}`);
      for (const h of page.items.reverse()) if (h.seq < before) timeline.append(timelinePoint(h));
      older.remove();
    } catch (err) { show(result, err.message, true); }
  });
  initSteering(root, base, result);
  api("GET", `${base}/tree`).then((node) => {
    const render = (n) => el("li", {},
      n.task_id === id ? el("b", {}, idNode(n.task_id)) : el("a", { href: "/tasks/" + seg(n.task_id) }, idNode(n.task_id)),
      ` ${n.status}${n.fork_at ? " (at #" + n.fork_at + ")" : ""}`,
      n.forks.length ? el("ul", {}, ...n.forks.map(render)) : "");
    document.getElementById("tree").append(el("ul", { class: "tree" }, render(node)));
    if (node.forks.length || node.task_id !== id) document.getElementById("fork-tree").hidden = false;
  }).catch(() => {});
  const conversation = document.getElementById("conversation");
  if (conversation) {
    api("GET", `/v1/sessions/${seg(conversation.dataset.session)}/messages`)
      .then((page) => drawTranscript(conversation.querySelector(".chat"), page.items))
      .catch((err) => show(conversation.querySelector(".chat"), err.message, true));
  }
  followTask(root, base, timeline);
}

// Retry, cancel (confirmed first), fork (at an event, under a name): each says what it did.
function initSteering(root, base, result) {
  const retry = root.querySelector("button.retry");
  if (retry) retry.addEventListener("click", async () => {
    retry.disabled = true;
    try { await api("POST", `${base}/retry`); flash("Retry requested: a worker runs the task again."); }
    catch (err) { retry.disabled = false; show(result, err.message, true); }
  });
  const cancel = root.querySelector("button.cancel");
  const dialog = document.getElementById("confirm-cancel");
  if (cancel && dialog) {
    cancel.addEventListener("click", () => dialog.showModal());
    dialog.addEventListener("close", async () => {
      if (dialog.returnValue !== "confirm") { cancel.focus(); return; }
      try {
        await api("POST", `${base}/cancel`, { reason: dialog.querySelector("input[name=reason]").value || "cancelled" });
        flash("Cancel requested: a worker stops the task and runs its compensations.");
      } catch (err) { show(result, err.message, true); }
    });
  }
  const fork = root.querySelector("form.fork");
  fork.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const body = { at: Number(fork.elements.at.value) };
    if (fork.elements.new_id.value.trim()) body.new_id = fork.elements.new_id.value.trim();
    try {
      const out = await api("POST", `${base}/fork`, body);
      sessionStorage.setItem("tether-flash", `Forked at event #${body.at}: a worker runs it from there.`);
      location.href = "/tasks/" + seg(out.summary.task_id);
    } catch (err) { show(result, err.message, true); }
  });
}

// The task live: new events on top, the story's latest line and status kept current.
function followTask(root, base, timeline) {
  let live = false;
  const events = new EventSource(`${base}/events?after=${root.dataset.version}`);
  events.addEventListener("history", (msg) => {
    const h = JSON.parse(msg.data);
    live = true;
    const li = timelinePoint(h);
    li.classList.add("flash");
    timeline.prepend(li);
    const latest = document.querySelector("#story .latest");
    if (latest) latest.replaceChildren("Latest: ", el("a", { href: "#timeline" }, el("span", { class: "seq" }, "#" + h.seq), " " + h.type),
      " — " + visible(h.summary) + " ", timeNode(h.at));
    if (h.type === "StatusChanged" && h.data && h.data.status) {
      for (const pill of document.querySelectorAll(".meta .status, #story .pill:first-child")) {
        pill.textContent = pill.classList.contains("pill") ? h.data.status.replace("_", " ") : h.data.status;
        pill.className = pill.className.split(" ")[0] + " " + h.data.status;
      }
    }
  });
  events.addEventListener("replaced", () => { events.close(); location.reload(); });  // rewound: a new history
  events.addEventListener("end", () => { events.close(); if (live) location.reload(); });
  events.addEventListener("closed", () => events.close());  // the key was revoked: no reconnecting
}

// ---------------------------------------------------------------- failed tasks
function initFailed(section) {
  section.querySelector("button.retry").addEventListener("click", async () => {
    try {
      const out = await api("POST", `/v1/tasks/${seg(section.dataset.task)}/retry`);
      show(section.querySelector(".result"), `${out.note}; status ${out.status}`);
    } catch (err) { show(section.querySelector(".result"), err.message, true); }
  });
}

document.addEventListener("DOMContentLoaded", () => {
  localTimes(document);
  setInterval(() => localTimes(document), 30_000);
  const tasks = document.getElementById("tasks");
  if (tasks) initTaskList(tasks);
  const task = document.getElementById("task");
  if (task) initTask(task);
  for (const section of document.querySelectorAll("section.input")) initInput(section);
  for (const section of document.querySelectorAll("section.doubt")) initDoubt(section);
  for (const section of document.querySelectorAll("section.failed")) initFailed(section);
});
