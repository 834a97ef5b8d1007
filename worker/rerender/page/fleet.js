// The fleet page's script: draws the summary, the chart of jobs over time, the tables
// and each session's prompts from the JSON in #fleet-data. Everything that came from
// jobs is set as text (textContent), never as markup.
(function () {
  "use strict";

  const D = JSON.parse(document.getElementById("fleet-data").textContent);
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = ["#0969da", "#d4a72c", "#1a7f37", "#cf222e", "#8250df", "#bc4c00", "#57606a", "#bf3989"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) node.append(typeof child === "object" ? child : String(child));
    return node;
  }
  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs)) node.setAttribute(key, String(value));
    for (const child of children) node.append(child);
    return node;
  }
  const fmt = (n) => (n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US"));

  function header() {
    const a = D.archive, w = a.window;
    $("source").textContent = `stream ${a.stream} at ${a.broker}, answered from ${w.since}` +
      (w.until ? ` to ${w.until}` : " to the stream's end") +
      (a.end_offset === null ? "" : ` (offsets to ${a.end_offset})`);
  }

  function cards() {
    const t = D.totals, share = t.cacheable.share;
    const items = [
      ["jobs", "Jobs", fmt(t.records)], ["errors", "Errors", fmt(t.errors)],
      ["sessions", "Sessions", fmt(t.sessions)], ["unreadable", "Unreadable records", fmt(t.unreadable)],
      ["trimmed", "Trimmed", `${fmt(t.trimmed)} of ${fmt(t.budgeted)} budgeted`],
      ["cacheable", "Cacheable share", share === null ? "–" : (100 * share).toFixed(1) + "%"],
    ];
    for (const [id, label, value] of items) {
      $("cards").append(el("div", { class: "card", id: "card-" + id },
        el("div", { class: "label", text: label }), el("div", { class: "value", text: value })));
    }
    if (D.prompts_left_out) {
      $("notes").append(el("li", { text: `${fmt(D.prompts_left_out)} prompts are counted but not shown (the page keeps the latest sessions' prompts)` }));
    }
    for (const bad of D.archive.bad_records.slice(0, 10)) {
      $("notes").append(el("li", { text: `offset ${bad.offset}: unreadable record: ${bad.reason}` }));
    }
  }

  function timeline() {
    const by = $("series").value, buckets = D.timeline.buckets;
    const names = [...new Set(buckets.flatMap((b) => Object.keys(b[by])))].sort();
    const colour = (name) => COLOURS[names.indexOf(name) % COLOURS.length];
    const max = Math.max(1, ...buckets.map((b) => Object.values(b[by]).reduce((x, y) => x + y, 0)));
    // Buckets without records are absent from the data: place each by its slot.
    const slots = buckets.length ? buckets[buckets.length - 1].slot + 1 : 1;
    const W = 760, H = 180, bar = Math.min(40, W / slots);
    const chart = svg("svg", { viewBox: `0 0 ${W} ${H + 20}`, width: W, height: H + 20, role: "img", "aria-label": "jobs over time by " + by });
    buckets.forEach((b) => {
      const i = b.slot;
      let y = H;
      for (const name of names) {
        const n = b[by][name] || 0;
        if (!n) continue;
        const h = (H * n) / max;
        y -= h;
        const rect = svg("rect", { x: i * bar + 1, y, width: Math.max(1, bar - 2), height: h, fill: colour(name), "data-name": name, "data-count": n });
        rect.append(svg("title", {}, `${b.start} ${name}: ${n}`));
        chart.append(rect);
      }
    });
    if (buckets.length) {
      chart.append(svg("text", { x: 0, y: H + 15, "font-size": 11, fill: "currentColor" }, buckets[0].start));
    }
    $("timeline").replaceChildren(chart);
    $("legend").replaceChildren(...names.map((name) => el("span", {}, el("i", { style: null }), name)));
    $("legend").querySelectorAll("i").forEach((node, i) => { node.style.background = colour(names[i]); });
  }

  function rows(id, entries) {
    const body = $(id).querySelector("tbody");
    for (const cells of entries) {
      body.append(el("tr", { "data-key": cells[0] }, ...cells.map((c, i) => el("td", { class: i ? "num" : null, text: i ? fmt(c) : c }))));
    }
  }

  function tables() {
    rows("kinds", Object.entries(D.kinds).map(([kind, r]) => [kind, r.records, r.errors,
      r.prompt_chars.p50, r.prompt_chars.p95, r.prompt_chars.max,
      r.prompt_tokens.p50, r.prompt_tokens.p95, r.prompt_tokens.max]));
    rows("families", Object.entries(D.families));
    rows("errors", Object.entries(D.errors_by_code));
    rows("masked", Object.entries(D.masked_by_detector));
    rows("elisions", Object.entries(D.elisions_by_section));
  }

  function showSession(session, button) {
    for (const other of $("sessions").querySelectorAll("button")) other.setAttribute("aria-pressed", "false");
    button.setAttribute("aria-pressed", "true");
    const view = $("session");
    view.replaceChildren(el("h3", { text: `Session ${session.id}: ${fmt(session.records)} jobs` }));
    for (const p of session.prompts) {
      const box = el("div", { class: "prompt", "data-job": p.job_id },
        el("h3", { text: `${p.answered_at || ""} ${p.kind} ${p.job_id} (${p.status})` }));
      if (p.error) box.append(el("div", { class: "message", text: `error ${p.error.code}: ${p.error.message || ""}` }));
      for (const m of p.messages) {
        box.append(el("div", { class: "message" }, el("div", { class: "role", text: m.role }), el("pre", { text: m.content })));
      }
      view.append(box);
    }
  }

  function sessions() {
    for (const s of D.sessions) {
      const button = el("button", { type: "button", "aria-pressed": "false", "data-session": s.id,
        text: `${s.id} · ${fmt(s.records)} jobs · ${s.last || ""}` });
      button.addEventListener("click", () => showSession(s, button));
      $("sessions").append(el("li", {}, button));
    }
  }

  header();
  cards();
  timeline();
  $("series").addEventListener("change", timeline);
  tables();
  sessions();
  document.body.dataset.ready = "1";
})();
