// odradek dashboard: renders the sections the server streams (/api/events) as they change.
// Plain JS and SVG, no libraries: the page must work on a machine without internet access.
"use strict";

const state = { cluster: null, health: null, timeline: [], groups: [], transactions: null, reassignments: [], deletions: [], metrics: null, errors: {} };
const COLORS = ["#3867d6", "#e67e22", "#2e9d5b", "#8e44ad", "#d8403a", "#16a2b8", "#7f8c8d", "#c0a000"];
const CHARTS = [
  ["messages_in", "messages in / s"],
  ["requests", "requests / s"],
  ["bytes_in", "bytes in / s"],
  ["under_replicated", "under-replicated partitions"],
];

function esc(v) {
  return String(v ?? "").replace(/[&<>"']/g, c => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}
function $(id) { return document.getElementById(id); }
function fmt(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + "k";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}
function bar(fraction, label) {
  if (fraction === null || fraction === undefined) return `<div class="bar"><em>${esc(label || "unknown")}</em></div>`;
  const pct = Math.round(fraction * 100);
  return `<div class="bar" data-progress="${pct}"><span style="width:${pct}%"></span><em>${esc(label || pct + "%")}</em></div>`;
}
function time(ms) { return ms ? new Date(ms).toLocaleTimeString([], { hour12: false }) + "." + String(ms % 1000).padStart(3, "0") : ""; }

function renderHeader() {
  const c = state.cluster;
  if (!c) return;
  const ctl = $("controller");
  ctl.textContent = c.stale ? "controller: unknown" :
    c.controller === null ? "no controller" : `controller: broker ${c.controller} · epoch ${c.controller_epoch}`;
  ctl.className = "pill" + (c.controller === null ? " bad" : "");
  ctl.dataset.controller = c.controller ?? "";
  const s = c.summary;
  $("summary").innerHTML =
    `<span class="pill ${s.live_brokers < s.brokers ? "bad" : "ok"}">${s.live_brokers}/${s.brokers} brokers live</span>` +
    `<span class="pill">${s.topics} topics · ${s.partitions} partitions</span>` +
    `<span class="pill ${s.offline ? "bad" : ""}" id="offline-count">${s.offline} offline</span>` +
    `<span class="pill ${s.under_replicated ? "warn" : ""}" id="urp-count">${s.under_replicated} under-replicated</span>`;
}

function renderBrokers() {
  const c = state.cluster;
  if (!c) return;
  $("brokers").innerHTML = c.brokers.map(b => `
    <div class="broker ${b.live ? "live" : "dead"}" data-broker="${b.id}" data-live="${b.live}">
      <div><span class="id">${b.id}</span>${b.controller ? '<span class="badge">controller</span>' : ""}</div>
      <div>${b.live ? esc(b.host + ":" + b.port) : "<b>dead</b>"}</div>
      ${b.live ? "" : `<div class="reason">${esc(b.reason || "")}</div>`}
      <div class="muted">${b.leaders} leaders</div>
    </div>`).join("");
}

function renderTopics() {
  const c = state.cluster;
  if (!c) return;
  const brokers = c.brokers.map(b => b.id);
  const dead = new Set(c.brokers.filter(b => !b.live).map(b => b.id));
  const deadCls = id => dead.has(id) ? " deadcol" : "";
  if (!c.topics.length) { $("topics").innerHTML = '<p class="muted">no topics</p>'; return; }
  $("topics").innerHTML = c.topics.map(t => {
    const head = `<tr><th>partition</th>${brokers.map(b => `<th class="cell${deadCls(b)}">${b}</th>`).join("")}` +
      `<th>leader</th><th>epoch</th><th>ISR</th><th>status</th></tr>`;
    const rows = t.partitions.map(p => {
      const cells = brokers.map(b => {
        let role = "", cls = "";
        if (p.replicas.includes(b)) {
          if (p.adding.includes(b)) { role = "+"; cls = "A"; }
          else if (b === p.leader) { role = "L"; cls = "L"; }
          else if (p.isr.includes(b)) { role = "I"; cls = "I"; }
          else { role = "R"; cls = "R"; }
          if (p.removing.includes(b)) role += "−";
        }
        return `<td class="cell ${cls}${deadCls(b)}">${role}</td>`;
      }).join("");
      const status = p.status === "ok" ? "" : p.status.replace("_", "-");
      return `<tr class="${p.status}" data-tp="${esc(t.name)}-${p.partition}" data-leader="${p.leader}" data-status="${p.status}">` +
        `<td>${p.partition}</td>${cells}<td>${p.leader === -1 ? "none" : p.leader}</td><td>${p.leader_epoch ?? "–"}</td>` +
        `<td>${p.isr.join(",")}</td><td>${status}</td></tr>`;
    }).join("");
    const tags = (t.deleting ? '<span class="tag deleting">deleting</span>' : "") +
      (t.reassigning ? '<span class="tag reassigning">reassigning</span>' : "");
    const bad = t.partitions.filter(p => p.status !== "ok").length;
    const open = t.name in toggled ? toggled[t.name] : !t.name.startsWith("__");
    return `<details data-name="${esc(t.name)}"${open ? " open" : ""}><summary class="topic-title" data-topic="${esc(t.name)}">` +
      `${esc(t.name)} <span class="muted">${t.partitions.length} partitions${bad ? `, ${bad} not healthy` : ""}</span>${tags}</summary>` +
      `<table class="grid">${head}${rows}</table></details>`;
  }).join("");
  for (const d of $("topics").querySelectorAll("details")) {
    d.addEventListener("toggle", () => { toggled[d.dataset.name] = d.open; });
  }
}
// topics the user opened or closed keep that state across updates (internal topics start closed)
const toggled = {};

function renderTimeline() {
  const showReplicas = $("show-replicas").checked;
  const events = state.timeline.filter(e => showReplicas || e.kind !== "replica").slice(0, 200);
  if (!events.length) { $("timeline").innerHTML = '<p class="muted">no state changes yet (the timeline reads the state-change logs of a cluster given with --data-dir)</p>'; return; }
  $("timeline").innerHTML = events.map(e => {
    const tp = `${esc(e.topic)}-${e.partition}`;
    let what;
    if (e.kind === "election") what = `elected leader ${e.leader} of ${tp} (${esc(e.strategy)}), ISR [${(e.isr || []).join(",")}], leader epoch ${e.leader_epoch}`;
    else if (e.kind === "replica") what = `replica ${e.replica} of ${tp}: ${esc(e.from)} → ${esc(e.to)}`;
    else if (e.kind === "failed") what = `FAILED ${tp}${e.replica !== undefined ? " replica " + e.replica : ""}: ${esc(e.from)} → ${esc(e.to)}: ${esc(e.error)}`;
    else what = `${tp}: ${esc(e.from)} → ${esc(e.to)}${e.leader !== null && e.leader !== undefined ? ` (leader ${e.leader}, ISR [${(e.isr || []).join(",")}])` : ""}`;
    return `<div class="ev ${esc(e.kind)}"><span class="t">${time(e.time_ms)} c${e.controller_id}/e${e.controller_epoch}</span>${what}</div>`;
  }).join("");
}

// a group's KIP-253 blocks (model.group_blocks): "–" for a group reading no ordered topic
function blocksCell(b) {
  if (!b) return "–";
  if (b.error) return `blocks not known: ${esc(b.error)}`;
  if (!b.blocked.length) return '<span class="muted">no partition is blocked</span>';
  return b.blocked.map(x => `<div class="blocked" data-blocked="${esc(x.partition)}">${esc(x.partition)} waits on ${esc(x.waits_on)} until ${esc(x.until)}` +
    ` (group at ${x.group_position ?? "?"}), ${Math.round(x.blocked_s)} s</div>`).join("");
}

function renderGroups() {
  if (!state.groups.length) { $("groups").innerHTML = '<p class="muted">no consumer groups</p>'; return; }
  $("groups").innerHTML = `<table><tr><th>group</th><th>state</th><th>members</th><th>coordinator</th><th>total lag</th><th>partitions (lag)</th><th>blocked on KIP-253 barriers</th></tr>` +
    state.groups.map(g => `<tr data-group="${esc(g.group)}"><td>${esc(g.group)}</td><td>${esc(g.state)}</td><td>${g.members}</td>` +
      `<td>${g.coordinator ?? "–"}</td><td class="${g.lag > 1000 ? "lag-high" : ""}">${fmt(g.lag)}</td>` +
      `<td class="wrap">${g.error ? esc(g.error) : g.offsets.slice(0, 8).map(o => `${esc(o.topic)}-${o.partition} (${fmt(o.lag)})`).join(", ") + (g.offsets.length > 8 ? ", …" : "")}</td>` +
      `<td class="wrap">${blocksCell(g.blocks)}</td></tr>`).join("") +
    `</table>`;
}

// a duration as plain_words.duration writes it in the notices
function dur(seconds) {
  if (seconds < 120) return `${Math.max(0, Math.round(seconds))} s`;
  if (seconds < 7200) return `${Math.round(seconds / 60)} min`;
  return `${(seconds / 3600).toFixed(1)} h`;
}

// a partition of a transaction, or a lagging one: its last stable offset lag (model.transactions_view)
function lsoCell(p, withLag = true) {
  const lag = p.lso_lag;
  const cls = lag > 0 ? " lso-lag" : "";
  const said = !withLag || lag === null || lag === undefined ? "" : lag > 0 ? ` (${fmt(lag)} held back)` : "";
  return `<span class="tp${cls}" data-tp="${esc(p.name)}" data-lso-lag="${lag ?? ""}">${esc(p.name)}${said}</span>`;
}

function renderTransactions() {
  const t = state.transactions;
  if (!t) return;
  let html = t.problems.map(p => `<div class="notice">${esc(p)}</div>`).join("");
  if (!t.read) html += '<p class="muted">not read yet</p>';
  else if (!t.transactions.length) html += '<p class="muted">no transactional ids</p>';
  else {
    html += `<table><tr><th>transactional id</th><th>state</th><th>producer id / epoch</th><th>coordinator</th>` +
      `<th>open for</th><th>timeout</th><th>partitions</th></tr>` +
      t.transactions.map(x => `<tr class="${x.overdue ? "overdue" : ""}" data-txn="${esc(x.transactional_id)}" data-state="${esc(x.state)}"` +
        ` data-overdue="${x.overdue}"><td>${esc(x.transactional_id)}</td><td>${esc(x.state)}</td>` +
        `<td>${x.producer_id} / ${x.producer_epoch ?? "–"}</td><td>${x.coordinator}</td>` +
        `<td>${x.open_s === null ? "–" : dur(x.open_s)}</td>` +
        `<td>${x.timeout_ms ? dur(x.timeout_ms / 1000) : "–"}</td>` +
        `<td class="wrap">${x.error ? esc(x.error) : x.partitions.slice(0, 12).map(p => lsoCell(p)).join(" ") + (x.partitions.length > 12 ? " …" : "")}</td></tr>`).join("") +
      `</table>`;
    if (t.shown < t.listed) html += `<p class="muted">${t.shown} of ${t.listed} transactional ids shown (${t.open} open, those first): \`odradek transactions list\` lists them all</p>`;
  }
  if (!t.lso_known) html += '<p class="muted">last stable offsets not known: they come from the brokers\' metrics (odradek up --metrics-base-port)</p>';
  else if (t.lagging.length) {
    html += `<h3>Partitions holding read_committed consumers back</h3><table><tr><th>partition</th><th>last stable offset lag</th><th>for at least</th><th>open transactions including it</th></tr>` +
      t.lagging.map(p => `<tr class="lagging" data-lagging="${esc(p.name)}"><td>${lsoCell(p, false)}</td><td>${fmt(p.lso_lag)}</td>` +
        `<td>${p.lagging_s === null ? "–" : dur(p.lagging_s)}</td><td>${p.held_by.length ? p.held_by.map(esc).join(", ") : "none"}</td></tr>`).join("") +
      `</table>` + (t.lagging_total > t.lagging.length ? `<p class="muted">the ${t.lagging.length} furthest behind of ${t.lagging_total}</p>` : "");
  }
  $("transactions").innerHTML = html;
}

function renderWork() {
  const r = state.reassignments;
  $("reassignments").innerHTML = !r.length ? '<p class="muted">none in progress</p>' :
    `<table><tr><th>partition</th><th>replicas → target</th><th>copied</th></tr>` + r.map(x =>
      `<tr data-reassign="${esc(x.topic)}-${x.partition}"><td>${esc(x.topic)}-${x.partition}</td><td>${x.current.join(",")} → ${x.target.join(",")}</td>` +
      `<td>${bar(x.progress, x.bytes_to_copy === null ? "" : `${fmt(x.bytes_copied)} / ${fmt(x.bytes_to_copy)} B`)}</td></tr>`).join("") + `</table>`;
  const d = state.deletions;
  $("deletions").innerHTML = !d.length ? '<p class="muted">none in progress</p>' :
    `<table><tr><th>topic</th><th>replicas deleted</th><th></th></tr>` + d.map(x =>
      `<tr data-deleting="${esc(x.topic)}"><td>${esc(x.topic)}</td><td>${bar(x.progress, `${x.deleted} / ${x.replicas}`)}</td>` +
      `<td>${x.waiting_for_brokers.length ? "waiting for broker " + x.waiting_for_brokers.join(", ") : ""}</td></tr>`).join("") + `</table>`;
}

function chartSvg(series, key) {
  const W = 240, H = 80, pad = 2;
  const all = series.flatMap(s => s.points.filter(p => p[key] !== null && p[key] !== undefined));
  if (!all.length) return { svg: `<svg viewBox="0 0 ${W} ${H}"><text x="6" y="44" fill="#6b7385" font-size="11">no data yet</text></svg>`, last: null };
  const t0 = Math.min(...all.map(p => p.t)), t1 = Math.max(...all.map(p => p.t));
  const max = Math.max(1, ...all.map(p => p[key]));
  const x = t => pad + (t1 === t0 ? W - 2 * pad : (t - t0) / (t1 - t0) * (W - 2 * pad));
  const y = v => H - pad - v / max * (H - 2 * pad);
  let total = 0;
  const lines = series.map(s => {
    const pts = s.points.filter(p => p[key] !== null && p[key] !== undefined);
    if (pts.length) total += pts[pts.length - 1][key];
    return `<polyline fill="none" stroke="${s.color}" stroke-width="1.5" points="${pts.map(p => x(p.t).toFixed(1) + "," + y(p[key]).toFixed(1)).join(" ")}"/>`;
  }).join("");
  const grid = `<line x1="0" x2="${W}" y1="${pad}" y2="${pad}" stroke="#eceef2"/><line x1="0" x2="${W}" y1="${H - pad}" y2="${H - pad}" stroke="#ccd"/>` +
    `<text x="4" y="11" fill="#6b7385" font-size="10">max ${fmt(max)}</text>`;
  return { svg: `<svg viewBox="0 0 ${W} ${H}" preserveAspectRatio="none">${grid}${lines}</svg>`, last: total };
}

function renderCharts() {
  const m = state.metrics;
  if (!m) return;
  const ids = Object.keys(m.urls || {});
  if (!ids.length) { $("charts").innerHTML = '<p class="muted">no metrics: the brokers\' metrics URLs come from cluster.json (odradek ui --data-dir, odradek up --metrics-base-port)</p>'; return; }
  const series = ids.map((id, i) => ({ id, color: COLORS[i % COLORS.length], points: (m.brokers || {})[id] || [] }));
  $("charts").innerHTML = CHARTS.map(([key, title]) => {
    const { svg, last } = chartSvg(series, key);
    return `<div class="chart" data-chart="${key}"><div class="title"><span>${title}</span><b>${fmt(last)}</b></div>${svg}</div>`;
  }).join("") + `<div class="legend">${series.map(s => `<span style="background:${s.color}"></span>broker ${esc(s.id)}`).join("")}</div>`;
}

// what each section of the errors is about, in the page's words
const SECTION_NAMES = {
  cluster: "partition grid", kafka: "Kafka requests", groups: "consumer groups", transactions: "transactions",
  reassignments: "reassignments",
  deletions: "topic deletions", metrics: "metrics", state_change_log: "state-change log",
};
function renderErrors() {
  $("errors").innerHTML = Object.entries(state.errors)
    .map(([k, v]) => `<div data-section="${esc(k)}"><b>${esc(SECTION_NAMES[k] || k)}</b>: ${esc(v)}</div>`).join("");
}

// -- how fresh the page is: the badge, and the problems banner ---------------------------------
// The badge is green only while the server streams and its last poll read ZooKeeper: a server
// gone, a server that stopped polling (no health for two intervals), ZooKeeper not answering
// and a stopped cluster each say so, with the time the grid was last read.
let streaming = false;      // the EventSource is open
let healthSeenAt = 0;       // Date.now() when the last health section arrived

function ago(seconds) {
  if (seconds < 90) return `${Math.max(0, Math.round(seconds))} s ago`;
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  return `${Math.round(seconds / 3600)} h ago`;
}

function freshness() {
  const h = state.health;
  if (!h || h.read_at === null || h.read_at === undefined) return { text: "never read", at: "" };
  // the server's own clock for the age (the browser's may be off), plus the time since it said so
  const age = (h.checked_at - h.read_at) / 1000 + (Date.now() - healthSeenAt) / 1000;
  return { text: `last read ${time(h.read_at)} (${ago(age)})`, at: String(h.read_at) };
}

function renderHealth() {
  const h = state.health, badge = $("connection");
  const interval = (h && h.interval_s) || 1;
  const silent = !h || Date.now() - healthSeenAt > (2 * interval + 1) * 1000;
  const fresh = freshness();
  let status, text, cls;
  if (!streaming) { status = "disconnected"; text = `dashboard server does not answer · ${fresh.text}`; cls = "down"; }
  else if (silent) { status = "stale"; text = `stale: no news from the dashboard server · ${fresh.text}`; cls = "down"; }
  else if (h.status === "stopped") { status = "stopped"; text = `cluster stopped · ${fresh.text}`; cls = "down"; }
  else if (h.status === "reading") { status = "reading"; text = "reading the cluster…"; cls = ""; }
  else if (h.stale) { status = "stale"; text = `stale · ${fresh.text}`; cls = "down"; }
  else { status = "live"; text = "live"; cls = "ok"; }
  badge.textContent = text;
  badge.className = "pill" + (cls ? " " + cls : "");
  badge.dataset.status = status;
  badge.dataset.readAt = fresh.at;
  badge.title = fresh.text;
  document.body.dataset.status = status;
  const problems = [];
  if (!streaming) problems.push("the dashboard server does not answer (the page reconnects by itself)");
  else if (silent) problems.push(`the dashboard server sent nothing for ${Math.round((Date.now() - healthSeenAt) / 1000)} s`);
  if (h) problems.push(...h.problems);
  if (status !== "live" && status !== "reading") problems.push(`what the page shows was ${fresh.text}`);
  $("problems").innerHTML = problems.map(p => `<div>${esc(p)}</div>`).join("");
}

const RENDER = {
  cluster: () => { renderHeader(); renderBrokers(); renderTopics(); },
  health: () => { healthSeenAt = Date.now(); renderHealth(); },
  timeline: renderTimeline, groups: renderGroups, transactions: renderTransactions, reassignments: renderWork,
  deletions: renderWork,
  metrics: renderCharts, errors: renderErrors,
};

function connect() {
  const source = new EventSource("/api/events");
  source.onopen = () => { streaming = true; renderHealth(); };
  source.onerror = () => { streaming = false; renderHealth(); };
  for (const name of Object.keys(RENDER)) {
    source.addEventListener(name, ev => {
      state[name] = JSON.parse(ev.data);
      RENDER[name]();
      document.body.dataset.updated = String(Date.now());
    });
  }
}

$("show-replicas").addEventListener("change", renderTimeline);
setInterval(renderHealth, 1000);  // the age goes on, and a silent server turns the badge stale
connect();
