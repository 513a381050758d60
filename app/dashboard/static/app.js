// pykueue dashboard: polls /api/v1/dashboard (with If-None-Match) and draws what it says.
// Data goes into the page through textContent only (never as HTML). Charts: uPlot (vendored).
"use strict";

const TOKEN_KEY = "pykueue-dashboard-token";
const POLL_MS = 5000;
const MAX_ROWS = 300;
let etag = null;
let data = null;
let timer = null;
const charts = new Map();

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

// A token may come in the URL fragment (#token=...): kept for this tab only, then removed
// from the address bar so it is not bookmarked or shared.
function token() {
  const m = location.hash.match(/token=([^&]+)/);
  if (m) {
    sessionStorage.setItem(TOKEN_KEY, decodeURIComponent(m[1]));
    history.replaceState(null, "", location.pathname + location.search);
  }
  return sessionStorage.getItem(TOKEN_KEY);
}

function show(id, on) { document.getElementById(id).hidden = !on; }

function untilText(iso) {
  if (!iso) return null;
  const s = (Date.parse(iso) - Date.now()) / 1000;
  if (s < 1) return "now";  // due; a start 40 s away is not "now"
  if (s < 60) return `in ~${Math.round(s)}s`;
  if (s < 3600) return `in ~${Math.max(1, Math.round(s / 60))}m`;
  if (s < 172800) {
    const m = Math.round(s / 60), h = Math.floor(m / 60), r = m % 60;
    return h < 10 && r ? `in ~${h}h${String(r).padStart(2, "0")}m` : `in ~${Math.round(s / 3600)}h`;
  }
  return `in ~${Math.round(s / 86400)}d`;
}

function etaText(eta) {
  if (!eta) return "-";
  if (eta.confidence === "unknown" || !eta.start) return `unknown (${eta.basis})`;
  let text = `${untilText(eta.start)} (${eta.confidence})`;
  if (eta.earliest) {
    // Gott's 50% interval of a start that rests on projected arrivals (docs/status.md).
    const lo = untilText(eta.earliest).replace(/^in ~/, "");
    const hi = eta.latest ? untilText(eta.latest).replace(/^in ~/, "") : "?";
    text += `, range ${lo} to ${hi}`;
  }
  return text;
}

function bar(r) {
  // Scale: the largest of nominal and used, so borrowing shows beyond nominal.
  const scale = Math.max(r.nominal, r.used, 1);
  const within = Math.min(r.used, r.nominal);
  const pct = (v) => `${(100 * v / scale).toFixed(2)}%`;
  const b = el("div", { class: "bar", role: "img",
    "aria-label": `used ${r.text.used} of nominal ${r.text.nominal}` });
  b.append(el("span", { class: "used", style: `width:${pct(within)}` }));
  b.append(el("span", { class: "borrowed", style: `width:${pct(r.used - within)}` }));
  b.append(el("span", { class: "lent", style: `width:${pct(Math.min(r.lent, r.nominal - within))}` }));
  return b;
}

function drawCohorts(d) {
  const root = document.getElementById("cohorts");
  const byName = new Map(d.clusterQueues.map((q) => [q.name, q]));
  root.replaceChildren();
  for (const co of d.cohorts) {
    const box = el("div", { class: "cohort" },
      el("h3", {}, co.name ? `cohort ${co.name}` : "no cohort"));
    const row = el("div", { class: "cqs" });
    for (const name of co.clusterQueues) {
      const q = byName.get(name);
      const card = el("div", { class: "cq", "data-cq": name },
        el("h4", {}, name, q.active ? "" : ` (inactive: ${q.reason})`),
        el("div", { class: "counts" },
          `pending ${q.pending}` + (q.inadmissible ? ` (${q.inadmissible} inadmissible)` : "") +
          ` · admitted ${q.admitted}`));
      for (const r of q.resources) {
        const t = r.text;
        const words = [`used ${t.used} / nominal ${t.nominal}`];
        if (r.borrowed) words.push(`borrowed ${t.borrowed}`);
        if (r.lent) words.push(`lent ${t.lent}`);
        words.push(`available ${t.available}`);
        card.append(el("div", { class: "res" }, `${r.flavor} · ${r.resource}`, bar(r),
          el("span", { class: "dim" }, words.join(" · "))));
      }
      row.append(card);
    }
    box.append(row);
    root.append(box);
  }
}

function drawPreemptions(d) {
  const body = document.querySelector("#preemptions tbody");
  body.replaceChildren();
  if (!d.preemptions.length) {
    body.append(el("tr", {}, el("td", { colspan: "4", class: "dim" }, "none recently")));
  }
  for (const p of d.preemptions) {
    // Local time as the page's "updated" stamp; the API's RFC 3339 time on hover.
    const t = Date.parse(p.time);
    body.append(el("tr", {}, el("td", { title: p.time },
      Number.isNaN(t) ? p.time : new Date(t).toLocaleString()), el("td", {}, p.preemptor),
      el("td", {}, p.clusterQueue),
      el("td", {}, p.victims.map((v) => `${v.workload} (${v.reason})`).join(", "))));
  }
}

function zeroBased(u, min, max) {
  return [0, Math.max(1, max || 0)];
}

function drawHistory(d) {
  const root = document.getElementById("history");
  if (!root.firstChild) root.append(el("div", { class: "charts" }));
  const wrap = root.firstChild;
  for (const [name, h] of Object.entries(d.history || {})) {
    const first = Object.keys(h.used)[0];
    const series = [{}, { label: "pending", stroke: "#a05a00" }];
    const cols = [h.t, h.pending];
    if (first) {
      series.push({ label: `used ${first}`, stroke: "#2e9d57", scale: "used" });
      cols.push(h.used[first]);
    }
    let c = charts.get(name);
    if (c && c.plot.series.length !== series.length) {  // a resource appeared: new chart
      c.plot.destroy();
      c.box.remove();
      c = null;
    }
    if (!c) {
      const box = el("div", { class: "chart", "data-history": name }, el("h4", {}, name));
      wrap.append(box);
      const plot = new uPlot({ width: 420, height: 160, series,
        // Counts from 0, at least 0..1 (an empty queue is not drawn on 0..100); x ticks
        // spaced for the 420 px width; the right axis is named by its legend entry
        // ("used <resource>"), as a rotated label there reads upside down.
        scales: { x: { time: true }, y: { range: zeroBased }, used: { range: zeroBased } },
        axes: [{ space: 90 }, { label: "pending" }, { scale: "used", side: 1 }] },
        cols, box);
      charts.set(name, { plot, box });
    } else {
      c.plot.setData(cols);
    }
  }
}

function drawWorkloads(d) {
  document.getElementById("workloads-title").textContent =
    d.admin ? "Workloads" : `My Workloads (namespaces: ${d.namespaces.join(", ") || "none"})`;
  const body = document.querySelector("#workloads tbody");
  body.replaceChildren();
  const rows = d.workloads.slice(0, MAX_ROWS);
  if (!rows.length) body.append(el("tr", {}, el("td", { colspan: "7", class: "dim" }, "no Workloads")));
  for (const w of rows) {
    const pending = w.state === "pending";
    const why = pending ? [w.reason, w.message].filter(Boolean).join(": ") ||
      "waiting for a scheduling cycle" : `flavors ${w.flavors.join(", ")}`;
    body.append(el("tr", { "data-workload": `${w.namespace}/${w.name}` },
      el("td", {}, `${w.namespace}/${w.name}`), el("td", {}, w.localQueue),
      el("td", {}, w.clusterQueue), el("td", { class: `state-${pending ? "pending" : "admitted"}` }, w.state),
      // 1 = next, as the Pending message and `pykueue status`; the API's position is 0-based.
      el("td", {}, pending ? String(w.position + 1) : "-"),
      el("td", { class: "eta" }, pending ? etaText(w.eta) : "-"),
      el("td", { class: "msg" }, why)));
  }
  document.getElementById("workloads-more").textContent =
    d.workloads.length > MAX_ROWS ? `${d.workloads.length - MAX_ROWS} more not shown` : "";
}

function render(d) {
  document.getElementById("who").textContent = `${d.user} · ${d.admin ? "admin view" : "user view"}`;
  show("signin", false);
  show("signout", true);
  show("error", false);
  show("admin", d.admin);
  show("user", true);
  if (d.admin) { drawCohorts(d); drawPreemptions(d); drawHistory(d); }
  drawWorkloads(d);
}

async function poll() {
  clearTimeout(timer);  // one polling loop, however poll() was called
  const headers = {};
  const t = token();
  if (t) headers.Authorization = `Bearer ${t}`;
  if (etag) headers["If-None-Match"] = etag;
  try {
    const r = await fetch("/api/v1/dashboard", { headers, cache: "no-store" });
    if (r.status === 401) {
      sessionStorage.removeItem(TOKEN_KEY);
      etag = null;
      const body = await r.json().catch(() => ({}));
      document.getElementById("who").textContent = "not signed in";
      document.getElementById("signin-error").textContent = t ? (body.detail || "token refused") : "";
      show("admin", false); show("user", false); show("signout", false); show("signin", true);
      return;  // polling resumes after sign-in
    }
    if (r.status === 304 && data) {
      drawWorkloads(data);  // only the "in ~N m" texts move
    } else if (r.ok) {
      etag = r.headers.get("ETag");
      data = await r.json();
      render(data);
    } else {
      const body = await r.json().catch(() => ({}));
      document.getElementById("error").textContent = `HTTP ${r.status}: ${body.detail || r.statusText}`;
      show("error", true);
    }
    document.getElementById("updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (e) {
    document.getElementById("error").textContent = `cannot reach pykueue: ${e}`;
    show("error", true);
  }
  timer = setTimeout(poll, POLL_MS);
}

document.getElementById("signin-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const v = document.getElementById("token").value.trim();
  if (v) sessionStorage.setItem(TOKEN_KEY, v);
  document.getElementById("token").value = "";
  poll();
});
document.getElementById("signout").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  location.reload();
});
// A link with #token= opened in a tab already showing the page changes only the fragment.
window.addEventListener("hashchange", () => {
  if (location.hash.includes("token=")) { etag = null; poll(); }
});
poll();
