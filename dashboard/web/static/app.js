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

  // hms is a time of day in the viewer's time zone, 24-hour: "16:34:43".
  function hms(d) {
    const p = (n) => String(n).padStart(2, "0");
    return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds());
  }

  // ---- charts ----

  // The colours of the lines, by key: "pass", "block", the block types'
  // names (data.blockTypes)... style.css gives the legend's keys the same
  // (.k.pass, .k.flow...).
  const colors = {
    pass: "#2e7d32", block: "#c62828", rt: "#1565c0", inflight: "#6a1b9a",
    flow: "#e65100", system: "#ad1457", isolation: "#4e342e", param: "#827717",
    degrade: "#37474f", cluster: "#00838f", custom: "#5d4037", other: "#757575",
  };

  // draw plots lines of [t, v] points over [t0, t1] on canvas.
  function draw(canvas, lines, t0, t1, unit) {
    const dpr = window.devicePixelRatio || 1;
    const w = canvas.clientWidth || 300, h = canvas.clientHeight || 90;
    if (canvas.width !== w * dpr) { canvas.width = w * dpr; canvas.height = h * dpr; }
    const g = canvas.getContext("2d");
    g.setTransform(dpr, 0, 0, dpr, 0, 0);
    g.clearRect(0, 0, w, h);
    let max = 0;
    for (const l of lines) for (const p of l.points) if (p[1] > max) max = p[1];
    if (max <= 0) max = 1;
    const top = 14, bottom = h - 4, left = 2, right = w - 2;
    g.strokeStyle = "#ddd"; g.lineWidth = 1;
    g.setLineDash([]); g.beginPath(); g.moveTo(left, bottom + 0.5); g.lineTo(right, bottom + 0.5); g.stroke();
    g.fillStyle = "#555"; g.font = "11px sans-serif";
    g.fillText("max " + fmt(max) + (unit ? " " + unit : ""), left + 2, 11);
    const x = (t) => left + (right - left) * (t - t0) / Math.max(1, t1 - t0);
    const y = (v) => bottom - (bottom - top) * v / max;
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
        req.push({ key, label: "blocked by " + (labels[i] || names[i] || "other"), points: pts.map((p) => [p.t, (p.blocked || [])[i] || 0]) });
      }
      for (const l of req) l.color = colors[l.key];
      // The totals over the reasons, blocked dashed: with one reason the two
      // lines coincide and both stay visible.
      draw(c.canvases.requests, req.slice(2).concat(req.slice(0, 2)), t0, t1, "/s");
      const keys = req.map((l) => { const k = el("span", "k " + l.key, l.label); k.dataset.line = l.key; return k; });
      c.keys.replaceChildren(...keys);
      // The block types drawn, for tests: each has its key in the legend.
      c.section.dataset.reasons = reasons.map((i) => names[i] || "other").join(",");
      draw(c.canvases.rt, [{ color: colors.rt, points: pts.map((p) => [p.t, p.rt]) }], t0, t1, "ms");
      draw(c.canvases.inflight, [{ color: colors.inflight, points: pts.map((p) => [p.t, p.inflight]) }], t0, t1, "");
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
        (last.blocked || []).forEach((n, i) => { if (n > 0) parts.push((labels[i] || names[i] || "other") + " " + n); });
        if (parts.length) s += " (" + parts.join(", ") + ")";
        s += ", response time " + last.rt.toFixed(2) + " ms, in flight " + last.inflight;
        c.summary.textContent = s;
      }
    }
    for (const [name, c] of charts) {
      if (!seen.has(name)) { c.section.remove(); charts.delete(name); }
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
      if (i.refused) td.appendChild(el("span", "refused", " refused version " + i.refused + ": " + (i.error || "")));
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

  function merge(data) {
    if (data.since <= data.now - data.window) known.clear();
    for (const r of data.resources) {
      let m = known.get(r.resource);
      if (!m) { m = new Map(); known.set(r.resource, m); }
      for (const p of r.points) m.set(p.t, p);
    }
    const from = data.now - data.window, out = [];
    for (const [name, m] of known) {
      for (const t of m.keys()) if (t < from) m.delete(t);
      if (!m.size) { known.delete(name); continue; }
      const points = [...m.values()].sort((a, b) => a.t - b.t);
      let total = 0;
      for (const p of points) total += p.pass + p.block;
      out.push({ resource: name, points, total });
    }
    out.sort((a, b) => b.total - a.total || (a.resource < b.resource ? -1 : 1));
    return Object.assign({}, data, { resources: out.slice(0, 12) });
  }

  const chartsEl = document.getElementById("charts");
  if (chartsEl && app) {
    const url = "/api/apps/" + encodeURIComponent(app) + "/live";
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
    function lost(what, detail) {
      if (!lostSince) lostSince = Date.now();
      recoveredAt = 0;
      const s = Math.round((Date.now() - lostSince) / 1000);
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
        try {
          res = await fetch(full ? url : url + "?since=" + (last - 5),
            { credentials: "same-origin", headers: { Accept: "application/json" } });
        } catch (e) {
          lost("The dashboard does not answer", "(" + e.message + ")");
          aged();
          return;
        }
        if (res.status === 401) { window.location.assign("/login"); return; }
        if (!res.ok) {
          lost("The dashboard answers with errors", "(HTTP " + res.status + ")");
          aged();
          return;
        }
        const data = merge(await res.json());
        last = data.now;
        renderCharts(chartsEl, data);
        if (data.errors && data.errors.length) {
          lost("The dashboard has lost the store", "Errors: " + data.errors.join("; ") + ".");
          // The instances read last, aged, unless some were read now.
          if (data.instances.length || !lastGood) {
            lastGood = data; lastAt = Date.now();
          } else {
            lastGood = Object.assign({}, lastGood, { now: data.now }); lastAt = Date.now();
          }
          renderInstances(document.querySelector("#instances tbody"), lastGood, data.now);
        } else {
          if (lostSince) {
            const s = Math.round((Date.now() - lostSince) / 1000);
            show("notice", "The store is read again since " + hms(new Date()) + ", after " + s + " s lost (from " +
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
    tick();
    setInterval(tick, 1000);
  }

  // ---- rule editor ----

  const skeletons = {
    flow: "  - resource: NAME\n    threshold: 100\n",
    isolation: "  - resource: NAME\n    threshold: 10\n",
    system: "  - metric: qps\n    threshold: 1000\n",
    circuitBreaker: "  - resource: NAME\n    strategy: error-ratio\n    threshold: 0.5\n    retryTimeout: 10s\n",
    param: "  - resource: NAME\n    threshold: 10\n",
  };
  const doc = document.getElementById("doc");
  for (const b of document.querySelectorAll("button.add")) {
    b.addEventListener("click", () => {
      const kind = b.dataset.kind;
      let text = doc.value;
      const re = new RegExp("^" + kind + ":\\s*$", "m");
      if (re.test(text)) {
        // Insert after the kind's key line.
        text = text.replace(re, (m) => m + "\n" + skeletons[kind].replace(/\n$/, ""));
      } else {
        if (text.trim() === "{}" ) text = "";
        if (text && !text.endsWith("\n")) text += "\n";
        text += kind + ":\n" + skeletons[kind];
      }
      doc.value = text;
      doc.focus();
    });
  }
})();
