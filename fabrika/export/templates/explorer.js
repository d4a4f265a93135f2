// fabrika run explorer: one UI for the offline page (rows in the page's JSON block) and for
// `fabrika browse` (rows paged from the run's shards over /api). Every value the model wrote is
// inserted as text (textContent), never as HTML.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("fabrika-samples").textContent);
  var summary = data.summary || {stages: {}, browsable: [], gates: {}, versions: {}};
  var list = document.getElementById("samples");
  var PAGE = data.page_size || 50;
  var SHOWN_FIELDS_SKIP = {
    _stage: 1, _group: 1, _reason: 1, _gate: 1, _threshold: 1, _scores: 1, _scoped: 1, _requests: 1, _lineage: 1,
    id: 1, status: 1, reason: 1, raw_excerpt: 1, dialogue: 1, prompt: 1,
    completion: 1, tools: 1, messages: 1, plan: 1, spec: 1, verifier_results: 1, library_results: 1,
    constraints: 1, library_constraints: 1, ground_truth: 1, response: 1, verifiers: 1, meta: 1
  };

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function parse(value) {
    if (typeof value !== "string") return value;
    var t = value.trim();
    if (!(t.startsWith("{") || t.startsWith("["))) return value;
    try { return JSON.parse(t); } catch (e) { return value; }
  }
  function jsonBlock(title, value, open) {
    var d = el("details");
    if (open) d.open = true;
    d.appendChild(el("summary", null, title));
    d.appendChild(el("pre", "json", typeof value === "string" ? value : JSON.stringify(value, null, 1)));
    return d;
  }
  function badge(cls, text) { return el("span", "badge " + cls, text); }

  function callText(c) {
    var f = c.function || c;
    var args = f.arguments;
    if (typeof args !== "string") args = JSON.stringify(args);
    return "→ " + (f.name || "?") + "(" + (args || "") + ")";
  }
  function message(m, isCompletion) {
    var role = m.role || "?";
    var div = el("div", "msg " + role + (isCompletion ? " target" : ""));
    div.dataset.role = role;
    var head = el("span", "role", role === "tool" && m.name ? "tool · " + m.name : role);
    div.appendChild(head);
    if (isCompletion) div.appendChild(badge("completion", "completion"));
    if (m.train) div.appendChild(badge("train", "train"));
    if (m.flag) {
      div.appendChild(badge("flag-" + m.flag, m.flag));
      div.dataset.flag = m.flag;
    }
    if (m.reasoning) div.appendChild(jsonBlock("hidden reasoning", m.reasoning, false));
    if (m.content) div.appendChild(el("div", "content", m.content));
    (m.tool_calls || []).forEach(function (c) { div.appendChild(el("div", "call", callText(c))); });
    return div;
  }
  function chat(messages, isCompletion) {
    var box = el("div", "chat");
    (Array.isArray(messages) ? messages : []).forEach(function (m) { box.appendChild(message(m, isCompletion)); });
    return box;
  }
  function toolsBlock(tools) {
    tools = parse(tools);
    if (!Array.isArray(tools) || !tools.length) return null;
    var names = tools.map(function (t) { return ((t.function || t).name) || "?"; });
    return jsonBlock("tools the assistant saw (" + tools.length + "): " + names.join(", "), tools, false);
  }
  function constraintsBlock(list) {
    list = parse(list);
    if (!Array.isArray(list) || !list.length) return null;
    var wrap = el("div");
    wrap.appendChild(el("b", null, "constraints"));
    var ul = el("ul", "constraints");
    list.forEach(function (c) { ul.appendChild(el("li", null, c.text || c.id || JSON.stringify(c))); });
    wrap.appendChild(ul);
    return wrap;
  }
  function verdictsBlock(results, title) {
    results = parse(results);
    if (!Array.isArray(results) || !results.length) return null;
    var wrap = el("div");
    wrap.appendChild(el("b", null, title));
    var t = el("table", "verdicts");
    var head = el("tr");
    ["verifier", "verdict", "accuracy", "status"].forEach(function (h) { head.appendChild(el("th", null, h)); });
    t.appendChild(head);
    results.forEach(function (r) {
      var tr = el("tr");
      var passed = r.passed === true || r.passed === "true";
      tr.appendChild(el("td", null, r.sample_index !== undefined ? "#" + r.sample_index : (r.id || r.library_id || "?")));
      tr.appendChild(el("td", passed ? "verdict-pass" : "verdict-fail", passed ? "pass" : "fail"));
      tr.appendChild(el("td", null, r.accuracy !== undefined ? r.accuracy : ""));
      tr.appendChild(el("td", null, r.status !== undefined ? r.status : ""));
      t.appendChild(tr);
    });
    wrap.appendChild(t);
    return wrap;
  }
  var INTERNAL = {_stage: 1, _group: 1, _reason: 1, _gate: 1, _threshold: 1, _scores: 1, _scoped: 1, _requests: 1,
                  _lineage: 1};
  function fieldsBlock(row, used) {
    var t = el("table", "fields");
    var n = 0;
    Object.keys(row).forEach(function (k) {
      if (INTERNAL[k] || used[k]) return;
      var v = row[k];
      if (typeof v === "object") v = JSON.stringify(v);
      var tr = el("tr");
      tr.appendChild(el("th", null, k));
      tr.appendChild(el("td", null, String(v).length > 400 ? String(v).slice(0, 400) + "…" : v));
      t.appendChild(tr);
      n += 1;
    });
    return n ? t : null;
  }
  function scoresBlock(scores) {
    if (!scores) return null;
    var wrap = el("div", "scores");
    wrap.appendChild(el("b", null, "scores"));
    var t = el("table", "fields");
    Object.keys(scores).forEach(function (scorer) {
      var tr = el("tr");
      tr.appendChild(el("th", null, scorer));
      var parts = [];
      Object.keys(scores[scorer]).forEach(function (k) {
        var v = scores[scorer][k];
        parts.push(k + "=" + (typeof v === "object" ? JSON.stringify(v) : v));
      });
      tr.appendChild(el("td", null, parts.join(" · ")));
      t.appendChild(tr);
    });
    wrap.appendChild(t);
    return wrap;
  }
  // ---- each row's LLM requests: its own item's, and (a click away) those of the rows it was made from ----
  function getJSON(url) {
    return fetch(url).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(t); });
      return r.json();
    });
  }
  function fullRequest(key) {
    if (data.mode === "server") return getJSON("api/request?key=" + encodeURIComponent(key));
    var got = (data.bodies || {})[key];
    return Promise.resolve(got || {key: key, request: null, answer: null, missing: true});
  }
  function fullBlock(full) {
    var box = el("div", "full-request");
    if (full.missing) {
      box.appendChild(el("div", "note", "the full body is not in this page (size limit): `fabrika browse RUN` opens it"));
      return box;
    }
    var req = full.request;
    if (!req) {
      box.appendChild(el("div", "note", "the request's body was not recorded (answered from a cache another run filled, or a run before request logs)"));
    } else {
      box.appendChild(el("div", "head", "messages sent (" + req.messages.length + ")"));
      box.appendChild(chat(req.messages, false));
      add(box, toolsBlock(req.tools));
      var settings = {};
      Object.keys(req).forEach(function (k) { if (k !== "messages" && k !== "tools") settings[k] = req[k]; });
      box.appendChild(jsonBlock("settings sent", settings, false));
    }
    var ans = full.answer;
    if (ans && ans.choices) {
      box.appendChild(el("div", "head", "answer" + (ans.choices.length > 1 ? "s (" + ans.choices.length + ")" : "")));
      box.appendChild(chat(ans.choices.map(function (c) {
        return {role: "assistant", content: c.content, tool_calls: c.tool_calls, reasoning: c.reasoning};
      }), true));
    } else {
      box.appendChild(el("div", "note", "no stored answer (a failed request, or the cache no longer holds it)"));
    }
    return box;
  }
  function requestRow(t, e, n) {
    var tr = el("tr", "req" + (e.error ? " failed" : ""));
    tr.dataset.key = e.key;
    tr.dataset.cached = e.cached ? "cached" : "fresh";
    tr.dataset.attempts = e.attempts;
    tr.dataset.endpoint = e.endpoint || "";
    [String(n), e.tag, (e.model || "?") + " · " + (e.backend || "?"), e.cached ? "cache hit" : "fresh",
     String(e.attempts), e.endpoint || (e.cached ? "(cache)" : "—"),
     e.prompt_tokens + " / " + e.completion_tokens].forEach(function (v) { tr.appendChild(el("td", null, v)); });
    t.appendChild(tr);
    var more = el("tr", "req-detail");
    var td = el("td");
    td.colSpan = 7;
    var places = e.endpoints || [];
    (e.errors || []).forEach(function (err, j) {
      var last = e.error && j === e.errors.length - 1;
      var at = places[j] ? " at " + places[j] : "";
      td.appendChild(el("div", "attempt-error", (last ? "final error" + at + ": " : "attempt " + (j + 1) + " failed" + at + ": ") + err));
    });
    if (places.length && !e.error && places[places.length - 1]) {
      td.appendChild(el("div", "attempt-ok", "attempt " + places.length + " answered by " + places[places.length - 1]));
    }
    if (e.sent) td.appendChild(el("div", "sent", "sent · " + e.sent));
    if (e.answer) td.appendChild(el("div", "answer", "answer · " + e.answer));
    if (e.recorded || data.mode === "server") {
      var b = el("button", "open-request", "full request");
      b.type = "button";
      b.addEventListener("click", function () {
        b.disabled = true;
        fullRequest(e.key).then(function (full) { td.appendChild(fullBlock(full)); b.remove(); })
          .catch(function (err) { td.appendChild(el("div", "note", "error: " + err.message)); });
      });
      td.appendChild(b);
    }
    more.appendChild(td);
    t.appendChild(more);
  }
  function renderSteps(box, row, steps) {
    while (box.firstChild) box.removeChild(box.firstChild);
    if (!steps.length) box.appendChild(el("div", "note", "no LLM requests recorded for this row or the rows it was made from"));
    steps.forEach(function (step) {
      var s = el("div", "step");
      s.dataset.stage = step.stage;
      if (step.shared) s.dataset.shared = "1";
      s.appendChild(el("div", "head", step.shared
        ? step.stage + " · the stage's shared requests (made for the whole stage, not for one row) · " +
          step.requests.length + " request(s)"
        : step.stage + (step.row !== row.id ? " · made from row " + step.row : "") +
          " · item " + step.item + " · " + step.requests.length + " request(s)"));
      var t = el("table", "reqs");
      var h = el("tr");
      ["#", "role", "model · backend", "cache", "attempts", "endpoint", "tokens (prompt / completion)"].forEach(function (x) { h.appendChild(el("th", null, x)); });
      t.appendChild(h);
      step.requests.forEach(function (e, j) { requestRow(t, e, j + 1); });
      s.appendChild(t);
      box.appendChild(s);
    });
  }
  function requestsBlock(row) {
    var steps = row._requests || [];
    if (!steps.length && !row._lineage) return null;
    var n = 0;
    steps.forEach(function (s) { n += s.requests.length; });
    var d = el("details", "llm-requests");
    d.appendChild(el("summary", null, "LLM requests (" + n + (row._lineage ? "; the rows it was made from: one click" : "") + ")"));
    var box = el("div", "steps");
    renderSteps(box, row, steps);
    d.appendChild(box);
    if (row._lineage && data.mode === "server") {
      var b = el("button", "lineage", "with the requests of the rows it was made from");
      b.type = "button";
      b.addEventListener("click", function () {
        b.disabled = true;
        getJSON("api/requests?stage=" + encodeURIComponent(row._stage) + "&id=" + encodeURIComponent(row.id))
          .then(function (res) { renderSteps(box, row, res.steps); b.remove(); d.dataset.lineage = "loaded"; })
          .catch(function (err) { box.appendChild(el("div", "note", "error: " + err.message)); });
      });
      d.insertBefore(b, box);
    }
    return d;
  }
  function add(parent, child) { if (child) parent.appendChild(child); }
  function isText(v) { return typeof v === "string" && v.length > 0; }

  var GROUP_CLASS = {"kept": "kept", "ok": "ok", "gate-dropped": "dropped", "rejected": "rejected",
                     "passed over": "passed", "not in version": "orphan"};
  function card(row) {
    var group = row._group;
    var used = {};
    function use(k) { used[k] = 1; return row[k]; }
    var c = el("div", "card " + (GROUP_CLASS[group] || "passed"));
    c.dataset.stage = row._stage;
    c.dataset.group = group;
    c.dataset.reason = row._reason || row._gate || "";
    c.dataset.id = row.id;
    var head = el("div", "head");
    head.appendChild(el("span", "stage", row._stage));
    head.appendChild(badge("group " + (GROUP_CLASS[group] || ""), group));
    if (row.lang) head.appendChild(el("span", null, "lang " + row.lang));
    if (row.target_type) head.appendChild(el("span", null, row.target_type));
    head.appendChild(el("span", "rowid", use("id")));
    c.appendChild(head);
    if (row._gate) {
      var th = row._threshold;
      c.appendChild(el("div", "gate", "dropped by gate " + row._gate +
        (th !== undefined && th !== null ? " (threshold: " + (typeof th === "object" ? JSON.stringify(th) : th) + ")" : "")));
    }
    if (row._scoped) c.appendChild(el("div", "scoped", "in the version; left out of export: " + row._scoped));
    use("status");
    if (isText(use("reason"))) c.appendChild(el("div", "reason", row.reason));
    if (isText(use("raw_excerpt"))) {
      c.appendChild(el("div", "head", "raw model answer (excerpt)"));
      c.appendChild(el("div", "raw", row.raw_excerpt));
    }
    var dialogue = parse(row.dialogue);
    if (dialogue && typeof dialogue === "object") {
      use("dialogue");
      if (group === "rejected") c.appendChild(el("div", "head", "transcript up to the rejection"));
      add(c, chat(dialogue.messages));
      add(c, toolsBlock(dialogue.tools));
    }
    var prompt = parse(row.prompt), completion = parse(row.completion);
    if (Array.isArray(prompt) || Array.isArray(completion)) {
      use("prompt"); use("completion"); use("tools");
      add(c, chat(prompt, false));
      add(c, chat(completion, true));
      add(c, toolsBlock(row.tools));
    } else {
      if (isText(prompt)) { use("prompt"); add(c, chat([{role: "user", content: prompt}], false)); }
      if (isText(completion)) { use("completion"); add(c, chat([{role: "assistant", content: completion}], true)); }
    }
    var msgs = parse(row.messages);
    if (Array.isArray(msgs)) {
      use("messages");
      add(c, chat(msgs, false));
      if (isText(row.response)) { use("response"); add(c, chat([{role: "assistant", content: row.response}], true)); }
    }
    if (isText(row.user) && !used.prompt) { use("user"); add(c, chat([{role: "user", content: row.user}], false)); }
    var gt = parse(row.ground_truth);
    var cons = row.constraints || (gt && gt.constraints);
    if (constraintsBlock(cons)) { use("constraints"); add(c, constraintsBlock(cons)); }
    if (constraintsBlock(row.library_constraints)) { use("library_constraints"); add(c, constraintsBlock(row.library_constraints)); }
    if (verdictsBlock(row.verifier_results, "")) { use("verifier_results"); add(c, verdictsBlock(row.verifier_results, "verifier verdicts")); }
    if (verdictsBlock(row.library_results, "")) { use("library_results"); add(c, verdictsBlock(row.library_results, "library verifier verdicts")); }
    if (gt && typeof gt === "object" && !gt.constraints) { use("ground_truth"); add(c, jsonBlock("ground truth", gt, false)); }
    ["plan", "spec", "verifiers", "meta", "teacher_answers"].forEach(function (k) {
      if (row[k]) { use(k); add(c, jsonBlock(k === "spec" ? "tool" : k.replace("_", " "), parse(row[k]), false)); }
    });
    add(c, scoresBlock(row._scores));
    add(c, requestsBlock(row));
    add(c, fieldsBlock(row, used));
    return c;
  }

  // ---- search over values, never keys ----------------------------------------------------
  function valuesText(v, out) {
    if (typeof v === "string") {
      var t = v.trim();
      if ((t.charAt(0) === "{" || t.charAt(0) === "[") && (t.slice(-1) === "}" || t.slice(-1) === "]")) {
        try { valuesText(JSON.parse(t), out); return; } catch (e) { /* not JSON: plain text */ }
      }
      out.push(v);
    } else if (Array.isArray(v)) {
      v.forEach(function (x) { valuesText(x, out); });
    } else if (v && typeof v === "object") {
      Object.keys(v).forEach(function (k) { valuesText(v[k], out); });
    } else if (v !== null && v !== undefined) {
      out.push(String(v));
    }
  }
  function searchText(row) {
    if (row.__text === undefined) {
      var out = [];
      Object.keys(row).forEach(function (k) {
        if (k.charAt(0) === "_" || k === "status" || k === "llm_backend") return;
        valuesText(row[k], out);
      });
      Object.defineProperty(row, "__text", {value: out.join(" ").toLowerCase(), enumerable: false});
    }
    return row.__text;
  }

  // ---- data sources: the page's own rows, or the browse server ----------------------------
  var rows = data.samples || [];
  var diffs = data.diffs || {};
  function offlinePage(q) {
    var ids = null;
    if (q.vs) {
      var d = (diffs[q.vs] || {})[q.stage] || {};
      ids = {};
      (d[q.group === "removed" ? "removed" : "added"] || []).forEach(function (i) { ids[i] = 1; });
    }
    var needle = (q.q || "").trim().toLowerCase();
    var hit = rows.filter(function (r) {
      if (r._stage !== q.stage) return false;
      if (ids) { if (!ids[r.id]) return false; } else if (q.group && r._group !== q.group) return false;
      if (q.reason && r._gate !== q.reason && r._reason !== q.reason) return false;
      return !needle || searchText(r).indexOf(needle) >= 0;
    });
    return Promise.resolve({total: hit.length, rows: hit.slice(q.offset, q.offset + PAGE)});
  }
  function serverPage(q) {
    var params = new URLSearchParams();
    Object.keys(q).forEach(function (k) { if (q[k] !== "" && q[k] !== null && q[k] !== undefined) params.set(k, q[k]); });
    params.set("limit", PAGE);
    return fetch("api/rows?" + params.toString()).then(function (r) {
      if (!r.ok) return r.text().then(function (t) { throw new Error(t); });
      return r.json();
    });
  }
  var fetchPage = data.mode === "server" ? serverPage : offlinePage;

  // ---- counts: every number is one of `fabrika status`'s (data-count names where) ----------
  function count(path, n) {
    var s = el("span", "count", n === undefined || n === null ? "?" : n);
    s.dataset.count = path;
    return s;
  }
  function cell(tr, child) { var td = el("td"); if (child) td.appendChild(child); tr.appendChild(td); return td; }
  function countsTable() {
    var box = document.getElementById("counts");
    var t = el("table", "counts");
    var head = el("tr");
    ["stage", "rows", "ok", "rejected / passed over (by reason)", "in the version", "gate-dropped (by gate, threshold)"]
      .forEach(function (h) { head.appendChild(el("th", null, h)); });
    t.appendChild(head);
    Object.keys(summary.stages).forEach(function (name) {
      var s = summary.stages[name];
      var tr = el("tr");
      var first = cell(tr);
      if (summary.browsable.indexOf(name) >= 0) {
        var a = el("a", "stage-link", name);
        a.href = "#";
        a.addEventListener("click", function (e) { e.preventDefault(); choose(name, "", ""); });
        first.appendChild(a);
      } else {
        first.appendChild(el("span", null, name));
        if (s.scores) first.appendChild(el("span", "note", " (scores joined onto " + s.scores.join(", ") + ")"));
      }
      cell(tr, count("stages/" + name + "/rows", s.rows));
      cell(tr, count("stages/" + name + "/ok", s.ok));
      var rej = cell(tr);
      Object.keys(s.rejected || {}).forEach(function (r) {
        var line = el("div", null, r + ": ");
        line.appendChild(count("stages/" + name + "/rejected/" + r, s.rejected[r]));
        rej.appendChild(line);
      });
      var g = summary.gates[name];
      var kept = cell(tr);
      if (g) kept.appendChild(count("gates/" + name + "/out", g.out));
      var drop = cell(tr);
      if (g) {
        Object.keys(g).forEach(function (k) {
          if (k.indexOf("dropped_") < 0 || !g[k]) return;
          var gate = k.slice(k.indexOf("dropped_") + 8), group = gate.split(".")[0];
          var th = (summary.thresholds[group] || {})[gate.split(".").slice(1).join(".")];
          var label = gate === "rejected" ? k.replace("dropped_rejected", "status not ok (the stage's or a scorer's)")
                                          : k.replace("dropped_", "");
          var line = el("div", null, label + (th !== undefined ? " (" + JSON.stringify(th) + ")" : "") + ": ");
          line.appendChild(count("gates/" + name + "/" + k, g[k]));
          drop.appendChild(line);
        });
      } else {
        Object.keys(s.gates || {}).forEach(function (k) {
          drop.appendChild(el("div", null, k + ": " + s.gates[k] + " (not read by the stages after it)"));
        });
      }
      t.appendChild(tr);
    });
    box.appendChild(t);
    var vt = el("p", "versions", "versions: ");
    Object.keys(summary.versions).forEach(function (v) {
      vt.appendChild(el("span", null, " " + v + (v === summary.version ? " (shown)" : "") + ": "));
      vt.appendChild(count("versions/" + v + "/rows", summary.versions[v].rows));
      vt.appendChild(el("span", null, " samples;"));
    });
    box.appendChild(vt);
  }

  // ---- controls and paging ----------------------------------------------------------------
  var fStage = document.getElementById("f-stage"), fGroup = document.getElementById("f-group"),
      fReason = document.getElementById("f-reason"), fVs = document.getElementById("f-vs"),
      fText = document.getElementById("f-text"), shown = document.getElementById("shown"),
      prev = document.getElementById("prev"), next = document.getElementById("next");
  var state = {stage: summary.browsable[0] || "", group: "", reason: "", vs: "", q: "", offset: 0};
  function option(select, value, text) {
    var o = el("option", null, text);
    o.value = value;
    select.appendChild(o);
  }
  function clear(select) { while (select.firstChild) select.removeChild(select.firstChild); }
  function fillStage() {
    clear(fStage);
    summary.browsable.forEach(function (s) { option(fStage, s, s + " (" + summary.stages[s].rows + ")"); });
    fStage.value = state.stage;
  }
  function fillFilters() {
    var s = summary.stages[state.stage] || {};
    clear(fGroup);
    if (state.vs) {
      option(fGroup, "added", "added in " + summary.version + " vs " + state.vs);
      option(fGroup, "removed", "removed in " + summary.version + " vs " + state.vs);
      if (state.group !== "removed") state.group = "added";
    } else {
      option(fGroup, "", "all (" + s.rows + ")");
      Object.keys(s.groups || {}).forEach(function (g) { option(fGroup, g, g + " (" + s.groups[g] + ")"); });
      if (state.group === "added" || state.group === "removed") state.group = "";
    }
    fGroup.value = state.group;
    clear(fReason);
    option(fReason, "", "any");
    Object.keys(s.gates || {}).forEach(function (g) { option(fReason, g, "gate " + g + " (" + s.gates[g] + ")"); });
    Object.keys(s.rejected || {}).forEach(function (r) { option(fReason, r, r + " (" + s.rejected[r] + ")"); });
    fReason.value = state.reason;
    clear(fVs);
    option(fVs, "", "no diff");
    Object.keys(summary.versions).forEach(function (v) { if (v !== summary.version) option(fVs, v, "diff vs " + v); });
    fVs.value = state.vs;
  }
  var ticket = 0;
  function load() {
    var mine = ++ticket;
    var q = {stage: state.stage, group: state.group, reason: state.reason, vs: state.vs, q: state.q, offset: state.offset};
    shown.textContent = "loading…";
    return fetchPage(q).then(function (res) {
      if (mine !== ticket) return;
      while (list.firstChild) list.removeChild(list.firstChild);
      res.rows.forEach(function (r) { list.appendChild(card(r)); });
      var a = res.total ? state.offset + 1 : 0, b = state.offset + res.rows.length;
      var held = data.complete === false ? " (this page holds a sample; `fabrika browse RUN` pages through every row)" : "";
      shown.textContent = "rows " + a + "–" + b + " of " + res.total + held;
      shown.dataset.total = res.total;
      prev.disabled = state.offset <= 0;
      next.disabled = b >= res.total;
      document.body.dataset.loaded = String(mine);
    }).catch(function (e) { shown.textContent = "error: " + e.message; });
  }
  function choose(stage, group, reason) {
    state.stage = stage; state.group = group; state.reason = reason; state.offset = 0;
    fillStage(); fillFilters(); load();
  }
  fStage.addEventListener("change", function () { choose(fStage.value, "", ""); });
  fGroup.addEventListener("change", function () { state.group = fGroup.value; state.offset = 0; load(); });
  fReason.addEventListener("change", function () { state.reason = fReason.value; state.offset = 0; load(); });
  fVs.addEventListener("change", function () { state.vs = fVs.value; state.offset = 0; fillFilters(); load(); });
  var timer = null;
  fText.addEventListener("input", function () {
    clearTimeout(timer);
    timer = setTimeout(function () { state.q = fText.value.trim(); state.offset = 0; load(); }, data.mode === "server" ? 300 : 0);
  });
  prev.addEventListener("click", function () { state.offset = Math.max(0, state.offset - PAGE); load(); });
  next.addEventListener("click", function () { state.offset += PAGE; load(); });
  countsTable();
  fillStage();
  fillFilters();
  load();
})();
