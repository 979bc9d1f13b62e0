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
    el("td", {}, link), el("td", {}, idNode(s.type)), el("td", { class: "status " + s.status }, s.status),
    el("td", {}, s.position || ""), el("td", {}, idNode(s.waiting_for || "")), el("td", {}, idNode(s.held_by || "")),
    el("td", {}, (s.updated_at || "").slice(0, 19)));
}

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
      show(result, `answered; the task is ${out.status}`);
      form.querySelector("button").disabled = true;
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
      show(result, `settled; the task is ${out.status}: a worker continues it`);
      for (const button of section.querySelectorAll("button")) button.disabled = true;
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

// ---------------------------------------------------------------- a task
function initTask(root) {
  const id = root.dataset.task;
  const base = "/v1/tasks/" + seg(id);
  const result = document.getElementById("action-result");
  const timeline = document.getElementById("timeline");
  const select = async (li) => {
    for (const other of timeline.querySelectorAll("li.selected")) other.classList.remove("selected");
    li.classList.add("selected");
    const seq = Number(li.dataset.seq);
    document.getElementById("at").textContent = "#" + seq;
    const forkAt = root.querySelector("form.fork input[name=at]");
    if (forkAt) forkAt.value = seq;
    try {
      const state = await api("GET", `${base}/state?at=${seq}`);
      document.getElementById("state").textContent = JSON.stringify(state, null, 2);
      const diff = seq > 1 ? await api("GET", `${base}/diff?a=${seq - 1}&b=${seq}`) : { text: "the first event" };
      document.getElementById("diff").textContent = diff.text;
    } catch (err) { document.getElementById("diff").textContent = err.message; }
  };
  timeline.addEventListener("click", (ev) => { const li = ev.target.closest("li.point"); if (li) select(li); });
  timeline.addEventListener("keydown", (ev) => {
    const li = ev.target.closest("li.point"); if (li && ev.key === "Enter") select(li);
  });
  const fork = root.querySelector("form.fork");
  fork.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      const out = await api("POST", `${base}/fork`, { at: Number(fork.elements.at.value) });
      location.href = "/tasks/" + seg(out.summary.task_id);
    } catch (err) { show(result, err.message, true); }
  });
  for (const [cls, verb] of [["retry", "retry"], ["cancel", "cancel"]]) {
    const button = root.querySelector("button." + cls);
    if (button) button.addEventListener("click", async () => {
      try { const out = await api("POST", `${base}/${verb}`); show(result, `${out.note}; status ${out.status}`); }
      catch (err) { show(result, err.message, true); }
    });
  }
  api("GET", `${base}/tree`).then((tree) => {
    const render = (node) => el("li", {},
      node.task_id === id ? el("b", {}, idNode(node.task_id))
        : el("a", { href: "/tasks/" + seg(node.task_id) }, idNode(node.task_id)),
      ` ${node.status}${node.fork_at ? " (at #" + node.fork_at + ")" : ""}`,
      node.forks.length ? el("ul", {}, ...node.forks.map(render)) : "");
    document.getElementById("tree").append(el("ul", { class: "tree" }, render(tree)));
  }).catch(() => {});
  const conversation = document.getElementById("conversation");
  if (conversation) {
    api("GET", `/v1/sessions/${seg(conversation.dataset.session)}/messages`).then((data) => {
      const chat = conversation.querySelector(".chat");
      for (const m of data.messages) chat.append(el("div", { class: "msg " + m.role }, el("span", { class: "role" }, m.role), m.content));
    }).catch((err) => show(conversation.querySelector(".chat"), err.message, true));
  }
  let live = false;
  const events = new EventSource(`${base}/events?after=${root.dataset.version}`);
  events.addEventListener("history", (msg) => {
    const h = JSON.parse(msg.data);
    live = true;
    const li = el("li", { class: "point " + h.type, "data-seq": String(h.seq), tabindex: "0" },
      el("span", { class: "seq" }, "#" + h.seq), " ", el("span", { class: "type" }, h.type), " " + visible(h.summary));
    timeline.append(li);
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
  const tasks = document.getElementById("tasks");
  if (tasks) initTaskList(tasks);
  const task = document.getElementById("task");
  if (task) initTask(task);
  for (const section of document.querySelectorAll("section.input")) initInput(section);
  for (const section of document.querySelectorAll("section.doubt")) initDoubt(section);
  for (const section of document.querySelectorAll("section.failed")) initFailed(section);
});
