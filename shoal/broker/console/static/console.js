// Shoal console: live updates of the share-group page by polling its JSON, at most once a second.
// Plain DOM calls only (textContent, setAttribute): nothing from the broker is parsed as HTML.
"use strict";
(function () {
  const url = document.body.dataset.poll;
  if (!url) return;
  const SVG = "http://www.w3.org/2000/svg";
  const WIDTH = 1000;
  let live = true;
  let timer = null;
  let busy = false;
  const status = document.getElementById("live-status");
  const toggle = document.getElementById("live-toggle");

  function fmtTime(ms) {
    return new Date(ms).toISOString().replace("T", " ").replace("Z", " UTC");
  }
  function runTitle(r) {
    const n = r.last - r.first + 1;
    let t = n === 1 ? "offset " + r.first.toLocaleString("en-US")
      : "offsets " + r.first.toLocaleString("en-US") + " to " + r.last.toLocaleString("en-US") + " (" + n.toLocaleString("en-US") + " records)";
    t += ": " + r.state + ", delivery count " + r.deliveries;
    if (r.member) t += ", owner " + r.member;
    if (r.lock_left_ms !== undefined) t += ", lock until " + fmtTime(r.lock_deadline_ms) + " (" + (r.lock_left_ms / 1000).toFixed(1) + " s left)";
    if (r.pending) t += ", write pending";
    return t;
  }
  function setField(root, name, value) {
    const el = root.querySelector('[data-field="' + name + '"]');
    if (el) el.textContent = typeof value === "number" ? value.toLocaleString("en-US") : value;
  }
  function drawStrip(svg, p) {
    const total = p.speo - p.spso + 1;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (total <= 0) return;
    const scale = WIDTH / total;
    for (const r of p.runs) {
      const rect = document.createElementNS(SVG, "rect");
      rect.setAttribute("class", "st st-" + r.state + (r.pending ? " pending" : ""));
      rect.setAttribute("x", ((r.first - p.spso) * scale).toFixed(3));
      rect.setAttribute("width", ((r.last - r.first + 1) * scale).toFixed(3));
      rect.setAttribute("y", "0");
      rect.setAttribute("height", "1");
      rect.setAttribute("data-first", r.first);
      rect.setAttribute("data-last", r.last);
      rect.setAttribute("data-state", r.state);
      rect.setAttribute("data-deliveries", r.deliveries);
      rect.setAttribute("data-member", r.member || "");
      const title = document.createElementNS(SVG, "title");
      title.textContent = runTitle(r);
      rect.appendChild(title);
      svg.appendChild(rect);
    }
    const counts = Object.entries(p.counts).map(([s, n]) => n.toLocaleString("en-US") + " " + s.toLowerCase()).join(", ");
    svg.setAttribute("aria-label", "In-flight records of " + p.topic + "-" + p.partition + ", offsets " + p.spso + " to " + p.speo + ": " + counts);
  }
  function apply(g) {
    setField(document, "state", g.state);
    setField(document.querySelector("dl.facts"), "lag", g.lag);
    setField(document, "totals", Object.entries(g.totals).map(([s, n]) => n.toLocaleString("en-US") + " " + s.toLowerCase()).join(", "));
    let missing = 0;
    for (const p of g.partitions) {
      const key = p.topic + "/" + p.partition;
      const sec = Array.from(document.querySelectorAll("section.sp")).find((s) => s.dataset.key === key);
      if (!sec) { missing++; continue; }
      for (const f of ["spso", "speo", "high_watermark", "in_flight", "lag", "holes", "pending"]) setField(sec, f, p[f]);
      for (const [s, n] of Object.entries(p.counts)) {
        const td = sec.querySelector('td[data-state="' + s + '"]');
        if (td) td.textContent = n.toLocaleString("en-US");
      }
      const svg = sec.querySelector("svg.strip");
      if (svg) drawStrip(svg, p);
    }
    document.body.dataset.updates = String(Number(document.body.dataset.updates || "0") + 1);
    if (status) status.textContent = "updated " + new Date().toLocaleTimeString() + (missing ? " (new partitions: reload the page)" : "");
  }
  function fmt1(v) {
    return v.toLocaleString("en-US", { minimumFractionDigits: 1, maximumFractionDigits: 1 });
  }
  function drawSpark(span, values) {
    const svg = span.querySelector("svg");
    const w = 120, h = 24;
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    if (values.length >= 2) {
      const top = Math.max(...values) || 1;
      const step = w / (values.length - 1);
      const line = document.createElementNS(SVG, "polyline");
      line.setAttribute("points", values.map((v, i) => (i * step).toFixed(1) + "," + (h - 2 - (v / top) * (h - 4)).toFixed(1)).join(" "));
      line.setAttribute("fill", "none");
      line.setAttribute("stroke", "currentColor");
      line.setAttribute("stroke-width", "1.5");
      svg.appendChild(line);
    }
    const latest = values.length ? fmt1(values[values.length - 1]) + span.dataset.unit : "-";
    span.querySelector(".spark-value").textContent = latest;
    svg.setAttribute("aria-label", span.dataset.label + ": latest " + latest + " over the last " + values.length + " s");
  }
  function cell(row, col, value) {
    const td = row && row.querySelector('[data-col="' + col + '"]');
    if (td) td.textContent = value === null ? "-" : typeof value === "number" ? value.toLocaleString("en-US") : value;
  }
  function applyOverview(o) {
    const series = {};
    for (const t of o.topics) {
      series["in:" + t.name] = t.in_rate;
      series["out:" + t.name] = t.out_bytes_rate.map((x) => x / 1024);
      const row = Array.from(document.querySelectorAll("tr[data-topic]")).find((r) => r.dataset.topic === t.name);
      cell(row, "records", t.records);
    }
    for (const g of o.groups) {
      if (g.acquired_rate) series["acq:" + g.group_id] = g.acquired_rate;
      const row = Array.from(document.querySelectorAll("tr[data-group]")).find((r) => r.dataset.group === g.group_id);
      cell(row, "state", g.state);
      cell(row, "members", g.members);
      cell(row, "lag", g.lag);
    }
    for (const span of document.querySelectorAll("span.spark[data-series]")) {
      const v = series[span.dataset.series];
      if (v) drawSpark(span, v);
    }
    document.body.dataset.updates = String(Number(document.body.dataset.updates || "0") + 1);
    if (status) status.textContent = "Updated " + new Date().toLocaleTimeString() + ".";
  }
  async function tick() {
    timer = null;
    if (busy) return;
    busy = true;
    const started = Date.now();
    try {
      const resp = await fetch(url, { headers: { Accept: "application/json" }, credentials: "same-origin" });
      if (resp.ok) {
        const data = await resp.json();
        if (data.topics) applyOverview(data);
        else apply(data);
      }
      else if (status) status.textContent = "update failed: HTTP " + resp.status;
    } catch (e) {
      if (status) status.textContent = "update failed";
    }
    busy = false;
    if (live) timer = setTimeout(tick, Math.max(1000, 1000 - (Date.now() - started)));
  }
  if (toggle) {
    toggle.addEventListener("click", () => {
      live = !live;
      toggle.setAttribute("aria-pressed", String(live));
      toggle.textContent = live ? "Pause live updates" : "Resume live updates";
      if (live && timer === null) tick();
      if (!live && timer !== null) { clearTimeout(timer); timer = null; }
    });
  }
  timer = setTimeout(tick, 1000);
})();
