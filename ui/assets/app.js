// jetloop dashboard: one module, no dependencies, no build step. It reads
// and acts through the runtime API's HTTP routes (/v1/...), signed in by
// the session cookie; every request that changes something carries the
// page's CSRF token. Text from the API is always set as text, never as
// markup.

const csrf = document.querySelector('meta[name="csrf-token"]').content;
const main = document.getElementById("main");
const notice = document.getElementById("notice");

const STATUSES = ["idle", "working", "queued", "waiting", "blocked", "paused", "done", "failed", "cancelled", "budget_exceeded"];
const FINAL = new Set(["cancelled"]);
const PAGE = 50;

// ---- the API ----

class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

// newKey is a random idempotency key. crypto.randomUUID exists only in a
// secure context (HTTPS, loopback); getRandomValues everywhere, so the
// page acts over plain HTTP as well.
function newKey() {
  const b = crypto.getRandomValues(new Uint8Array(16));
  return Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");
}

async function api(path, { method = "GET", body, key } = {}) {
  const headers = { Accept: "application/json" };
  if (method !== "GET") {
    headers["X-CSRF-Token"] = csrf;
    headers["Content-Type"] = "application/json";
    headers["Idempotency-Key"] = key || newKey();
  }
  const resp = await fetch(path, {
    method, headers, credentials: "same-origin",
    body: body === undefined ? (method === "GET" ? undefined : "{}") : JSON.stringify(body),
  });
  if (resp.status === 401) {
    location.assign("/ui/login");
    throw new APIError(401, "signed out");
  }
  const text = await resp.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch { /* not JSON */ }
  if (!resp.ok) {
    throw new APIError(resp.status, (data && data.message) || text || resp.statusText);
  }
  return data;
}

const enc = encodeURIComponent;
const sessionPath = (agent, session) => `/v1/agents/${enc(agent)}/sessions/${enc(session)}`;

// ---- building the page ----

// h builds an element: attributes (on* are listeners, a false or null
// value is left out) and children (strings become text).
function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === false || v === null || v === undefined) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else if (k === "dataset") Object.assign(el.dataset, v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

function say(text, isError = false) {
  const p = h("p", { class: isError ? "error" : "" }, text);
  notice.append(p);
  setTimeout(() => p.remove(), isError ? 12000 : 5000);
}

function badge(status) {
  return h("span", { class: `badge s-${status}` }, status.replace("_", " "));
}

function when(t) {
  if (!t || t.startsWith("0001-")) return h("span", { class: "muted" }, "–");
  const d = new Date(t);
  return h("time", { datetime: t, title: d.toLocaleString() }, ago(d));
}

function ago(d) {
  const s = Math.round((Date.now() - d.getTime()) / 1000);
  const abs = Math.abs(s);
  const fmt = abs < 60 ? `${abs}s` : abs < 3600 ? `${Math.floor(abs / 60)}m` : abs < 86400 ? `${Math.floor(abs / 3600)}h ${Math.floor(abs % 3600 / 60)}m` : `${Math.floor(abs / 86400)}d`;
  return s >= 0 ? `${fmt} ago` : `in ${fmt}`;
}

const num = (n) => (n || 0).toLocaleString();
const usd = (n) => "$" + (n || 0).toFixed(n >= 1 ? 2 : 4);
const dash = (s) => (s === undefined || s === null || s === "" ? "–" : s);

function cell(label, content, cls) {
  return h("td", { "data-label": label, class: cls }, content);
}

function table(caption, heads, rows, empty) {
  if (!rows.length) return h("p", { class: "muted" }, empty);
  return h("table", { class: "cards" },
    h("caption", {}, caption),
    h("thead", {}, h("tr", {}, heads.map(([label, cls]) => h("th", { scope: "col", class: cls }, label)))),
    h("tbody", {}, rows));
}

function pretty(raw) {
  if (raw === undefined || raw === null) return "";
  try { return JSON.stringify(typeof raw === "string" ? JSON.parse(raw) : raw, null, 2); } catch { return String(raw); }
}

// parseDuration reads a Go duration ("1h2m3.5s") in seconds.
function parseDuration(s) {
  if (!s) return 0;
  let total = 0;
  const units = { h: 3600, m: 60, s: 1, ms: 1e-3, "us": 1e-6, "µs": 1e-6, ns: 1e-9 };
  for (const [, n, u] of s.matchAll(/([\d.]+)(h|ms|m|s|us|µs|ns)/g)) total += parseFloat(n) * units[u];
  return total;
}

// ---- the router and what a view holds ----

let view = { stop() {} };

function route() {
  view.stop();
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, qs] = hash.split("?");
  const params = new URLSearchParams(qs || "");
  const parts = path.split("/").map(decodeURIComponent);
  const section = parts[0] || "sessions";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === (section === "s" ? "sessions" : section)) a.setAttribute("aria-current", "page");
    else a.removeAttribute("aria-current");
  }
  const views = {
    sessions: () => sessionsView(params),
    s: () => sessionView(parts[1], parts.slice(2).join("/")),
    agents: () => agentsView(),
    schedules: () => schedulesView(),
    events: () => eventsView(params),
    dlq: () => (parts[1] ? letterView(parts[1]) : lettersView(params)),
  };
  view = (views[section] || views.sessions)();
}

// A view owns its timers and streams; stop ends them.
function newView() {
  const timers = new Set();
  const sources = new Set();
  return {
    stopped: false,
    every(ms, fn) { const t = setInterval(fn, ms); timers.add(t); return t; },
    later(ms, fn) { const t = setTimeout(fn, ms); timers.add(t); return t; },
    stream(url, handlers, indicator) {
      const es = new EventSource(url);
      sources.add(es);
      es.addEventListener("open", () => { if (indicator) { indicator.className = "live on"; indicator.textContent = "live"; } });
      es.addEventListener("error", () => { if (indicator) { indicator.className = "live off"; indicator.textContent = "reconnecting"; } });
      for (const [ev, fn] of Object.entries(handlers)) es.addEventListener(ev, (m) => fn(m.data ? JSON.parse(m.data) : {}));
      return es;
    },
    stop() {
      this.stopped = true;
      for (const t of timers) { clearInterval(t); clearTimeout(t); }
      for (const s of sources) s.close();
    },
  };
}

function show(...children) {
  main.replaceChildren(...children.flat());
}

function failed(err) {
  return h("p", { class: "error", role: "alert" }, `Could not load: ${err.message}`);
}

// ---- sessions ----

function sessionsView(params) {
  const v = newView();
  const agent = params.get("agent") || "";
  const status = params.get("status") || "";
  const cursor = params.get("cursor") || "";
  const live = h("span", { class: "live off", "aria-live": "off" }, "connecting");
  const heading = h("h1", {}, "Sessions", live);
  const agentSel = h("select", { id: "f-agent", name: "agent" }, h("option", { value: "" }, "every agent"));
  const statusSel = h("select", { id: "f-status", name: "status" }, h("option", { value: "" }, "every status"),
    STATUSES.map((s) => h("option", { value: s, selected: s === status }, s.replace("_", " "))));
  const go = (e) => {
    e && e.preventDefault();
    const q = new URLSearchParams();
    if (agentSel.value) q.set("agent", agentSel.value);
    if (statusSel.value) q.set("status", statusSel.value);
    location.hash = "#/sessions" + (q.toString() ? "?" + q : "");
  };
  agentSel.addEventListener("change", go);
  statusSel.addEventListener("change", go);
  const filters = h("form", { class: "filters", role: "search", "aria-label": "Filter sessions", onsubmit: go },
    h("div", {}, h("label", { for: "f-agent" }, "Agent"), agentSel),
    h("div", {}, h("label", { for: "f-status" }, "Status"), statusSel),
    h("div", {}, h("button", { type: "submit" }, "Filter")));
  const body = h("div", {}, h("p", { class: "muted" }, "Loading sessions…"));
  show(heading, filters, h("p", { class: "muted" }, "In the order their status last changed: the longest in it first."), body);

  api("/v1/agents").then((r) => {
    for (const rec of r.agents || []) {
      const name = rec.definition.name;
      agentSel.append(h("option", { value: name, selected: name === agent }, name));
    }
  }).catch(() => {});

  const rows = new Map();
  async function load() {
    const q = new URLSearchParams({ limit: PAGE });
    if (agent) q.set("agent", agent);
    if (status) q.set("status", status);
    if (cursor) q.set("cursor", cursor);
    let r;
    try { r = await api("/v1/sessions?" + q); } catch (err) { if (!v.stopped) body.replaceChildren(failed(err)); return; }
    if (v.stopped) return;
    rows.clear();
    const trs = (r.sessions || []).map((x) => {
      const tr = sessionRow(x);
      rows.set(x.agent + "/" + x.session, tr);
      return tr;
    });
    const what = [agent && `of ${agent}`, status && `${status.replace("_", " ")}`].filter(Boolean).join(", ");
    const n = (r.sessions || []).length;
    const caption = `${num(n)} session${n === 1 ? "" : "s"}${what ? " (" + what + ")" : ""}${cursor || r.next ? " on this page" : ""}`;
    const filter = { ...(agent && { agent }), ...(status && { status }) };
    const pager = h("nav", { class: "pager", "aria-label": "Pages" },
      cursor ? h("a", { href: "#/sessions?" + new URLSearchParams(filter) }, "First page") : null,
      r.next ? h("a", { href: "#/sessions?" + new URLSearchParams({ ...filter, cursor: r.next }) }, "Next page") : null);
    body.replaceChildren(table(caption, [["Session"], ["Status"], ["Since"], ["Turns", "num"], ["Tokens", "num"], ["Cost", "num"], ["Version", "num"], ["Waiting for"]],
      trs, "No session matches."), pager);
  }

  let pending = null;
  const reload = () => { if (!pending) pending = v.later(400, () => { pending = null; load(); }); };
  const q = new URLSearchParams();
  if (agent) q.set("agent", agent);
  v.stream("/v1/sessions/stream?" + q, {
    ready: () => load(),
    resync: () => reload(),
    status: (c) => {
      const tr = rows.get(c.agent + "/" + c.session);
      if (tr) {
        // Shown at once; the page is read again in a moment for what a
        // status change does not carry (tokens, cost, the filters).
        const next = sessionRow({ ...tr._summary, status: c.status, since: c.since, turns: c.turns, waiting_for: c.waiting_for }, true);
        tr.replaceWith(next);
        rows.set(c.agent + "/" + c.session, next);
      }
      reload();
    },
  }, live);
  return v;
}

function sessionRow(x, flash = false) {
  const key = x.agent + "/" + x.session;
  const tr = h("tr", { class: flash ? "flash" : "", dataset: { key } },
    cell("Session", h("a", { href: `#/s/${enc(x.agent)}/${enc(x.session)}` }, key)),
    cell("Status", badge(x.status)),
    cell("Since", when(x.since)),
    cell("Turns", num(x.turns), "num"),
    cell("Tokens", num(x.tokens), "num"),
    cell("Cost", usd(x.cost_usd), "num"),
    cell("Version", x.definition_version ? "v" + x.definition_version : "–", "num"),
    cell("Waiting for", dash(x.waiting_for)));
  tr._summary = x;
  return tr;
}

// ---- one session ----

function sessionView(agent, session) {
  const v = newView();
  const base = sessionPath(agent, session);
  const live = h("span", { class: "live off" }, "connecting");
  const status = h("span", {});
  const facts = h("dl", { class: "facts" });
  const budget = h("section", { class: "panel", "aria-labelledby": "budget-h" });
  const waiting = h("div", {});
  const actions = h("section", { class: "panel", "aria-labelledby": "actions-h" });
  const timeline = h("ol", { class: "timeline", "aria-label": "Transcript" });
  const more = h("div", {});
  const contextBox = h("details", { class: "panel" });
  show(
    h("p", {}, h("a", { href: `#/sessions?agent=${enc(agent)}` }, "← Sessions of " + agent)),
    h("h1", {}, `${agent} / ${session} `, status, live),
    facts, waiting, budget, actions, contextBox,
    h("h2", { id: "timeline-h" }, "Timeline"), timeline, more);

  let tr = null; // the session as last read
  let last = 0; // the last entry shown
  const entries = new Map(); // by id
  const calls = new Map(); // tool_call entries by call id

  async function refresh() {
    let r;
    try { r = await api(`${base}?from=${last + 1}&limit=500`); } catch (err) {
      if (!v.stopped && !tr) show(h("p", {}, h("a", { href: "#/sessions" }, "← Sessions")), failed(err));
      return;
    }
    if (v.stopped) return;
    const first = !tr;
    tr = r;
    for (const e of r.transcript || []) addEntry(e);
    more.replaceChildren(r.truncated ? h("button", { type: "button", onclick: refresh }, `Load more entries (${num(r.entries - last)} more)`) : "");
    renderState();
    if (first) renderActions();
  }

  function addEntry(e) {
    if (entries.has(e.id)) return;
    entries.set(e.id, e);
    last = Math.max(last, e.id);
    if (e.kind === "tool_call") calls.set(e.call_id, e);
    timeline.append(entryItem(e, agent, session));
  }

  function renderState() {
    status.replaceChildren(badge(tr.status));
    const rows = [
      ["Status", [badge(tr.status), " since ", when(tr.since)]],
      tr.waiting_for && ["Waiting for", tr.waiting_for],
      tr.reason && ["Reason", tr.reason],
      ["Version", (tr.definition_version ? "v" + tr.definition_version : "–") + (tr.rollout ? ` (rollout ${tr.rollout})` : "")],
      ["Lifetime", `${num(tr.budget.usage.turns)} turns, ${num(tr.budget.usage.tokens)} tokens, ${usd(tr.budget.usage.cost_usd)}`],
      tr.owner && ["Worker", tr.owner],
      tr.parent && ["Forked from", [h("a", { href: `#/s/${enc(agent)}/${enc(tr.parent)}` }, `${agent}/${tr.parent}`), ` at turn ${tr.fork_turn}`]],
      tr.delegation && ["Delegated by", [sessionLink(tr.delegation.parent), ` (call ${tr.delegation.call_id}, depth ${tr.delegation.hops})`]],
      tr.delegation && ["Task", tr.delegation.task],
      tr.children && tr.children.length && ["Delegated to", h("ul", {}, tr.children.map((c) =>
        h("li", {}, sessionLink(c.session), " ", c.status ? badge(c.status) : "", c.answered ? " answered" : "", c.waiting_for ? ` · waiting for ${c.waiting_for}` : "")))],
      tr.steers && tr.steers.length && ["Steers waiting", h("ul", {}, tr.steers.map((s) => h("li", {}, s.text)))],
    ].filter(Boolean);
    facts.replaceChildren(...rows.flatMap(([k, val]) => [h("dt", {}, k), h("dd", {}, val)]));
    renderBudget();
    renderWaiting();
    updateActions();
  }

  function renderBudget() {
    const L = tr.budget.limits || {};
    const run = tr.budget.run || {};
    const bars = [];
    const bar = (label, value, max, text) => {
      const id = "b-" + label.toLowerCase().replace(/\W/g, "");
      bars.push(h("span", { id }, label),
        h("meter", { min: 0, max, value: Math.min(value, max), low: max * 0.7, high: max * 0.9, optimum: 0, "aria-labelledby": id }),
        h("span", {}, text));
    };
    if (L.max_turns) bar("Turns", run.turns || 0, L.max_turns, `${num(run.turns)} of ${num(L.max_turns)}`);
    if (L.max_tokens) bar("Tokens", run.tokens || 0, L.max_tokens, `${num(run.tokens)} of ${num(L.max_tokens)}`);
    if (L.max_cost_usd) bar("Cost", run.cost_usd || 0, L.max_cost_usd, `${usd(run.cost_usd)} of ${usd(L.max_cost_usd)}`);
    if (L.deadline && run.started && !run.started.startsWith("0001-")) {
      const limit = parseDuration(L.deadline);
      const used = tr.status === "working" ? (Date.now() - new Date(run.started)) / 1000 : 0;
      bar("Deadline", used, limit, tr.status === "working" ? `${Math.round(used)}s of ${L.deadline}` : `${L.deadline} a run`);
    }
    budget.replaceChildren(h("h2", { id: "budget-h" }, "Budget of the current run"),
      bars.length ? h("div", { class: "budget" }, bars) : h("p", { class: "muted" }, "The definition sets no limits."));
  }

  // What a blocked session waits for: an approval of a call (shown with
  // its arguments), or an answer to ask_human.
  function renderWaiting() {
    if (tr.status !== "blocked") { waiting.replaceChildren(); return; }
    const call = calls.get(tr.waiting_for);
    if (call) {
      const note = h("input", { id: "approve-note", type: "text", placeholder: "optional" });
      waiting.replaceChildren(h("section", { class: "panel approval", "aria-labelledby": "approval-h" },
        h("h2", { id: "approval-h" }, `Approval: ${call.name}`),
        h("p", {}, `The call ${call.call_id} waits for approval; it runs once approved.`),
        h("pre", { "aria-label": "Arguments of the call" }, pretty(call.args)),
        h("div", { class: "row" },
          h("label", { for: "approve-note" }, "Note or reason"), note,
          h("button", { type: "button", class: "primary", onclick: () => act("approve", { call_id: call.call_id, text: note.value }) }, "Approve"),
          h("button", { type: "button", class: "danger", onclick: () => act("deny", { call_id: call.call_id, text: note.value }) }, "Deny"))));
      return;
    }
    const answer = h("textarea", { id: "answer" });
    waiting.replaceChildren(h("section", { class: "panel approval", "aria-labelledby": "question-h" },
      h("h2", { id: "question-h" }, "Question"),
      h("p", { class: "text" }, tr.waiting_for || ""),
      h("form", { onsubmit: (e) => { e.preventDefault(); act("resume", { text: answer.value }); } },
        h("label", { for: "answer" }, "Answer"), answer,
        h("div", {}, h("button", { type: "submit", class: "primary" }, "Answer and resume")))));
  }

  let buttons = {};
  function renderActions() {
    const steer = h("textarea", { id: "steer-text", required: true });
    const resumeText = h("input", { id: "resume-text", type: "text", placeholder: "optional" });
    const forkTurn = h("input", { id: "fork-turn", type: "number", min: 0, required: true, inputmode: "numeric" });
    const forkAs = h("input", { id: "fork-as", type: "text", required: true, value: session + "-fork" });
    buttons = {
      steer: h("button", { type: "submit" }, "Steer"),
      interrupt: h("button", { type: "button", onclick: () => act("interrupt", {}) }, "Interrupt"),
      resume: h("button", { type: "button", onclick: () => act("resume", { text: resumeText.value }) }, "Resume"),
      cancel: h("button", { type: "button", class: "danger", onclick: () => { if (confirm(`Cancel ${agent}/${session}? The call in flight stops.`)) act("cancel", {}); } }, "Cancel"),
      fork: h("button", { type: "submit" }, "Fork"),
    };
    actions.replaceChildren(h("h2", { id: "actions-h" }, "Act"), h("div", { class: "actions" },
      h("form", { onsubmit: (e) => { e.preventDefault(); act("steer", { text: steer.value }).then((ok) => { if (ok) steer.value = ""; }); } },
        h("label", { for: "steer-text" }, "Steer: text for the next model call"), steer, h("div", {}, buttons.steer)),
      h("div", { class: "row" }, h("label", { for: "resume-text" }, "Resume text"), resumeText, buttons.resume, buttons.interrupt, buttons.cancel),
      h("form", { onsubmit: (e) => { e.preventDefault(); act("fork", { turn: parseInt(forkTurn.value, 10), as: forkAs.value }).then((ok) => { if (ok) location.hash = `#/s/${enc(agent)}/${enc(forkAs.value)}`; }); } },
        h("label", { for: "fork-turn" }, "Fork at turn"), forkTurn,
        h("label", { for: "fork-as" }, "as the session"), forkAs, h("div", {}, buttons.fork))));
    updateActions();
  }

  function updateActions() {
    if (!tr || !buttons.steer) return;
    const s = tr.status;
    buttons.interrupt.disabled = s !== "working";
    buttons.resume.disabled = !(s === "paused" || s === "blocked");
    buttons.cancel.disabled = FINAL.has(s);
    buttons.steer.disabled = FINAL.has(s);
  }

  async function act(verb, fields) {
    const body = { verb };
    for (const [k, val] of Object.entries(fields)) if (val !== "" && val !== undefined && !Number.isNaN(val)) body[k] = val;
    try {
      const r = await api(`${base}/control`, { method: "POST", body });
      say(`${verb} sent (control message ${r.seq}${r.duplicate ? ", a repeat" : ""}).`);
      // The worker applies it in a moment: read the session again until
      // its state records it.
      const want = r.seq;
      for (let i = 0; i < 20 && !v.stopped; i++) {
        await new Promise((res) => v.later(300, res));
        await refresh();
        if (tr && tr.ctl_seq >= want) break;
      }
      return true;
    } catch (err) {
      say(`${verb}: ${err.message}`, true);
      return false;
    }
  }

  contextBox.append(h("summary", {}, "The context of the next model call"));
  contextBox.addEventListener("toggle", () => { if (contextBox.open) loadContext(); });
  async function loadContext() {
    const out = h("div", {}, h("p", { class: "muted" }, "Loading the context…"));
    contextBox.replaceChildren(contextBox.firstChild, out);
    let c;
    try { c = await api(`${base}/context`); } catch (err) { out.replaceChildren(failed(err)); return; }
    out.replaceChildren(
      h("p", {}, `Turn ${c.turn}: about ${num(c.tokens)} tokens in ${c.parts.length} parts (${num(c.bytes)} bytes at ${c.bytes_per_token.toFixed(1)} bytes a token${c.calibrated ? ", calibrated" : ""}); ${c.masked} masked result${c.masked === 1 ? "" : "s"}${c.compaction_due ? "; the next call compacts first" : ""}.`),
      c.model ? h("p", {}, "Model: ", h("code", {}, c.model), c.tools && c.tools.length ? ["; tools: ", h("code", {}, c.tools.join(", "))] : "") : "",
      table("Parts in order", [["Part"], ["Entry", "num"], ["Turn", "num"], ["Tokens", "num"], ["What the model receives"]],
        c.parts.map((p) => h("tr", {},
          cell("Part", [p.kind, p.name ? ` ${p.name}` : "", p.masked ? " (masked)" : ""]),
          cell("Entry", p.entry || "–", "num"),
          cell("Turn", p.turn || "–", "num"),
          cell("Tokens", num(p.tokens), "num"),
          cell("What the model receives", p.text ? h("details", {}, h("summary", {}, p.text.slice(0, 80) + (p.text.length > 80 ? "…" : "")), h("pre", {}, p.text)) : "–"))),
        "The context is empty."));
  }

  // Live: a status change reads the session again; while it works, its
  // entries are read every two seconds.
  v.stream(`/v1/sessions/stream?agent=${enc(agent)}&session=${enc(session)}`, { ready: refresh, resync: refresh, status: refresh }, live);
  v.every(2000, () => { if (tr && (tr.status === "working" || tr.status === "queued" || tr.status === "waiting")) refresh(); });
  return v;
}

function sessionLink(ref) {
  const i = ref.indexOf("/");
  if (i < 0) return ref;
  return h("a", { href: `#/s/${enc(ref.slice(0, i))}/${enc(ref.slice(i + 1))}` }, ref);
}

function entryItem(e, agent, session) {
  const head = h("div", { class: "head" },
    h("span", { class: "kind" }, e.kind.replace("_", " ")),
    h("span", {}, `#${e.id}`),
    e.turn ? h("span", {}, `turn ${e.turn}`) : "",
    when(e.time));
  const body = [];
  switch (e.kind) {
    case "event":
    case "user":
      if (e.event) head.append(h("span", { class: "mono" }, `${e.event.type} ${e.event.id}`));
      body.push(h("div", { class: "text" }, e.text || ""));
      break;
    case "assistant":
      if (e.model) head.append(h("span", {}, e.model));
      if (e.usage) head.append(h("span", {}, `${num(e.usage.input_tokens)} in / ${num(e.usage.output_tokens)} out`));
      body.push(h("div", { class: "text" }, e.text || h("span", { class: "muted" }, "(tool calls only)")));
      break;
    case "tool_call":
      body.push(h("div", {}, "calls ", h("code", {}, e.name), " ", h("span", { class: "muted mono" }, e.call_id)));
      body.push(h("pre", { "aria-label": `Arguments of ${e.name}` }, pretty(e.args)));
      break;
    case "tool_result": {
      body.push(h("div", { class: e.is_error ? "is-error" : "" }, e.is_error ? "error from " : "result of ", h("code", {}, e.name), " ", h("span", { class: "muted mono" }, e.call_id)));
      const text = e.result || "";
      if (text.length > 600) body.push(h("details", {}, h("summary", {}, text.slice(0, 120) + "…"), h("pre", {}, text)));
      else body.push(h("pre", {}, text || "(empty)"));
      if (e.blob) body.push(blobLoader(agent, session, e.blob));
      break;
    }
    case "control":
      body.push(h("div", { class: "text" }, h("strong", {}, e.name), e.text ? ": " + e.text : ""));
      break;
    case "summary":
      body.push(h("div", { class: "text" }, e.text || ""));
      if (e.covers) head.append(h("span", {}, `covers entries ${e.covers.from}–${e.covers.to}`));
      break;
    default:
      body.push(h("div", { class: "text muted" }, e.text || ""));
  }
  return h("li", { class: `k-${e.kind}`, dataset: { entry: e.id, kind: e.kind } }, head, body);
}

// blobLoader fetches a result kept in jl_blobs, page by page, on demand.
function blobLoader(agent, session, handle) {
  const out = h("div", {});
  const button = h("button", { type: "button" }, "Load the whole result");
  let offset = 0;
  const pre = h("pre", { hidden: true });
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      const r = await api(`${sessionPath(agent, session)}/blobs/${enc(handle)}?offset=${offset}`);
      pre.hidden = false;
      pre.append(r.text);
      offset = r.next || 0;
      button.textContent = `Load more (${num(r.next || r.size)} of ${num(r.size)} bytes shown)`;
      button.disabled = !r.next;
      if (!r.next) button.textContent = `Whole result shown (${num(r.size)} bytes)`;
    } catch (err) {
      say(`blob ${handle}: ${err.message}`, true);
      button.disabled = false;
    }
  });
  return append(out, [h("div", { class: "row" }, button, h("span", { class: "muted mono" }, handle)), pre]);
}

// ---- agents ----

function agentsView() {
  const v = newView();
  show(h("h1", {}, "Agents"), h("p", { class: "muted" }, "Loading…"));
  api("/v1/agents").then((r) => {
    if (v.stopped) return;
    const rows = (r.agents || []).map((rec) => {
      const d = rec.definition;
      const hist = h("td", { colspan: 7, hidden: true });
      const toggle = h("button", { type: "button", "aria-expanded": "false" }, "Versions");
      toggle.addEventListener("click", async () => {
        const open = toggle.getAttribute("aria-expanded") !== "true";
        toggle.setAttribute("aria-expanded", String(open));
        hist.hidden = !open;
        if (open && !hist.firstChild) {
          try {
            const hr = await api(`/v1/agents/${enc(d.name)}/history`);
            hist.append(table(`Versions of ${d.name}` + (hr.rollout ? ` (rollout: canary v${hr.rollout.canary} at ${hr.rollout.percent}%)` : ""),
              [["Version", "num"], ["Change"], ["When"], ["By"], ["Source"], ["What"]],
              [...hr.entries].reverse().map((x) => h("tr", {},
                cell("Version", "v" + x.version, "num"), cell("Change", x.change), cell("When", when(x.at)),
                cell("By", dash(x.by)), cell("Source", dash(x.source)), cell("What", x.summary))), "No versions."));
          } catch (err) { hist.append(failed(err)); }
        }
      });
      return [h("tr", {},
        cell("Agent", h("a", { href: `#/sessions?agent=${enc(d.name)}` }, d.name)),
        cell("Version", "v" + rec.version, "num"),
        cell("Model", [d.model.provider, d.model.name ? "/" + d.model.name : ""]),
        cell("Tools", dash((d.tools || []).join(", "))),
        cell("Triggers", dash((d.triggers || []).map((t) => t.name).join(", "))),
        cell("Schedules", dash((d.schedules || []).map((s) => `${s.name} (${s.cron})`).join(", "))),
        cell("Applied", [when(rec.applied_at), rec.applied_by ? " by " + rec.applied_by : "", " ", toggle])),
      h("tr", {}, hist)];
    });
    show(h("h1", {}, "Agents"), table(`${rows.length} agents`, [["Agent"], ["Version", "num"], ["Model"], ["Tools"], ["Triggers"], ["Schedules"], ["Applied"]], rows, "No agent is stored: jetloop apply FILE stores one."));
  }).catch((err) => show(h("h1", {}, "Agents"), failed(err)));
  return v;
}

// ---- schedules ----

function schedulesView() {
  const v = newView();
  async function load() {
    let r;
    try { r = await api("/v1/schedules"); } catch (err) { show(h("h1", {}, "Schedules"), failed(err)); return; }
    if (v.stopped) return;
    const next = r.next_fires || {};
    const rows = (r.schedules || []).map((s) => {
      const key = `${s.agent}/${s.schedule}`;
      const action = (what, label, cls) => h("button", { type: "button", class: cls, onclick: async () => {
        try {
          await api(`/v1/agents/${enc(s.agent)}/schedules/${enc(s.schedule)}/${what}`, { method: "POST" });
          say(`${key}: ${what} done.`);
          load();
        } catch (err) { say(`${key}: ${err.message}`, true); }
      } }, label);
      return h("tr", {},
        cell("Schedule", key),
        cell("Pattern", [h("code", {}, s.expr || s.pattern), s.time_zone ? " " + s.time_zone : ""]),
        cell("Session", s.session_mode),
        cell("Breaker", s.state === "suspended" ? h("span", { class: "badge s-failed" }, "tripped") : h("span", { class: "badge s-done" }, "closed")),
        cell("Next fire", next[key] ? when(next[key]) : "–"),
        cell("Last fire", when(s.last_fire)),
        cell("Last result", [dash(s.last_result), s.last_error ? h("div", { class: "is-error" }, s.last_error) : "", s.install_error ? h("div", { class: "is-error" }, s.install_error) : ""]),
        cell("Failures", `${s.consecutive_failures} of ${s.max_failures || "∞"}`, "num"),
        cell("Act", h("div", { class: "row" },
          s.state === "suspended" ? action("resume", "Resume", "primary") : action("suspend", "Suspend"),
          s.state === "suspended" ? null : action("trigger", "Fire now"))));
    });
    show(h("h1", {}, "Schedules"), table(`${rows.length} schedules`, [["Schedule"], ["Pattern"], ["Session"], ["Breaker"], ["Next fire"], ["Last fire"], ["Last result"], ["Failures", "num"], ["Act"]], rows, "No schedule: an agent's schedules: installs them."));
  }
  load();
  v.every(10000, load);
  return v;
}

// ---- admission decisions ----

function eventsView(params) {
  const v = newView();
  const agent = params.get("agent") || "";
  const q = new URLSearchParams({ limit: 200 });
  if (agent) q.set("agent", agent);
  const heading = h("h1", {}, "Admission decisions", agent ? ` of ${agent}` : "");
  async function load() {
    let r;
    try { r = await api("/v1/events?" + q); } catch (err) { show(heading, failed(err)); return; }
    if (v.stopped) return;
    const rows = [...(r.records || [])].reverse().map((x) => h("tr", {},
      cell("Time", when(x.time)),
      cell("Decision", badge(x.decision)),
      cell("Rule", dash(x.rule || x.agent)),
      cell("Session", x.session && x.agent ? sessionLink(`${x.agent}/${x.session}`) : "–"),
      cell("Event", [h("code", {}, x.event.type), " ", h("span", { class: "muted mono" }, x.event.id)]),
      cell("Reason", dash(x.reason))));
    const changes = [...(r.changes || [])].reverse().map((c) => h("tr", {},
      cell("Time", when(c.time)), cell("Agent", c.agent), cell("Change", c.change), cell("Version", "v" + c.version, "num"), cell("What", c.summary + (c.by ? ` (by ${c.by})` : ""))));
    show(heading, h("p", { class: "muted" }, "The last hour, newest first."),
      table(`${rows.length} decisions${r.truncated ? " (the newest)" : ""}`, [["Time"], ["Decision"], ["Rule"], ["Session"], ["Event"], ["Reason"]], rows, "No decision in the last hour."),
      h("h2", {}, "Definition changes"),
      table(`${changes.length} changes`, [["Time"], ["Agent"], ["Change"], ["Version", "num"], ["What"]], changes, "No definition changed in the last hour."));
  }
  load();
  v.every(5000, load);
  return v;
}

// ---- dead letters ----

const REASONS = ["rule_error", "not_cloudevent", "bad_subject", "session_cancelled", "no_definition", "bad_tick", "invalid_control", "no_session", "not_applicable"];

function lettersView(params) {
  const v = newView();
  const reason = params.get("reason") || "";
  const from = params.get("from") || "";
  const sel = h("select", { id: "f-reason" }, h("option", { value: "" }, "every reason"), REASONS.map((r) => h("option", { value: r, selected: r === reason }, r)));
  sel.addEventListener("change", () => { location.hash = "#/dlq" + (sel.value ? "?reason=" + sel.value : ""); });
  const heading = [h("h1", {}, "Dead letters"), h("form", { class: "filters", role: "search", "aria-label": "Filter dead letters", onsubmit: (e) => e.preventDefault() },
    h("div", {}, h("label", { for: "f-reason" }, "Reason"), sel))];
  const q = new URLSearchParams({ limit: PAGE });
  if (reason) q.set("reason", reason);
  if (from) q.set("from", from);
  api("/v1/dlq?" + q).then((r) => {
    if (v.stopped) return;
    const rows = (r.letters || []).map((l) => h("tr", {},
      cell("Letter", h("a", { href: `#/dlq/${l.seq}` }, "#" + l.seq)),
      cell("Time", when(l.time)),
      cell("Reason", h("code", {}, l.reason)),
      cell("Session", l.agent && l.session ? sessionLink(`${l.agent}/${l.session}`) : dash(l.agent)),
      cell("Event", l.event_type ? [h("code", {}, l.event_type), " ", h("span", { class: "muted mono" }, l.event_id || "")] : "–"),
      cell("Detail", dash(l.detail))));
    const nq = new URLSearchParams({ ...(reason && { reason }), from: r.next || "" });
    show(heading, table(`${rows.length} letters${from ? " from #" + from : ""}`, [["Letter"], ["Time"], ["Reason"], ["Session"], ["Event"], ["Detail"]], rows, "No dead letter."),
      h("nav", { class: "pager", "aria-label": "Pages" }, from ? h("a", { href: "#/dlq" + (reason ? "?reason=" + reason : "") }, "First page") : null,
        r.next ? h("a", { href: "#/dlq?" + nq }, "Next page") : null));
  }).catch((err) => show(heading, failed(err)));
  return v;
}

function decodeData(b64) {
  if (!b64) return "";
  const bin = atob(b64);
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  const text = new TextDecoder("utf-8", { fatal: false }).decode(bytes);
  return pretty(text) || text;
}

function letterView(seq) {
  const v = newView();
  const back = h("p", {}, h("a", { href: "#/dlq" }, "← Dead letters"));
  api(`/v1/dlq/${enc(seq)}`).then((r) => {
    if (v.stopped) return;
    const l = r.letters[0];
    const redrive = h("button", { type: "button", class: "primary" }, "Redrive");
    redrive.addEventListener("click", async () => {
      redrive.disabled = true;
      try {
        const rr = await api(`/v1/dlq/${enc(seq)}/redrive`, { method: "POST" });
        const x = (rr.redriven || [])[0] || {};
        say(x.duplicate ? `Letter #${seq} was redriven before.` : `Letter #${seq} redriven${x.subject ? " to " + x.subject : ""}.`);
      } catch (err) { say(`redrive #${seq}: ${err.message}`, true); redrive.disabled = false; }
    });
    const headers = Object.entries(l.header || {}).map(([k, vals]) => [h("dt", {}, k), h("dd", { class: "mono" }, vals.join(", "))]);
    show(back, h("h1", {}, `Dead letter #${l.seq}`),
      h("dl", { class: "facts" }, h("dt", {}, "Reason"), h("dd", {}, h("code", {}, l.reason)), h("dt", {}, "Detail"), h("dd", {}, dash(l.detail)),
        h("dt", {}, "When"), h("dd", {}, when(l.time)), h("dt", {}, "From"), h("dd", {}, dash(l.subject) + (l.orig_seq ? ` #${l.orig_seq}` : ""))),
      h("p", {}, redrive, " puts it back where it came from, under its original id."),
      h("h2", {}, "Headers"), h("dl", { class: "facts" }, headers),
      h("h2", {}, "Data"), h("pre", {}, decodeData(l.data) || "(none)"));
  }).catch((err) => show(back, failed(err)));
  return v;
}

// ---- start ----

window.addEventListener("hashchange", () => { route(); main.focus(); });
if (!location.hash) history.replaceState(null, "", "#/sessions");
route();
