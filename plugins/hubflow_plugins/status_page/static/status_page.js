// hubflow status page: draws each job's input-rate and backlog (events, seconds) charts as plain SVG and refreshes them.
// No library and no network beyond this Airflow API server: the page must work offline.
(function () {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var WIDTH = 480, HEIGHT = 200;
  var PAD = { left: 56, right: 12, top: 12, bottom: 28 };
  var COLORS = { input_rows_per_second: "#1f6feb", lag: "#d9480f", lag_seconds: "#9c36b5" };
  var CHART_IDS = { input_rows_per_second: "chart-rate-", lag: "chart-lag-", lag_seconds: "chart-lag-seconds-" };
  var base = document.body.getAttribute("data-base") || "";
  var refreshSeconds = Number(document.body.getAttribute("data-refresh-seconds")) || 10;

  function el(name, attrs, text) {
    var node = document.createElementNS(SVG, name);
    Object.keys(attrs || {}).forEach(function (key) { node.setAttribute(key, attrs[key]); });
    if (text !== undefined) { node.textContent = text; }
    return node;
  }

  function niceMax(value) {
    if (!(value > 0)) { return 1; }
    var power = Math.pow(10, Math.floor(Math.log10(value)));
    var steps = [1, 2, 2.5, 5, 10];
    for (var i = 0; i < steps.length; i++) {
      if (steps[i] * power >= value) { return steps[i] * power; }
    }
    return 10 * power;
  }

  function formatNumber(value) {
    if (value >= 1e6) { return (value / 1e6).toFixed(1) + "M"; }
    if (value >= 1e3) { return (value / 1e3).toFixed(1) + "k"; }
    return Number.isInteger(value) ? String(value) : value.toFixed(1);
  }

  // Draw one series (points: [{batch_id, <series>}]) into an <svg> element.
  function drawChart(svg, points, series) {
    while (svg.firstChild) { svg.removeChild(svg.firstChild); }
    var color = COLORS[series] || "#444";
    var data = (points || []).filter(function (p) {
      return p[series] !== null && p[series] !== undefined && isFinite(p[series]);
    });
    var plotW = WIDTH - PAD.left - PAD.right, plotH = HEIGHT - PAD.top - PAD.bottom;
    svg.appendChild(el("rect", { x: 0, y: 0, width: WIDTH, height: HEIGHT, fill: "#ffffff" }));
    svg.appendChild(el("line", { x1: PAD.left, y1: PAD.top + plotH, x2: PAD.left + plotW, y2: PAD.top + plotH,
      stroke: "#999", "stroke-width": 1 }));
    svg.appendChild(el("line", { x1: PAD.left, y1: PAD.top, x2: PAD.left, y2: PAD.top + plotH,
      stroke: "#999", "stroke-width": 1 }));
    if (data.length === 0) {
      svg.appendChild(el("text", { x: PAD.left + plotW / 2, y: PAD.top + plotH / 2, "text-anchor": "middle",
        fill: "#888", "class": "no-data" }, "no data yet"));
      svg.setAttribute("data-points", "0");
      return;
    }
    var maxY = niceMax(Math.max.apply(null, data.map(function (p) { return p[series]; })));
    var first = data[0].batch_id, last = data[data.length - 1].batch_id;
    var span = Math.max(1, last - first);
    function x(p) { return PAD.left + (data.length === 1 ? plotW / 2 : ((p.batch_id - first) / span) * plotW); }
    function y(v) { return PAD.top + plotH - (v / maxY) * plotH; }
    [0, 0.5, 1].forEach(function (f) {
      var gy = y(maxY * f);
      svg.appendChild(el("line", { x1: PAD.left, y1: gy, x2: PAD.left + plotW, y2: gy, stroke: "#eee" }));
      svg.appendChild(el("text", { x: PAD.left - 6, y: gy + 4, "text-anchor": "end", fill: "#555",
        "font-size": 11 }, formatNumber(maxY * f)));
    });
    if (data.length === 1) {
      svg.appendChild(el("text", { x: PAD.left + plotW / 2, y: HEIGHT - 8, fill: "#555", "font-size": 11,
        "text-anchor": "middle" }, "batch " + first + " (one batch seen so far)"));
    } else {
      svg.appendChild(el("text", { x: PAD.left, y: HEIGHT - 8, fill: "#555", "font-size": 11 }, "batch " + first));
      svg.appendChild(el("text", { x: PAD.left + plotW, y: HEIGHT - 8, fill: "#555", "font-size": 11,
        "text-anchor": "end" }, "batch " + last));
      var line = data.map(function (p) { return x(p).toFixed(1) + "," + y(p[series]).toFixed(1); });
      var area = [PAD.left + "," + (PAD.top + plotH)].concat(line)
        .concat([x(data[data.length - 1]).toFixed(1) + "," + (PAD.top + plotH)]);
      svg.appendChild(el("polygon", { points: area.join(" "), fill: color, "fill-opacity": 0.18 }));
      svg.appendChild(el("polyline", { points: line.join(" "), fill: "none", stroke: color,
        "stroke-width": 2.5, "class": "series" }));
    }
    data.forEach(function (p) {
      var dot = el("circle", { cx: x(p).toFixed(1), cy: y(p[series]).toFixed(1), r: data.length === 1 ? 5 : 3,
        fill: color });
      dot.appendChild(el("title", {}, "batch " + p.batch_id + ": " + formatNumber(p[series])));
      svg.appendChild(dot);
    });
    svg.setAttribute("data-points", String(data.length));
  }

  function drawJob(job) {
    Object.keys(CHART_IDS).forEach(function (series) {
      var svg = document.getElementById(CHART_IDS[series] + job.name);
      if (svg) { drawChart(svg, job.history || [], series); }
    });
  }

  function setCell(row, index, text) {
    if (row && row.cells[index]) { row.cells[index].textContent = text; }
  }

  function updateRow(job) {
    var row = document.getElementById("row-" + job.name);
    var batch = job.last_batch;
    var verdict = row && row.cells[2].querySelector(".verdict");
    if (verdict) {
      verdict.textContent = job.verdict || "unknown";
      verdict.className = "verdict verdict-" + (job.verdict || "unknown");
    }
    var state = row && row.cells[3].querySelector(".state");
    if (state) {
      state.textContent = job.state || "–";
      state.className = "state state-" + (job.state || "unknown");
    }
    setCell(row, 4, job.heartbeat_age_seconds === null ? "–" : Math.round(job.heartbeat_age_seconds) + " s ago");
    setCell(row, 5, batch ? "#" + batch.batch_id : "–");
    setCell(row, 6, batch ? shown(batch.num_input_rows) : "–");
    setCell(row, 7, batch && batch.input_rows_per_second !== null ? batch.input_rows_per_second.toFixed(1) : "–");
    setCell(row, 8, job.lag === null ? "–" : String(job.lag) +
      (job.lag_seconds === null || job.lag_seconds === undefined ? "" : " (" + job.lag_seconds.toFixed(1) + " s)"));
  }

  function shown(value) { return value === null || value === undefined ? "–" : String(value); }

  function updateDeltaTables(job) {
    var table = document.getElementById("delta-" + job.name);
    if (!table) { return; }
    var body = table.tBodies[0];
    while (body.firstChild) { body.removeChild(body.firstChild); }
    (job.delta_tables || []).forEach(function (found) {
      var row = document.createElement("tr");
      row.className = "agreement-" + found.agreement;
      [found.table, shown(found.version), shown(found.table_batch), shown(found.spark_committed_batch),
        found.explanation].forEach(function (text) {
        var cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
    table.hidden = !(job.delta_tables && job.delta_tables.length);
  }

  // The job's audit trail (who did what, when, why, the outcome, the hold), newest first.
  function updateAudit(job) {
    var table = document.getElementById("audit-" + job.name);
    if (!table) { return; }
    var body = table.tBodies[0];
    while (body.firstChild) { body.removeChild(body.firstChild); }
    (job.audit || []).slice().reverse().forEach(function (entry) {
      var row = document.createElement("tr");
      row.className = "outcome-" + String(entry.outcome || "").split(":")[0];
      var action = entry.action + (entry.dry_run ? " (dry run)" : "") +
        (entry.source && entry.source !== "airflow" ? " [" + entry.source + "]" : "");
      [entry.at, entry.by, action, shown(entry.reason), entry.outcome, shown(entry.hold_before),
        shown(entry.hold_after)].forEach(function (text) {
        var cell = document.createElement("td");
        cell.textContent = text;
        row.appendChild(cell);
      });
      body.appendChild(row);
    });
    table.hidden = !(job.audit && job.audit.length);
  }

  // The hold (who, when, why), the restart backoff, the data loss and the driver-log link of a
  // job's section.
  function updateSection(job) {
    var section = document.getElementById("job-" + job.name);
    if (!section) { return; }
    var hold = section.querySelector(".hold");
    if (hold) {
      hold.hidden = !job.hold;
      var text = hold.querySelector(".hold-text");
      if (job.hold && text) {
        text.textContent = "Held by " + (job.hold.by || "unknown") + " at " + (job.hold.at || "?") + ": " +
          (job.hold.reason || "no reason given") + ".";
      }
    }
    var version = section.querySelector(".version");
    if (version) {
      version.hidden = !job.version;
      var versionText = version.querySelector(".version-text");
      if (versionText) { versionText.textContent = job.version ? job.version.text : ""; }
    }
    var backoff = section.querySelector(".backoff");
    if (backoff) {
      backoff.hidden = !job.restart_backoff;
      backoff.textContent = job.restart_backoff ? job.restart_backoff.text : "";
    }
    var loss = section.querySelector(".data-loss");
    if (loss) {
      loss.hidden = !job.data_loss;
      var list = loss.querySelector(".data-loss-lines");
      if (list) {
        list.textContent = "";
        (job.data_loss || []).forEach(function (line) {
          var item = document.createElement("li");
          item.textContent = line;
          list.appendChild(item);
        });
      }
    }
    var backlog = section.querySelector(".backlog");
    if (backlog) {
      backlog.hidden = !(job.backlog_lines && job.backlog_lines.length);
      var lines = backlog.querySelector(".backlog-lines");
      if (lines) {
        lines.textContent = "";
        (job.backlog_lines || []).forEach(function (line) {
          var item = document.createElement("li");
          item.textContent = line;
          lines.appendChild(item);
        });
      }
    }
    var log = section.querySelector(".driver-log");
    if (log) { log.hidden = !job.driver_log; }
  }

  function refresh() {
    var sections = document.querySelectorAll("section.job");
    var requests = Array.prototype.map.call(sections, function (section) {
      var name = section.getAttribute("data-job");
      return fetch(base + "/api/jobs/" + encodeURIComponent(name), { credentials: "same-origin" })
        .then(function (response) { return response.ok ? response.json() : null; })
        .then(function (job) { if (job) { drawJob(job); updateRow(job); updateSection(job); updateDeltaTables(job); updateAudit(job); } })
        .catch(function () { /* keep the last drawing; the next refresh tries again */ });
    });
    Promise.all(requests).then(function () {
      document.getElementById("updated").textContent = "Updated " + new Date().toLocaleTimeString() + ".";
    });
  }

  var initial = JSON.parse(document.getElementById("initial-data").textContent || "{\"jobs\": []}");
  initial.jobs.forEach(drawJob);
  document.body.setAttribute("data-charts-ready", "true");
  window.setInterval(refresh, refreshSeconds * 1000);
})();
