// sluice dashboard: live charts of the application page and the rule
// editor's helpers. No dependencies. Values from traffic (resource and
// instance names, errors) are only ever set with textContent.
"use strict";

(function () {
  const body = document.body;
  const app = body.dataset.app;

  function el(tag, cls, text) {
    const e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }

  // hms is a time of day in UTC, 24-hour, as the server's pages write
  // times: "16:34:43 UTC".
  function hms(d) {
    const p = (n) => String(n).padStart(2, "0");
    return p(d.getUTCHours()) + ":" + p(d.getUTCMinutes()) + ":" + p(d.getUTCSeconds()) + " UTC";
  }

  // ---- charts ----

  // The colours of the lines, by key: "pass", "block", the block types'
  // names (data.blockTypes)... style.css gives the legend's keys the same
  // (.k.pass, .k.flow...).
  const colors = {
    pass: "#2e7d32", block: "#c62828", rt: "#1565c0", inflight: "#6a1b9a",
    flow: "#e65100", system: "#ad1457", isolation: "#4e342e", param: "#827717",
    degrade: "#37474f", cluster: "#00838f", custom: "#5d4037", other: "#757575", authority: "#283593",
    limit: "#b45309", mark: "#0e7490",
  };

  // ticks are the times the time axis names over [t0, t1]: multiples of
  // a round step (UTC), at most one per 70 pixels of width w.
  function ticks(t0, t1, w) {
    const steps = [5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 21600, 43200, 86400];
    const room = Math.max(1, Math.floor(w / 70));
    const step = steps.find((s) => (t1 - t0) / s <= room) || steps[steps.length - 1];
    const out = [];
    for (let t = Math.ceil(t0 / step) * step; t <= t1; t += step) out.push(t);
    return { step, at: out };
  }

  // tickLabel names a tick in UTC: "16:34:30", or "16:34" for steps of
  // whole minutes.
  function tickLabel(t, step) {
    const s = hms(new Date(t * 1000)).replace(" UTC", "");
    return step % 60 === 0 ? s.slice(0, 5) : s;
  }

  // draw plots lines of [t, v] points over [t0, t1] on canvas, with
  // limits ({value, label, segs}: a rule's threshold, drawn as a step line
  // over segs, [from, to, value] each: the limit as it was at each
  // second) and vertical marks ({t, label}: a rule version saved), and
  // names the times under the plot (in UTC).
  function draw(canvas, lines, t0, t1, unit, limits, marks) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 300, h = canvas.clientHeight || 90;
    if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    let max = 0;
    for (const l of lines) for (const p of l.points) if (p[1] > max) max = p[1];
    // A limit widens the scale up to four times the data's highest point;
    // one above that is named at the top instead of drawn.
    const above = [];
    const dataMax = max;
    for (const m of limits || []) {
      if (dataMax > 0 && m.value > 4 * dataMax) { above.push(m); continue; }
      // Every step of the line within four times the data widens the scale.
      for (const sg of m.segs || [[t0, t1, m.value]]) if ((dataMax <= 0 || sg[2] <= 4 * dataMax) && sg[2] > max) max = sg[2];
    }
    if (max <= 0) max = 1;
    const top = 14, bottom = h - 16, left = 2, right = w - 2;
    g.strokeStyle = "#ddd"; g.lineWidth = 1;
    g.setLineDash([]); g.beginPath(); g.moveTo(left, bottom + 0.5); g.lineTo(right, bottom + 0.5); g.stroke();
    g.fillStyle = "#555"; g.font = "11px sans-serif";
    g.fillText("max " + fmt(max) + (unit ? " " + unit : "") +
      (above.length ? " \u00b7 " + above.map((m) => m.label).join(", ") + " above" : ""), left + 2, 11);
    const x = (t) => left + (right - left) * (t - t0) / Math.max(1, t1 - t0);
    const y = (v) => bottom - (bottom - top) * v / max;
    // The time axis: a tick and its time under the plot.
    const tk = ticks(t0, t1, w), drawn = [];
    g.fillStyle = "#555"; g.strokeStyle = "#bbb"; g.setLineDash([]);
    for (const t of tk.at) {
      const tx = Math.round(x(t)) + 0.5, label = tickLabel(t, tk.step);
      const lw = g.measureText(label).width;
      g.beginPath(); g.moveTo(tx, bottom); g.lineTo(tx, bottom + 3); g.stroke();
      g.fillText(label, Math.min(Math.max(left, tx - lw / 2), right - lw), h - 3);
      drawn.push(label);
    }
    canvas.dataset.ticks = JSON.stringify(drawn);
    for (const m of marks || []) {
      if (m.t < t0 || m.t > t1) continue;
      const mx = Math.round(x(m.t)) + 0.5;
      g.strokeStyle = colors.mark; g.lineWidth = 1; g.setLineDash([2, 2]);
      g.beginPath(); g.moveTo(mx, top); g.lineTo(mx, bottom); g.stroke();
      g.fillStyle = colors.mark; g.fillText(m.label, Math.min(mx + 2, right - 24), top + 10);
    }
    for (const m of limits || []) {
      if (above.includes(m)) continue;
      const my = Math.round(y(m.value)) + 0.5;
      g.strokeStyle = colors.limit; g.lineWidth = 1; g.setLineDash([6, 3]);
      // A step line: each segment at the limit of its time, joined where
      // one follows another.
      g.beginPath();
      let prev = null;
      for (const [from, to, v] of m.segs || [[t0, t1, m.value]]) {
        const a = Math.max(from, t0), b = Math.min(to, t1);
        if (b < a) { prev = null; continue; }
        // A step above the scale runs along the top edge.
        const sy = Math.max(Math.round(y(v)), 1) + 0.5, xa = from <= t0 ? left : x(a), xb = to >= t1 ? right : x(b);
        if (prev && prev[0] === from) g.lineTo(xa, sy); else g.moveTo(xa, sy);
        g.lineTo(xb, sy);
        prev = [to, sy];
      }
      g.stroke();
      // The label at the left end of its last step (the whole window's
      // left end, where a young window has no line and version marks are
      // rare, when one limit held it), above the line, or below it near
      // the top (under the scale).
      g.fillStyle = colors.limit;
      const segs = m.segs || [], lastFrom = segs.length ? segs[segs.length - 1][0] : t0;
      const lx = lastFrom <= t0 ? left + 2 : Math.min(x(lastFrom) + 2, right - g.measureText(m.label).width - 2);
      g.fillText(m.label, lx, my - 2 < top + 12 ? my + 11 : my - 2);
    }
    for (const l of lines) {
      g.strokeStyle = l.color; g.lineWidth = 1.5; g.setLineDash(l.dash || []); g.beginPath();
      // A second without a frame from any instance is a gap: the line
      // stops and starts again after it.
      // A second alone between gaps is a dot.
      let prev = null;
      l.points.forEach((p, k) => {
        const alone = (prev === null || p[0] - prev > 1) && (k === l.points.length - 1 || l.points[k + 1][0] - p[0] > 1);
        if (prev === null || p[0] - prev > 1) g.moveTo(x(p[0]), y(p[1])); else g.lineTo(x(p[0]), y(p[1]));
        if (alone) { g.fillStyle = l.color; g.fillRect(x(p[0]) - 1.5, y(p[1]) - 1.5, 3, 3); }
        prev = p[0];
      });
      g.stroke();
    }
  }

  function fmt(v) {
    if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
    if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
    if (v % 1 !== 0) return v.toFixed(2);
    return String(v);
  }

  const charts = new Map(); // resource -> {section, canvases, summary}

  function chartFor(container, resource) {
    let c = charts.get(resource);
    if (c) return c;
    // Reuse the server-rendered section when there is one.
    let section = null;
    for (const s of container.querySelectorAll("section.chart")) {
      if (s.dataset.resource === resource && !s.dataset.ready) { section = s; break; }
    }
    if (!section) {
      section = el("section", "chart");
      section.dataset.resource = resource;
      section.appendChild(el("h3", null, resource));
      container.appendChild(section);
    }
    section.dataset.ready = "1";
    const summary = el("p", "summary");
    section.appendChild(summary);
    // The lines of the requests/s plot, each named with its colour.
    const keys = el("p", "legend keys");
    section.appendChild(keys);
    const canvases = {};
    for (const k of ["requests", "rt", "inflight"]) {
      const wrap = el("div", "plot");
      wrap.appendChild(el("span", "label", k === "requests" ? "requests/s" : k === "rt" ? "response time (ms)" : "in flight"));
      const cv = el("canvas", "plot-" + k);
      wrap.appendChild(cv);
      section.appendChild(wrap);
      canvases[k] = cv;
    }
    c = { section, canvases, summary, keys };
    charts.set(resource, c);
    return c;
  }

  // reasonLabel names block type i in a legend: a flow rule's refusals
  // are named by the resource's flow rules ("concurrency limit" when
  // they all count requests in flight).
  function reasonLabel(data, i, rules) {
    const names = data.blockTypes || [], labels = data.blockLabels || names;
    const l = labels[i] || names[i] || "other";
    if (names[i] !== "flow") return l;
    const flow = (rules || []).filter((u) => u.kind === "flow");
    if (!flow.length) return l;
    const conc = flow.filter((u) => u.plot === "inflight").length;
    return conc === flow.length ? "concurrency limit" : conc ? "flow (rate or concurrency)" : l;
  }

  function renderCharts(container, data) {
    // The x axis spans the window, or less while the data are young.
    let first = data.now;
    for (const r of data.resources) if (r.points.length && r.points[0].t < first) first = r.points[0].t;
    const t1 = data.now, t0 = Math.max(data.now - data.window, first - 30);
    const seen = new Set();
    for (const r of data.resources) {
      seen.add(r.resource);
      const c = chartFor(container, r.resource);
      const pts = r.points;
      const names = data.blockTypes || [];
      const labels = data.blockLabels || names;
      const seenReasons = new Set(); // indices of the block types seen
      for (const p of pts) (p.blocked || []).forEach((n, i) => { if (n > 0) seenReasons.add(i); });
      const reasons = [...seenReasons].sort((a, b) => a - b);
      const req = [
        { key: "pass", label: "passed", points: pts.map((p) => [p.t, p.pass]) },
        { key: "block", label: "blocked", dash: [4, 3], points: pts.map((p) => [p.t, p.block]) },
      ];
      for (const i of reasons) {
        const key = colors[names[i]] ? names[i] : "other";
        req.push({ key, label: "blocked by " + reasonLabel(data, i, r.rules), points: pts.map((p) => [p.t, (p.blocked || [])[i] || 0]) });
      }
      for (const l of req) l.color = colors[l.key];
      // The totals over the reasons, blocked dashed: with one reason the two
      // lines coincide and both stay visible.
      // The rules' limits: per instance times the instances that publish
      // the resource, or the fleet's budget.
      // Each limit as it was at each second: the steps of the versions in
      // force over the window (limitSteps), or the rules in force now.
      const n = Math.max(1, r.instances || 1);
      const one = (u) => { const k = u.shared ? 1 : n; return { value: u.limit * k, label: u.summary + (k > 1 ? " \u00d7 " + k : "") }; };
      const limitsOf = (plot) => {
        const steps = r.limitSteps && r.limitSteps.length ? r.limitSteps : [{ from: t0, rules: r.rules }];
        const slots = [];
        steps.forEach((st, i) => {
          const to = i + 1 < steps.length ? steps[i + 1].from : t1;
          (st.rules || []).filter((u) => u.plot === plot && u.limit > 0).forEach((u, j) => {
            const m = one(u);
            if (!slots[j]) slots[j] = { segs: [] };
            Object.assign(slots[j], m); // the label and value of the latest
            slots[j].segs.push([st.from, to, m.value]);
          });
        });
        // A slot without a rule in the newest step is a limit no longer
        // in force: its label says until when.
        const last = steps[steps.length - 1];
        const live = (last.rules || []).filter((u) => u.plot === plot && u.limit > 0).length;
        slots.forEach((m, j) => { if (j >= live) m.label += " until " + tickLabel(m.segs[m.segs.length - 1][1], 1); });
        return slots.filter(Boolean);
      };
      const marks = (data.versions || []).map((v) => ({ t: v.at, label: "v" + v.version }));
      const reqLimits = limitsOf("requests"), flightLimits = limitsOf("inflight");
      c.section.dataset.limits = JSON.stringify(reqLimits.concat(flightLimits).map((m) => m.label));
      // The step lines drawn, for tests: [label, [[from, to, value]...]].
      c.section.dataset.limitSteps = JSON.stringify(reqLimits.concat(flightLimits).map((m) => [m.label, m.segs]));
      c.section.dataset.marks = JSON.stringify(marks.filter((m) => m.t >= t0).map((m) => m.label));
      draw(c.canvases.requests, req.slice(2).concat(req.slice(0, 2)), t0, t1, "/s", reqLimits, marks);
      const keys = req.map((l) => { const k = el("span", "k " + l.key, l.label); k.dataset.line = l.key; return k; });
      c.keys.replaceChildren(...keys);
      // The block types drawn, for tests: each has its key in the legend.
      c.section.dataset.reasons = reasons.map((i) => names[i] || "other").join(",");
      draw(c.canvases.rt, [{ color: colors.rt, points: pts.map((p) => [p.t, p.rt]) }], t0, t1, "ms", [], marks);
      draw(c.canvases.inflight, [{ color: colors.inflight, points: pts.map((p) => [p.t, p.inflight]) }], t0, t1, "", flightLimits, marks);
      const last = pts.length ? pts[pts.length - 1] : null;
      // The data drawn, for tests and for copying: the last points.
      c.section.dataset.points = JSON.stringify(pts.slice(-10).map((p) => [p.t, p.pass, p.block]));
      // The gaps drawn (seconds without any frame), as [from, to] seconds.
      const gaps = [];
      for (let k = 1; k < pts.length; k++) if (pts[k].t - pts[k - 1].t > 1) gaps.push([pts[k - 1].t, pts[k].t]);
      c.section.dataset.gaps = JSON.stringify(gaps);
      if (last) {
        let s = hms(new Date(last.t * 1000)) + ": passed " + last.pass + ", blocked " + last.block;
        const parts = [];
        (last.blocked || []).forEach((n, i) => { if (n > 0) parts.push(reasonLabel(data, i, r.rules) + " " + n); });
        if (parts.length) s += " (" + parts.join(", ") + ")";
        s += ", response time " + last.rt.toFixed(2) + " ms, in flight " + last.inflight;
        c.summary.textContent = s;
      }
    }
    for (const [name, c] of charts) {
      if (!seen.has(name)) { c.section.remove(); charts.delete(name); }
    }
    // The sections the server rendered for resources this answer does not
    // chart (the busiest, when the address chose others) go too.
    for (const s of container.querySelectorAll("section.chart")) {
      if (!s.dataset.ready && !seen.has(s.dataset.resource)) s.remove();
    }
  }

  function cell(tr, text, cls) { tr.appendChild(el("td", cls, text)); }

  // metric adds a Load, CPU or Memory cell: the figure, or a dash that
  // says why there is none.
  function metric(tr, text, data) {
    if (text !== null) { cell(tr, text); return; }
    const td = el("td", "unknown", "\u2013");
    td.title = data.notMeasured || "not measured yet";
    tr.appendChild(td);
  }

  // ago says how long ago the Unix second then was, at now (as the
  // server's pages say it).
  function ago(now, then) { return now - then <= 1 ? "now" : (now - then) + " s ago"; }

  // health names an instance's state by the age of what was last seen
  // of it, with the server's thresholds.
  function health(data, now, lastSeen) {
    if (!lastSeen) return "";
    const age = now - lastSeen;
    return age <= data.healthyWithin ? "healthy" : age <= data.lostAfter ? "stale" : "lost";
  }

  // renderInstances fills the instances' table; now is the current Unix
  // second (the server's, or estimated while it cannot be read).
  function renderInstances(tbody, data, now) {
    const rows = [];
    for (const i of data.instances) {
      const tr = el("tr");
      tr.dataset.instance = i.id;
      cell(tr, i.id);
      const h = health(data, now, i.lastSeen);
      if (h) cell(tr, h + " \u00b7 " + ago(now, i.lastSeen), "health health-" + h);
      else { const td = el("td", "health unknown", "\u2013"); td.title = "not seen in frames or heartbeats"; tr.appendChild(td); }
      cell(tr, i.host || "");
      const td = el("td", null, i.version ? "version " + i.version : "none");
      if (i.refused) {
        td.append(" ");
        const r = el("span", "refused", "refused version " + i.refused + ": " + (i.error || ""));
        r.title = r.textContent;
        td.appendChild(r);
      }
      tr.appendChild(td);
      cell(tr, i.clusterMode || "");
      cell(tr, i.shedding ? "shedding" : "ok");
      metric(tr, i.load1 === null || i.load1 === undefined ? null : i.load1.toFixed(2), data);
      metric(tr, i.cpu === null || i.cpu === undefined ? null : (i.cpu * 100).toFixed(0) + "%", data);
      metric(tr, i.memory ? (i.memory / 1048576).toFixed(1) + " MiB" : null, data);
      rows.push(tr);
    }
    if (!rows.length) { const tr = el("tr"); const td = el("td", null, "No instance has reported."); td.colSpan = 9; tr.appendChild(td); rows.push(tr); }
    tbody.replaceChildren(...rows);
  }

  function renderBreakers(tbody, data) {
    const rows = [];
    for (const b of data.breakers) {
      const tr = el("tr");
      cell(tr, b.resource); cell(tr, b.instance); cell(tr, b.state, "state-" + b.state);
      rows.push(tr);
    }
    if (!rows.length) { const tr = el("tr"); const td = el("td", null, "No circuit breaker."); td.colSpan = 3; tr.appendChild(td); rows.push(tr); }
    tbody.replaceChildren(...rows);
  }

  // The points of each resource, by second: the first answer covers the
  // window, the next ones the last seconds (late frames included), merged
  // here; a full answer every minute starts afresh.
  const known = new Map(); // resource -> Map(t -> point)

  let versions = []; // the rule versions saved in the window, from the last full answer
  const steps = new Map(); // resource -> its limit steps, from the last full answer

  const lastSeries = new Map(); // resource -> its latest answer, for an answer without it
  function merge(data) {
    // An answer with errors (the store cannot be read) has no frames: the
    // page keeps the resources it drew and their points, so that the
    // seconds without frames are drawn as a gap once the store is back.
    const lostStore = !!(data.errors && data.errors.length);
    const full = data.since <= data.now - data.window && !lostStore;
    if (full) { known.clear(); steps.clear(); versions = data.versions || []; }
    const from = data.now - data.window, out = [];
    const series = (r, m) => Object.assign({}, r, { points: [...m.values()].sort((a, b) => a.t - b.t), limitSteps: steps.get(r.resource) || null });
    for (const r of data.resources) {
      let m = known.get(r.resource);
      if (!m) { m = new Map(); known.set(r.resource, m); }
      for (const p of r.points || []) m.set(p.t, p);
      for (const t of m.keys()) if (t < from) m.delete(t);
      if (full) steps.set(r.resource, r.limitSteps || null);
      lastSeries.set(r.resource, r);
      out.push(series(r, m));
    }
    for (const [name, m] of known) {
      if (data.resources.some((r) => r.resource === name)) continue;
      if (lostStore && lastSeries.has(name)) out.push(series(lastSeries.get(name), m));
      else { known.delete(name); lastSeries.delete(name); }
    }
    return Object.assign({}, data, { resources: out, versions });
  }

  const chartsEl = document.getElementById("charts");
  // The resources charted: chosen in the table (kept in the address as
  // ?chart=), or else the busiest of the last full answer.
  const chosen = new URLSearchParams(window.location.search).getAll("chart").slice(0, 12);
  let busiest = [], version = -1, refetch = null;
  function setChosen(name, on) {
    const i = chosen.indexOf(name);
    if (on && i < 0 && chosen.length < 12) chosen.push(name);
    if (!on && i >= 0) chosen.splice(i, 1);
    const q = new URLSearchParams(window.location.search);
    q.delete("chart");
    for (const n of chosen) q.append("chart", n);
    const qs = q.toString();
    window.history.replaceState(null, "", window.location.pathname + (qs ? "?" + qs : ""));
    const what = document.getElementById("charts-what");
    if (what) what.textContent = chosen.length ? "The resources chosen in the table." : "The busiest resources, until you choose others in the table.";
    if (refetch) refetch();
  }
  if (chartsEl && app) {
    const base = "/api/apps/" + encodeURIComponent(app) + "/live";
    const url = (full) => {
      const q = new URLSearchParams();
      const names = chosen.length ? chosen : full ? [] : busiest;
      for (const n of names) q.append("r", n);
      if (!full) q.set("since", String(last - 5));
      const qs = q.toString();
      return base + (qs ? "?" + qs : "");
    };
    const updated = document.getElementById("updated");
    const status = document.getElementById("store-status");
    let busy = false, last = 0, ticks = 0;
    // While the store cannot be read, the page keeps what it read last
    // (lastGood, whose now was read at lastAt) and ages it.
    let lastGood = null, lastAt = 0, lostSince = 0, recoveredAt = 0;
    function show(kind, text) {
      status.className = kind;
      status.textContent = text;
      status.hidden = !text;
    }
    // lost dates the loss at the first read that failed (at, in ms; the
    // answer may come seconds later, after the store's timeouts), as of
    // now (ms).
    function lost(what, detail, at, now) {
      if (!lostSince || at < lostSince) lostSince = at;
      recoveredAt = 0;
      const s = Math.max(0, Math.round((now - lostSince) / 1000));
      show("error", what + " since " + hms(new Date(lostSince)) + " (" + s + " s). " +
        "What is below is what was read last; instances age from when they were last seen. " + detail);
    }
    function aged() {
      if (!lastGood) return;
      const now = lastGood.now + Math.floor((Date.now() - lastAt) / 1000);
      renderInstances(document.querySelector("#instances tbody"), lastGood, now);
    }
    async function tick() {
      if (busy) return;
      busy = true;
      try {
        const full = last === 0 || ticks++ % 60 === 0;
        let res;
        const asked = Date.now();
        try {
          res = await fetch(url(full),
            { credentials: "same-origin", headers: { Accept: "application/json" } });
        } catch (e) {
          lost("The dashboard does not answer", "(" + e.message + ")", asked, Date.now());
          aged();
          return;
        }
        if (res.status === 401) { window.location.assign("/login"); return; }
        if (!res.ok) {
          lost("The dashboard answers with errors", "(HTTP " + res.status + ")", asked, Date.now());
          aged();
          return;
        }
        const data = merge(await res.json());
        last = data.now;
        if (full && !data.chosen) busiest = data.resources.map((r) => r.resource);
        // A new rule version: a full answer next, with its mark.
        if (version >= 0 && data.version !== version) last = 0;
        version = data.version;
        document.getElementById("charts-what").textContent = chosen.length ? "The resources chosen in the table." :
          "The busiest resources, until you choose others in the table.";
        renderCharts(chartsEl, data);
        if (data.errors && data.errors.length) {
          // The server dates the loss: its first read that failed, and
          // its last that did not.
          lost("The dashboard has lost the store", (data.lastRead ? "Last read in full at " + hms(new Date(data.lastRead)) + ". " : "") +
            "Errors: " + data.errors.join("; ") + ".", data.lostSince || asked, data.now * 1000);
          // The instances read last, aged, unless some were read now.
          if (data.instances.length || !lastGood) {
            lastGood = data; lastAt = Date.now();
          } else {
            lastGood = Object.assign({}, lastGood, { now: data.now }); lastAt = Date.now();
          }
          renderInstances(document.querySelector("#instances tbody"), lastGood, data.now);
        } else {
          if (lostSince) {
            const s = Math.max(0, Math.round((data.now * 1000 - lostSince) / 1000));
            show("notice", "The store is read again since " + hms(new Date(data.now * 1000)) + ", after " + s + " s lost (from " +
              hms(new Date(lostSince)) + ").");
            lostSince = 0; recoveredAt = Date.now();
          } else if (recoveredAt && Date.now() - recoveredAt > 60000) {
            show("", ""); recoveredAt = 0;
          }
          lastGood = data; lastAt = Date.now();
          renderInstances(document.querySelector("#instances tbody"), data, data.now);
        }
        renderBreakers(document.querySelector("#breakers tbody"), lastGood);
        updated.textContent = (lostSince ? "Read with errors at " : "Updated ") + hms(new Date()) + ".";
        updated.dataset.now = String(data.now);
      } catch (e) {
        updated.textContent = "Update failed: " + e.message;
      } finally {
        busy = false;
      }
    }
    refetch = () => { last = 0; ticks = 0; tick(); };
    tick();
    setInterval(tick, 1000);
  }

  // ---- the resource table ----

  const resTable = document.getElementById("resources");
  if (resTable && app) {
    const api = "/api/apps/" + encodeURIComponent(app);
    const canEdit = resTable.dataset.canEdit === "1";
    const st = { q: "", sort: "pass", desc: true, offset: 0, limit: 50 };
    const opened = new Set(); // resources shown per instance
    const qIn = document.getElementById("res-q"), count = document.getElementById("res-count");
    const prev = document.getElementById("res-prev"), next = document.getElementById("res-next");
    let seq = 0, page = null;

    function reasons(blocked, d, rules) {
      const parts = [];
      (blocked || []).forEach((n, i) => { if (n > 0) parts.push(reasonLabel(d, i, rules) + " " + n); });
      return parts.join(", ");
    }

    function instancesRow(name, tr) {
      const sub = el("tr", "instances-of");
      sub.dataset.of = name;
      const td = el("td", null, "Loading\u2026");
      td.colSpan = 11;
      sub.appendChild(td);
      tr.after(sub);
      fetch(api + "/resource?name=" + encodeURIComponent(name), { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then((r) => r.ok ? r.json() : Promise.reject(new Error("HTTP " + r.status)))
        .then((d) => {
          const t = el("table", "per-instance");
          const head = el("tr");
          for (const h of ["Instance", "Passed", "Blocked", "Blocked by", "RT (ms)", "In flight", "Adaptive limit", "Tier", "Shadow would block", "Last second"]) head.appendChild(el("th", null, h));
          t.appendChild(head);
          const tiered = d.rules.some((u) => u.tiered);
          for (const i of d.instances) {
            const row = el("tr");
            row.dataset.instance = i.instance;
            for (const v of [i.instance, i.pass, i.block, reasons(i.blocked, d, d.rules), i.rt.toFixed(2), i.inflight, i.adaptive || "", tiered || i.tier ? i.tier : "", i.shadow || "", hms(new Date(i.last * 1000))]) row.appendChild(el("td", null, v));
            t.appendChild(row);
          }
          if (!d.instances.length) { const row = el("tr"); const c = el("td", null, "No instance published it in the last seconds."); c.colSpan = 10; row.appendChild(c); t.appendChild(row); }
          td.replaceChildren(t, refusedCallers(d));
        })
        .catch((e) => { td.textContent = "Could not read it: " + e.message; });
    }

    // refusedCallers is the resource's most refused callers (WithCaller)
    // over the seconds of its detail, names as text.
    function refusedCallers(d) {
      const box = el("div", "refused-callers");
      const secs = d.now - d.since;
      box.appendChild(el("h4", null, "Top refused callers, last " + secs + " s"));
      if (!d.callers || !d.callers.length) {
        box.appendChild(el("p", "muted", "No caller refused (only entries that name their caller are counted)."));
        return box;
      }
      const t = el("table", "callers");
      const head = el("tr");
      for (const h of ["Caller", "Refused"]) head.appendChild(el("th", null, h));
      t.appendChild(head);
      for (const c of d.callers) {
        const row = el("tr");
        const name = el("td", "caller", c.caller);
        if (c.cut) { name.classList.add("cut"); name.title = "The name was longer than a caller may be: its first 256 bytes."; }
        row.append(name, el("td", "num", c.refused));
        t.appendChild(row);
      }
      box.appendChild(t);
      return box;
    }

    function render(p) {
      page = p;
      const rows = [];
      for (const r of p.rows) {
        const tr = el("tr");
        tr.dataset.resource = r.resource;
        // Outside the busiest of each second kept: the newest second only.
        if (r.newest) { tr.classList.add("newest"); tr.title = "The figures of the newest second only: the seconds kept hold the busiest resources of each."; }
        tr.appendChild(el("td", "resource", r.resource));
        tr.appendChild(el("td", "num", r.pass));
        tr.appendChild(el("td", "num", r.block));
        tr.appendChild(el("td", "reasons", reasons(r.blocked, p, r.rules)));
        tr.appendChild(el("td", "num", r.rt.toFixed(2)));
        tr.appendChild(el("td", "num", r.inflight));
        // Blank where the resource has no such rule: an adaptive limit is
        // never 0, a tier shows for a tiered rule (step 0 included), the
        // shadow count when a rule in shadow mode would have refused.
        tr.appendChild(el("td", "num adaptive", r.adaptive || ""));
        tr.appendChild(el("td", "num tier", r.tier || r.rules.some((u) => u.tiered) ? r.tier : ""));
        tr.appendChild(el("td", "num shadow", r.shadow || ""));
        tr.appendChild(el("td", "rules", r.rules.map((u) => u.summary).join("; ") || "none"));
        const act = el("td", "actions");
        const chart = el("button", "chart-toggle", chosen.includes(r.resource) ? "Hide chart" : "Chart");
        chart.type = "button";
        chart.addEventListener("click", () => {
          setChosen(r.resource, !chosen.includes(r.resource));
          chart.textContent = chosen.includes(r.resource) ? "Hide chart" : "Chart";
        });
        const per = el("button", "per-instance-toggle", opened.has(r.resource) ? "Hide instances" : "Instances");
        per.type = "button";
        per.addEventListener("click", () => {
          if (opened.has(r.resource)) opened.delete(r.resource); else opened.add(r.resource);
          render(page);
        });
        act.append(chart, per);
        if (canEdit) {
          const a = el("a", "add-rule", "Add a rule");
          a.href = "/apps/" + encodeURIComponent(app) + "/rules?resource=" + encodeURIComponent(r.resource) + "#editor";
          act.appendChild(a);
        }
        tr.appendChild(act);
        rows.push(tr);
      }
      if (!rows.length) {
        const tr = el("tr"); const td = el("td", "muted", p.q ? "No resource matches." : "No resource yet."); td.colSpan = 11; tr.appendChild(td); rows.push(tr);
      }
      resTable.tBodies[0].replaceChildren(...rows);
      for (const tr of rows) if (tr.dataset.resource && opened.has(tr.dataset.resource)) instancesRow(tr.dataset.resource, tr);
      const to = Math.min(p.offset + p.rows.length, p.total);
      count.textContent = p.total ? (p.offset + 1) + "\u2013" + to + " of " + p.total + (p.q ? " matching (" + p.all + " in all)" : "") : "";
      prev.disabled = p.offset === 0;
      next.disabled = p.offset + p.limit >= p.total;
      for (const b of resTable.querySelectorAll("button.sort")) {
        const th = b.parentElement;
        if (b.dataset.sort === p.sort) th.setAttribute("aria-sort", p.desc ? "descending" : "ascending");
        else th.removeAttribute("aria-sort");
      }
    }

    // pending: the newest request has not been answered. The refresh
    // waits for it: a table slower to read than the refresh interval
    // would otherwise have every answer dropped for a newer request.
    let pending = false;
    async function load() {
      const my = ++seq;
      pending = true;
      const q = new URLSearchParams({ q: st.q, sort: st.sort, desc: st.desc ? "1" : "0", offset: String(st.offset), limit: String(st.limit) });
      try {
        const res = await fetch(api + "/resources?" + q, { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (res.status === 401) { window.location.assign("/login"); return; }
        if (!res.ok) throw new Error("HTTP " + res.status);
        const p = await res.json();
        if (my !== seq) return; // a newer request was sent meanwhile
        if (p.errors && p.errors.length && page) {
          // The store cannot be read: keep the rows read last.
          count.textContent = "Not updated: " + p.errors.join("; ");
          return;
        }
        st.offset = p.offset;
        render(p);
      } catch (e) {
        if (my === seq) count.textContent = "Could not read the resources: " + e.message;
      } finally {
        if (my === seq) pending = false;
      }
    }

    let typing = 0;
    qIn.addEventListener("input", () => {
      clearTimeout(typing);
      typing = setTimeout(() => { st.q = qIn.value; st.offset = 0; load(); }, 150);
    });
    for (const b of resTable.querySelectorAll("button.sort")) {
      b.addEventListener("click", () => {
        if (st.sort === b.dataset.sort) st.desc = !st.desc;
        else { st.sort = b.dataset.sort; st.desc = st.sort !== "resource" && st.sort !== "rules" ? true : false; }
        st.offset = 0;
        load();
      });
    }
    prev.addEventListener("click", () => { st.offset = Math.max(0, st.offset - st.limit); load(); });
    next.addEventListener("click", () => { st.offset += st.limit; load(); });
    load();
    setInterval(() => { if (!pending && !document.hidden && !resTable.querySelector("tr.instances-of")) load(); }, 5000);
  }

  // ---- rollout of a version just saved ----

  // The rules page after a save follows the instances taking the version:
  // "2/3 instances run version 5; 1 refused it: shop-2: reason", every
  // second, until every instance runs it or refused it (or a minute).
  const rollout = document.getElementById("rollout");
  if (rollout && app) {
    const want = Number(rollout.dataset.version);
    // The instances seen within the last minute (those not lost).
    const since = Number(rollout.dataset.now) - 60;
    const started = Date.now();
    let timer = 0;
    async function follow() {
      try {
        const res = await fetch("/api/apps/" + encodeURIComponent(app) + "/live?since=" + since,
          { credentials: "same-origin", headers: { Accept: "application/json" } });
        if (!res.ok) throw new Error("HTTP " + res.status);
        const data = await res.json();
        const ins = data.instances.filter((i) => i.health !== "lost");
        const running = ins.filter((i) => i.version >= want);
        const refused = ins.filter((i) => i.refused >= want);
        let text = "Version " + want + ": " + running.length + "/" + ins.length + " instances run it";
        if (refused.length) text += "; " + refused.length + " refused it: " + refused.map((i) => i.id + ": " + i.error).join("; ");
        if (data.version > want) text += " (version " + data.version + " was saved since)";
        const done = ins.length > 0 && running.length + refused.length === ins.length;
        if (!ins.length) text = "Version " + want + ": no instance has reported.";
        rollout.textContent = text + (done || Date.now() - started > 60000 ? "." : "\u2026");
        rollout.className = refused.length ? "error" : done ? "notice" : "";
        rollout.dataset.done = done ? "1" : "";
        if (done || Date.now() - started > 60000) clearInterval(timer);
      } catch (e) {
        rollout.textContent = "Version " + want + ": the instances cannot be read (" + e.message + ").";
      }
    }
    follow();
    timer = setInterval(follow, 1000);
  }

  // ---- rule editor ----

  const skeletons = {
    flow: "  - resource: NAME\n    threshold: 100\n",
    system: "  - metric: qps\n    threshold: 1000\n",
    circuitBreaker: "  - resource: NAME\n    strategy: error-ratio\n    threshold: 0.5\n    retryTimeout: 10s\n",
    param: "  - resource: NAME\n    threshold: 10\n",
  };
  const doc = document.getElementById("doc");
  // addRule adds a rule of kind to the editor's text, for resource (as a
  // JSON string, which YAML reads whatever the name holds) or NAME.
  function addRule(kind, resource) {
    let skel = skeletons[kind];
    if (resource !== undefined) skel = skel.replace("NAME", () => yamlString(resource));
    addText(kind, skel);
  }
  // yamlString writes s as a YAML double-quoted string: JSON's escapes,
  // and also the characters YAML does not accept unescaped (DEL, C1
  // controls, the line and paragraph separators, the byte-order mark).
  function yamlString(s) {
    return JSON.stringify(String(s)).replace(/[\u007f-\u009f\u2028\u2029\ufeff]/g,
      (c) => "\\u" + c.charCodeAt(0).toString(16).padStart(4, "0"));
  }
  // addText adds skel (a list item of kind's rules, "  - ...") to the
  // editor's text: under the kind's key when the text has one, else
  // under a new one at the end.
  function addText(kind, skel) {
    let text = doc.value;
    const re = new RegExp("^" + kind + ":\\s*$", "m");
    if (re.test(text)) {
      // Insert after the kind's key line.
      text = text.replace(re, (m) => m + "\n" + skel.replace(/\n$/, ""));
    } else {
      if (text.trim() === "{}") text = "";
      if (text && !text.endsWith("\n")) text += "\n";
      text += kind + ":\n" + skel;
    }
    doc.value = text;
    doc.focus();
  }
  for (const b of document.querySelectorAll("button.add")) {
    b.addEventListener("click", () => addRule(b.dataset.kind));
  }
  // ---- the per-kind forms ----

  // A form's fields (made on the server from the rule types) become one
  // list item of YAML: strings, enums and durations as JSON strings (which
  // YAML reads whatever they hold), numbers checked and written as typed,
  // a map as a JSON object, a list of objects as a JSON list, a section's
  // fields under its key. Nothing is
  // saved: the text is then reviewed and saved as any edit.
  const kindSel = document.getElementById("form-kind");
  const forms = document.querySelectorAll("form.ruleform");
  // showKind shows the form named kind: a kind's key, or "concurrency"
  // (a flow rule of the concurrency metric).
  function showKind(kind) {
    kindSel.value = kind;
    for (const f of forms) f.hidden = (f.dataset.form || f.dataset.kind) !== kind;
  }
  // syncSections shows the fields of the sections checked, and disables the
  // others' (a required field of a section left off, warmUp.period, must not
  // stop the form).
  function syncSections(f) {
    for (const box of f.querySelectorAll('input[data-type="section"]')) {
      for (const l of f.querySelectorAll('label.in-section')) {
        if (l.dataset.section !== box.name) continue;
        l.hidden = !box.checked;
        for (const e of l.querySelectorAll("input, select, textarea")) e.disabled = !box.checked;
      }
    }
  }
  const isNumber = /^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/, isInteger = /^[+-]?\d+$/;
  // label is an input's label as the form shows it ("threshold (most in
  // flight)"), without the mark of a required field.
  function label(e) {
    const l = e.closest("label"), sp = l && l.querySelector("span");
    if (!sp) return e.name;
    const dot = e.name.indexOf("."), text = sp.textContent.replace(/ \*$/, "");
    return dot > 0 ? e.name.slice(0, dot + 1) + text : text; // "cluster.localThreshold", as the server's errors
  }
  // formYAML is the rule of form f as a list item, or throws an Error
  // naming the field that cannot be written.
  function formYAML(f) {
    const top = [], sections = new Map();
    const ad = f.elements.namedItem("adaptive"), adaptive = !!(ad && ad.checked);
    for (const e of f.querySelectorAll("[data-type]")) {
      const type = e.dataset.type, name = e.name;
      if (type === "section") { if (e.checked) { sections.set(name, []); top.push({ section: name }); } continue; }
      const dot = name.indexOf(".");
      const sec = dot > 0 ? name.slice(0, dot) : "", key = dot > 0 ? name.slice(dot + 1) : name;
      if (sec && !sections.has(sec)) continue;
      let v;
      if (type === "bool") { if (!e.checked) continue; v = "true"; } else {
        const raw = e.value.trim();
        // The concurrency form's threshold: needed, unless the adaptive
        // section sets the limit.
        if (raw === "" && e.dataset.min && !adaptive) throw new Error(label(e) + ": set it (or the adaptive section)");
        if (raw === "") continue;
        if (type === "number" || type === "integer") {
          if (!(type === "number" ? isNumber : isInteger).test(raw)) throw new Error(label(e) + ": " + JSON.stringify(raw) + " is not " + (type === "number" ? "a number" : "a whole number"));
          if (e.dataset.min && Number(raw) < Number(e.dataset.min) && !adaptive) {
            throw new Error(label(e) + ": must be at least " + e.dataset.min + ", got " + raw);
          }
          v = raw;
        } else if (type === "map") {
          let m;
          try { m = JSON.parse(raw); } catch (err) { throw new Error(name + ": not a JSON object (" + err.message + ")"); }
          if (!m || typeof m !== "object" || Array.isArray(m)) throw new Error(name + ": not a JSON object");
          const parts = [];
          for (const [k, n] of Object.entries(m)) {
            if (!Number.isInteger(n)) throw new Error(name + ": the value of " + JSON.stringify(k) + " is not a whole number");
            parts.push(yamlString(k) + ": " + n);
          }
          v = "{" + parts.join(", ") + "}";
        } else if (type === "names") {
          // A list of callers (an authority rule's allow or deny list), as
          // JSON, which YAML reads as written.
          let l;
          try { l = JSON.parse(raw); } catch (err) { throw new Error(name + ": not a JSON list (" + err.message + ")"); }
          if (!Array.isArray(l) || l.some((o) => typeof o !== "string")) throw new Error(name + ": not a JSON list of strings");
          v = JSON.stringify(l);
        } else if (type === "list") {
          // A list of objects (a flow rule's tiers), written as JSON,
          // which YAML reads as written.
          let l;
          try { l = JSON.parse(raw); } catch (err) { throw new Error(name + ": not a JSON list (" + err.message + ")"); }
          if (!Array.isArray(l) || l.some((o) => !o || typeof o !== "object" || Array.isArray(o))) throw new Error(name + ": not a JSON list of objects");
          v = JSON.stringify(l);
        } else {
          v = yamlString(e.value);
        }
      }
      if (sec) sections.get(sec).push(key + ": " + v); else top.push({ line: key + ": " + v });
    }
    const lines = [];
    for (const t of top) {
      if (t.line) { lines.push(t.line); continue; }
      const sub = sections.get(t.section);
      if (!sub.length) lines.push(t.section + ": {}");
      else { lines.push(t.section + ":"); for (const l of sub) lines.push("  " + l); }
    }
    if (!lines.length) throw new Error("no field is set");
    return "  - " + lines.join("\n    ") + "\n";
  }
  if (kindSel && doc) {
    kindSel.addEventListener("change", () => showKind(kindSel.value));
    for (const f of forms) {
      syncSections(f);
      f.addEventListener("change", () => syncSections(f));
      f.addEventListener("reset", () => setTimeout(() => { syncSections(f); f.querySelector(".form-error").hidden = true; }, 0));
      f.addEventListener("submit", (ev) => {
        ev.preventDefault();
        const msg = f.querySelector(".form-error");
        let item;
        try { item = formYAML(f); } catch (err) { msg.textContent = err.message; msg.hidden = false; return; }
        msg.hidden = true;
        addText(f.dataset.kind, item);
        const what = document.getElementById("form-what");
        what.textContent = "A " + (f.dataset.form === "concurrency" ? "concurrency flow" : f.dataset.kind) + " rule was added to the text: review and save it.";
        what.dataset.added = String(Number(what.dataset.added || 0) + 1);
      });
    }
    // "Edit" on a listed rule fills its kind's form with the rule's
    // fields (given by the server, as the form holds them).
    for (const b of document.querySelectorAll("button.edit")) {
      b.addEventListener("click", () => {
        const form = b.dataset.form || b.dataset.kind;
        const f = document.getElementById("form-" + form);
        if (!f) return;
        showKind(form);
        f.reset();
        const vals = JSON.parse(b.dataset.values || "{}");
        for (const [k, v] of Object.entries(vals)) {
          const e = f.elements.namedItem(k);
          if (!e) continue;
          if (e.type === "checkbox") e.checked = true; else e.value = v;
        }
        syncSections(f);
        f.querySelector(".form-error").hidden = true;
        document.getElementById("form-what").textContent = "Filled from " + b.dataset.kind + " rule " + b.dataset.index +
          ". Adding writes the changed rule into the text as a new rule: remove rule " + b.dataset.index + " from the text before saving to replace it.";
        f.scrollIntoView({ block: "nearest" });
      });
    }
  }

  // From the resource table's "Add a rule\": a flow rule for the resource,
  // to complete and save.
  const forResource = new URLSearchParams(window.location.search).get("resource");
  if (doc && doc.tagName === "TEXTAREA" && forResource !== null && !document.getElementById("error")) {
    addRule("flow", forResource);
    const hint = document.getElementById("adding");
    if (hint) { hint.hidden = false; hint.querySelector("code").textContent = forResource; }
  }
})();
