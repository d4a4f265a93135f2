// fabrika report: the sample browser. Data comes from the JSON block in the page; every value
// the model wrote is inserted as text (textContent), never as HTML.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("fabrika-samples").textContent);
  var rows = data.samples || [];
  var list = document.getElementById("samples");
  var SHOWN_FIELDS_SKIP = {
    _stage: 1, _group: 1, _reason: 1, id: 1, status: 1, reason: 1, raw_excerpt: 1, dialogue: 1, prompt: 1,
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
  function fieldsBlock(row) {
    var t = el("table", "fields");
    var n = 0;
    Object.keys(row).forEach(function (k) {
      if (SHOWN_FIELDS_SKIP[k]) return;
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
  function add(parent, child) { if (child) parent.appendChild(child); }

  function card(row) {
    var group = row._group;
    var c = el("div", "card " + (group === "kept" ? "kept" : group === "rejected" ? "rejected" : "passed"));
    c.dataset.stage = row._stage;
    c.dataset.group = group;
    c.dataset.reason = row._reason || "";
    c.dataset.lang = row.lang || "";
    c.dataset.search = JSON.stringify(row).toLowerCase();
    var head = el("div", "head");
    head.appendChild(el("span", "stage", row._stage));
    head.appendChild(el("span", null, group));
    if (row.lang) head.appendChild(el("span", null, "lang " + row.lang));
    if (row.target_type) head.appendChild(el("span", null, row.target_type));
    head.appendChild(el("span", "rowid", row.id));
    c.appendChild(head);
    if (row.reason) c.appendChild(el("div", "reason", row.reason));
    if (row.raw_excerpt) {
      c.appendChild(el("div", "head", "raw model answer (excerpt)"));
      c.appendChild(el("div", "raw", row.raw_excerpt));
    }
    var dialogue = parse(row.dialogue);
    if (dialogue && typeof dialogue === "object") {
      add(c, chat(dialogue.messages));
      add(c, toolsBlock(dialogue.tools));
    }
    var prompt = parse(row.prompt), completion = parse(row.completion);
    if (Array.isArray(prompt) || Array.isArray(completion)) {
      add(c, chat(prompt, false));
      add(c, chat(completion, true));
      add(c, toolsBlock(row.tools));
    }
    var msgs = parse(row.messages);
    if (Array.isArray(msgs)) {
      add(c, chat(msgs, false));
      if (row.response) add(c, chat([{role: "assistant", content: row.response}], true));
    }
    var gt = parse(row.ground_truth);
    add(c, constraintsBlock(row.constraints || (gt && gt.constraints)));
    add(c, constraintsBlock(row.library_constraints));
    add(c, verdictsBlock(row.verifier_results, "verifier verdicts"));
    add(c, verdictsBlock(row.library_results, "library verifier verdicts"));
    if (gt && typeof gt === "object" && !gt.constraints) add(c, jsonBlock("ground truth", gt, false));
    if (row.plan) add(c, jsonBlock("plan", parse(row.plan), false));
    if (row.spec) add(c, jsonBlock("tool", parse(row.spec), false));
    if (row.verifiers) add(c, jsonBlock("verifiers", parse(row.verifiers), false));
    if (row.meta) add(c, jsonBlock("meta", parse(row.meta), false));
    add(c, fieldsBlock(row));
    return c;
  }

  function fill(select, values) {
    values.forEach(function (v) {
      var o = el("option", null, v);
      o.value = v;
      select.appendChild(o);
    });
  }
  function uniq(key) {
    var seen = {};
    rows.forEach(function (r) { if (r[key]) seen[r[key]] = 1; });
    return Object.keys(seen).sort();
  }
  var fStage = document.getElementById("f-stage"), fGroup = document.getElementById("f-group"),
      fReason = document.getElementById("f-reason"), fLang = document.getElementById("f-lang"),
      fText = document.getElementById("f-text"), shown = document.getElementById("shown");
  var stageOrder = data.stages || uniq("_stage");
  fill(fStage, stageOrder);
  fill(fReason, uniq("_reason"));
  fill(fLang, uniq("lang"));

  // one block per (stage, kept | reason): a heading with how many rows the stage has there, then the cards
  var counts = data.counts || {};
  var blocks = [], cards = [], block = null, blockKey = null;
  rows.forEach(function (r) {
    var key = r._stage + "\u0000" + r._group + "\u0000" + (r._reason || "");
    if (key !== blockKey) {
      blockKey = key;
      block = el("div", "block");
      var n = (counts[r._stage] || {})[r._group === "kept" ? "ok" : r._reason];
      var title = r._stage + " — " + (r._group === "kept" ? "kept" : r._group + ": " + r._reason);
      block.appendChild(el("h3", "block-title", title + (n !== undefined ? " (" + n + " in the stage)" : "")));
      list.appendChild(block);
      blocks.push(block);
    }
    var c = card(r);
    block.appendChild(c);
    cards.push(c);
  });

  function apply() {
    var s = fStage.value, g = fGroup.value, r = fReason.value, l = fLang.value;
    var q = fText.value.trim().toLowerCase();
    var n = 0;
    cards.forEach(function (c) {
      var ok = (!s || c.dataset.stage === s) && (!g || c.dataset.group === g) && (!r || c.dataset.reason === r) &&
               (!l || c.dataset.lang === l) && (!q || c.dataset.search.indexOf(q) >= 0);
      c.classList.toggle("hidden", !ok);
      if (ok) n += 1;
    });
    blocks.forEach(function (b) { b.classList.toggle("hidden", !b.querySelector(".card:not(.hidden)")); });
    shown.textContent = n + " of " + cards.length + " sampled rows shown";
  }
  [fStage, fGroup, fReason, fLang].forEach(function (e) { e.addEventListener("change", apply); });
  fText.addEventListener("input", apply);
  apply();
})();
