// The drift page's script: draws the summary, the list of changes, errors and bad
// lines, and the diff of the selected change, from the JSON in #drift-data.
// Everything that came from jobs is set as text (textContent, text nodes), never as
// markup. Long lists are virtual: only the rows on screen exist in the document.
(function () {
  "use strict";

  const D = JSON.parse(document.getElementById("drift-data").textContent);
  const $ = (id) => document.getElementById(id);
  const SVG = "http://www.w3.org/2000/svg";
  const ROW = 54;
  const JOB_ROW = 24;
  const STATUSES = ["changed", "error", "bad"];

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "text") node.textContent = value;
      else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) {
      if (child === null || child === undefined || child === false) continue;
      node.append(typeof child === "object" ? child : String(child));
    }
    return node;
  }

  function svg(tag, attrs, ...children) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
      else node.setAttribute(key, String(value));
    }
    for (const child of children) node.append(child);
    return node;
  }

  const fmt = (n) => Number(n).toLocaleString("en-US");
  function pct(part, whole) {
    if (!whole) return "–";
    const share = 100 * part / whole;
    return (share > 0 && share < 1 ? share.toFixed(2) : share.toFixed(1)) + "%";
  }
  const plural = (n, one, many) => fmt(n) + " " + (n === 1 ? one : many || one + "s");

  // -- the data, indexed ------------------------------------------------------------

  const T = D.totals;
  const changeById = new Map(D.changes.map((c) => [c.id, c]));
  const errorById = new Map(D.errors.map((e) => [e.id, e]));
  const badByLine = new Map(D.bad_lines.map((b) => [String(b.line), b]));
  const bySignature = new Map();
  for (const c of D.changes) {
    if (!bySignature.has(c.signature)) bySignature.set(c.signature, []);
    bySignature.get(c.signature).push(c);
  }
  const kinds = Object.keys(D.by_kind);
  const errorJobs = T.error - T.bad_lines;

  const state = {
    statuses: new Set(STATUSES),
    kind: "",
    query: "",
    view: "unified",
    selected: null, // "change:<id>" | "error:<id>" | "bad:<line>"
    unfolded: new Set(),
    hunk: -1,
  };

  // -- header and summary -----------------------------------------------------------

  function header() {
    const files = $("files");
    files.append(
      el("span", { text: D.input }), " → ", el("span", { text: D.output }), " · ",
      plural(D.lines, "input line"), " ",
      el("span", { class: "badge " + (D.partial ? "partial" : "complete"), text: D.partial ? "partial: run interrupted" : "complete run" })
    );
  }

  function card(cls, label, value, sub, id) {
    return el("div", { class: "card " + cls, id: "card-" + id },
      el("div", { class: "label", text: label }),
      el("div", { class: "value", text: fmt(value) }),
      el("div", { class: "sub", text: sub || "" }));
  }

  function summary() {
    const compared = T.with_prior_messages;
    const jobs = T.records - T.bad_lines;
    const notCompared = T.ok - T.drift.same - T.drift.changed;
    $("cards").append(
      card("jobs", "Jobs", jobs, notCompared ? fmt(notCompared) + " without prior messages" : "all with prior messages", "jobs"),
      card("same", "Same", T.drift.same, pct(T.drift.same, compared) + " of compared", "same"),
      card("changed", "Changed", T.drift.changed, pct(T.drift.changed, compared) + " of compared · " + plural(D.changes.length, "distinct change"), "changed"),
      card("error", "Errors", errorJobs, Object.entries(D.job_errors_by_code).map(([c, n]) => c + " " + fmt(n)).join(", ") || "jobs that did not render", "errors"),
      card("bad", "Bad lines", T.bad_lines, T.blank_lines ? fmt(T.blank_lines) + " blank lines" : "input lines that are not jobs", "bad")
    );
    if (T.cacheable && T.cacheable.share !== null) {
      $("cards").after(el("p", { class: "meta cacheable", text: `Cacheable prefix: ${pct(T.cacheable.stable_tokens, T.cacheable.prompt_tokens)} of the new prompts' ${fmt(T.cacheable.prompt_tokens)} tokens (meta.cache).` }));
    }
    const notes = $("notes");
    for (const note of D.notes) notes.append(el("li", { text: note }));
    chart();
    kindsTable();
  }

  function segments(row) {
    const none = row.ok - row.drift_same - row.drift_changed;
    return [
      ["same", row.drift_same], ["changed", row.drift_changed], ["error", row.error], ["none", Math.max(0, none)],
    ];
  }

  const SEGMENT_NAMES = { same: "same", changed: "changed", error: "error", none: "not compared" };

  function chart() {
    const rows = kinds.map((k) => [k, D.by_kind[k]]).sort((a, b) => b[1].records - a[1].records);
    const labelW = 230, barW = 280, shareW = 120, rowH = 22;
    const height = Math.max(rowH, rows.length * rowH) + 4;
    const root = svg("svg", { viewBox: `0 0 ${labelW + barW + shareW} ${height}`, role: "img", "aria-label": "Drift by kind" });
    rows.forEach(([kind, row], i) => {
      const y = i * rowH + 2;
      const bar = svg("g", { class: "bar", tabindex: "0", role: "button", "data-kind": kind,
        onclick: () => setKind(kind, true),
        onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); setKind(kind, true); } } });
      const label = svg("text", { x: labelW - 8, y: y + 14, "text-anchor": "end", class: "label" });
      label.textContent = kind.length > 34 ? kind.slice(0, 33) + "…" : kind;
      bar.append(label);
      let x = labelW;
      for (const [name, n] of segments(row)) {
        if (!n) continue;
        const w = Math.max(1, barW * n / row.records);
        const rect = svg("rect", { x: x, y: y + 3, width: w, height: rowH - 8, class: "seg-" + name });
        const title = svg("title");
        title.textContent = `${kind}: ${fmt(n)} ${SEGMENT_NAMES[name]} (${pct(n, row.records)})`;
        rect.append(title);
        bar.append(rect);
        x += w;
      }
      const share = svg("text", { x: labelW + barW + 8, y: y + 14, class: "share" });
      share.textContent = row.drift_changed ? pct(row.drift_changed, row.drift_same + row.drift_changed + row.drift_error) + " changed" : "";
      bar.append(share);
      root.append(bar);
    });
    $("chart").append(root);
    for (const [name, label] of Object.entries(SEGMENT_NAMES)) {
      const swatch = svg("svg", { width: 10, height: 10 }, svg("rect", { width: 10, height: 10, class: "seg-" + name }));
      $("legend").append(el("span", null, swatch, label));
    }
  }

  function versionsOf(list, kind) {
    return list.filter((v) => kind === null || v.kind === kind);
  }

  // One version a line; with counts (as a tooltip when `counts` is "title").
  function versionCell(list, cls, counts) {
    const merged = new Map();
    for (const v of list) merged.set(v.template_version, (merged.get(v.template_version) || 0) + v.records);
    const entries = [...merged.entries()];
    const text = entries.map(([v, n]) => (entries.length > 1 && counts !== "title" ? `${v} (${fmt(n)})` : v)).join("\n");
    const title = entries.map(([v, n]) => `${v}: ${plural(n, "record")}`).join("\n");
    return el("td", { class: "version" + (cls || ""), text: text || "–", title: title || null });
  }

  function kindsTable() {
    const body = document.querySelector("#kinds tbody");
    const before = D.versions.before, after = D.versions.after;
    const sums = { records: 0, same: 0, changed: 0, error: 0, none: 0 };
    for (const kind of kinds) {
      const row = D.by_kind[kind];
      const none = Math.max(0, row.ok - row.drift_same - row.drift_changed);
      const b = versionsOf(before, kind), a = versionsOf(after, kind);
      const names = (list) => [...new Set(list.map((v) => v.template_version))].sort().join(" ");
      const moved = b.length && a.length && names(b) !== names(a);
      sums.records += row.records; sums.same += row.drift_same; sums.changed += row.drift_changed;
      sums.error += row.error; sums.none += none;
      body.append(el("tr", { "data-kind": kind },
        el("th", { scope: "row" }, el("a", { href: "#review", text: kind, onclick: (e) => { e.preventDefault(); setKind(kind, true); } })),
        el("td", { class: "num", text: fmt(row.records) }),
        el("td", { class: "num", text: fmt(row.drift_same) }),
        el("td", { class: "num", text: fmt(row.drift_changed) }),
        el("td", { class: "num", text: fmt(row.error) }),
        el("td", { class: "num", text: fmt(none) }),
        versionCell(b),
        versionCell(a, moved ? " moved" : "")));
    }
    body.append(el("tr", { class: "total" },
      el("td", { text: "all" }), el("td", { class: "num", text: fmt(sums.records) }),
      el("td", { class: "num", text: fmt(sums.same) }), el("td", { class: "num", text: fmt(sums.changed) }),
      el("td", { class: "num", text: fmt(sums.error) }), el("td", { class: "num", text: fmt(sums.none) }),
      versionCell(before, "", "title"),
      versionCell(after, "", "title")));
    const box = $("versions");
    if (!before.length) {
      box.append(el("p", { class: "muted" },
        "Template before: the input does not say which template version its prior messages were made with. ",
        "Keep the reply's ", el("code", { text: "meta" }), " beside each job (",
        el("code", { text: '{"job": …, "messages": …, "meta": {…}}' }), ") to see it here."));
    }
  }

  // -- the virtual list --------------------------------------------------------------

  class VirtualList {
    constructor(host, rowHeight, draw) {
      this.host = host;
      this.rowHeight = rowHeight;
      this.draw = draw;
      this.items = [];
      this.inner = el("div", { class: "vl-inner" });
      host.replaceChildren(this.inner);
      this.pending = false;
      host.addEventListener("scroll", () => this.schedule(), { passive: true });
      this.observer = window.ResizeObserver ? new ResizeObserver(() => this.schedule()) : null;
      if (this.observer) this.observer.observe(host);
    }
    destroy() {
      if (this.observer) this.observer.disconnect();
    }
    setItems(items) {
      this.items = items;
      this.inner.style.height = items.length * this.rowHeight + "px";
      this.render();
    }
    schedule() {
      if (this.pending) return;
      this.pending = true;
      requestAnimationFrame(() => { this.pending = false; this.render(); });
    }
    render() {
      const height = this.host.clientHeight || 600;
      const top = this.host.scrollTop;
      const first = Math.max(0, Math.floor(top / this.rowHeight) - 5);
      const last = Math.min(this.items.length, Math.ceil((top + height) / this.rowHeight) + 5);
      const rows = [];
      for (let i = first; i < last; i++) {
        const row = this.draw(this.items[i], i);
        row.classList.add("vl-row");
        row.style.top = i * this.rowHeight + "px";
        row.style.height = this.rowHeight + "px";
        rows.push(row);
      }
      this.inner.replaceChildren(...rows);
    }
    reveal(index) {
      const top = index * this.rowHeight;
      const host = this.host;
      if (top < host.scrollTop) host.scrollTop = top;
      else if (top + this.rowHeight > host.scrollTop + host.clientHeight) host.scrollTop = top + this.rowHeight - host.clientHeight;
      this.render();
    }
  }

  // -- filters and the list of items ----------------------------------------------------

  const list = new VirtualList($("list"), ROW, drawItem);
  let items = [];

  function matches(ids, query) {
    if (!query) return true;
    for (const [, id] of ids) if (id !== null && id.toLowerCase().includes(query)) return true;
    return false;
  }

  function buildItems() {
    const q = state.query.toLowerCase();
    const kindOk = (k) => !state.kind || k === state.kind;
    const out = [];
    let shown = { changed: 0, error: 0, bad: 0 };
    if (state.statuses.has("changed")) {
      const perKind = new Map();
      for (const c of D.changes) {
        if (!kindOk(c.kind) || !matches(c.ids, q)) continue;
        if (!perKind.has(c.kind)) perKind.set(c.kind, []);
        perKind.get(c.kind).push(c);
      }
      const ordered = [...perKind.entries()].sort((a, b) =>
        b[1].reduce((s, c) => s + c.jobs, 0) - a[1].reduce((s, c) => s + c.jobs, 0));
      for (const [kind, changes] of ordered) {
        const jobs = changes.reduce((s, c) => s + c.jobs, 0);
        out.push({ type: "head", text: `Changed · ${kind} · ${plural(changes.length, "change")} · ${plural(jobs, "job")}` });
        for (const c of changes) out.push({ type: "change", key: "change:" + c.id, ref: c });
        shown.changed += changes.length;
      }
    }
    if (state.statuses.has("error")) {
      const errors = D.errors.filter((e) => kindOk(e.kind) && matches(e.ids, q));
      if (errors.length) {
        out.push({ type: "head", text: `Errors · ${plural(errors.length, "distinct error")} · ${plural(errors.reduce((s, e) => s + e.jobs, 0), "job")}` });
        for (const e of errors) out.push({ type: "error", key: "error:" + e.id, ref: e });
      }
      shown.error = errors.length;
    }
    if (state.statuses.has("bad")) {
      const bad = D.bad_lines.filter((b) => kindOk(b.kind) && (!q || (b.job_id && b.job_id.toLowerCase().includes(q)) || String(b.line) === q));
      if (bad.length) {
        out.push({ type: "head", text: `Bad input lines · ${fmt(bad.length)}` });
        for (const b of bad) out.push({ type: "bad", key: "bad:" + b.line, ref: b });
      }
      shown.bad = bad.length;
    }
    items = out;
    list.setItems(items);
    statusLine(shown);
  }

  function statusLine(shown) {
    const parts = [];
    if (state.statuses.has("changed")) parts.push(plural(shown.changed, "change"));
    if (state.statuses.has("error")) parts.push(plural(shown.error, "error"));
    if (state.statuses.has("bad")) parts.push(plural(shown.bad, "bad line"));
    let text = "Showing " + (parts.join(", ") || "nothing (no status selected)");
    if (state.kind) text += ` of kind ${state.kind}`;
    if (state.query) {
      text += ` with a job id containing “${state.query}”`;
      if (!shown.changed && !shown.error && !shown.bad) {
        text = `No listed job id contains “${state.query}”` + (state.kind ? ` among ${state.kind} jobs` : "") + ".";
        if (D.unlisted.ids) text += ` The page lists a sample of job ids (${fmt(D.unlisted.ids)} are not listed): search the output file for the rest.`;
      }
    }
    $("status-line").textContent = text;
  }

  function drawItem(item) {
    if (item.type === "head") return el("div", { class: "head", role: "presentation" }, el("span", { text: item.text }));
    const selected = item.key === state.selected;
    const row = el("div", {
      class: "row", role: "option", id: "opt-" + item.key.replace(/[^A-Za-z0-9_-]/g, "_"),
      "aria-selected": selected ? "true" : "false", "data-key": item.key,
      onclick: () => select(item.key, { focusList: true }),
    });
    const r = item.ref;
    if (item.type === "change") {
      const roles = r.summary.roles.join(", ");
      row.append(
        el("div", { class: "l1" }, el("span", { class: "dot changed" }), plural(r.jobs, "job"),
          el("span", { class: "muted", text: ` · ${r.kind} · ${roles} · −${fmt(r.removed)} +${fmt(r.added)} lines` })),
        el("div", { class: "l2" },
          r.summary.minus ? el("span", { class: "minus", text: "− " + r.summary.minus + "  " }) : null,
          r.summary.plus ? el("span", { class: "plus", text: "+ " + r.summary.plus }) : null));
    } else if (item.type === "error") {
      row.append(
        el("div", { class: "l1" }, el("span", { class: "dot error" }), plural(r.jobs, "job"),
          el("span", { class: "muted", text: ` · ${r.kind} · ${r.code}` })),
        el("div", { class: "l2", text: r.message }));
    } else {
      row.append(
        el("div", { class: "l1" }, el("span", { class: "dot bad" }), "line " + fmt(r.line),
          el("span", { class: "muted", text: " · " + r.code + (r.job_id ? " · " + r.job_id : "") })),
        el("div", { class: "l2", text: r.reason }));
    }
    return row;
  }

  function statusButtons() {
    const labels = {
      changed: ["Changed", T.drift.changed], error: ["Errors", errorJobs], bad: ["Bad lines", T.bad_lines],
    };
    for (const status of STATUSES) {
      const [label, n] = labels[status];
      $("statuses").append(el("button", {
        type: "button", "data-status": status, "aria-pressed": "true",
        onclick: () => toggleStatus(status),
      }, label, el("span", { class: "count", text: fmt(n) })));
    }
  }

  function toggleStatus(status) {
    if (state.statuses.has(status)) state.statuses.delete(status); else state.statuses.add(status);
    document.querySelector(`#statuses [data-status="${status}"]`).setAttribute("aria-pressed", String(state.statuses.has(status)));
    refresh();
  }

  function kindSelect() {
    const select = $("kind");
    select.append(el("option", { value: "", text: "all kinds" }));
    for (const kind of kinds) {
      const row = D.by_kind[kind];
      select.append(el("option", { value: kind, text: `${kind} (${fmt(row.drift_changed)} changed, ${fmt(row.error)} errors)` }));
    }
    select.addEventListener("change", () => { state.kind = select.value; refresh(); });
  }

  function setKind(kind, scroll) {
    state.kind = kind;
    $("kind").value = kind;
    refresh();
    if (scroll) $("review").scrollIntoView();
  }

  // Keep the selection if it is still listed, else take the first item.
  function refresh() {
    buildItems();
    const still = items.some((it) => it.key === state.selected);
    if (!still) {
      const first = items.find((it) => it.type !== "head");
      select(first ? first.key : null, { keepHash: !first });
    } else {
      drawDetail();
    }
  }

  // -- selection, deep links --------------------------------------------------------

  function select(key, options) {
    const opts = options || {};
    state.selected = key;
    state.hunk = -1;
    const index = items.findIndex((it) => it.key === key);
    if (index >= 0) list.reveal(index); else list.render();
    $("list").setAttribute("aria-activedescendant", key ? "opt-" + key.replace(/[^A-Za-z0-9_-]/g, "_") : "");
    drawDetail();
    if (!opts.keepHash) writeHash();
    if (opts.focusList) $("list").focus({ preventScroll: true });
  }

  function move(step) {
    const selectable = items.map((it, i) => [it, i]).filter(([it]) => it.type !== "head");
    if (!selectable.length) return;
    let at = selectable.findIndex(([it]) => it.key === state.selected);
    at = at < 0 ? 0 : Math.min(selectable.length - 1, Math.max(0, at + step));
    select(selectable[at][0].key);
  }

  function writeHash() {
    const parts = [];
    if (state.selected) {
      const [type, id] = [state.selected.slice(0, state.selected.indexOf(":")), state.selected.slice(state.selected.indexOf(":") + 1)];
      parts.push(type + "=" + encodeURIComponent(id));
    }
    if (state.query) parts.push("job=" + encodeURIComponent(state.query));
    if (state.kind) parts.push("kind=" + encodeURIComponent(state.kind));
    if (state.view === "split") parts.push("view=split");
    const hash = parts.length ? "#" + parts.join("&") : " ";
    if (location.hash !== hash) history.replaceState(null, "", hash === " " ? location.pathname + location.search : hash);
  }

  const HASH_KEYS = ["change", "error", "bad", "job", "kind", "view"];

  function readHash() {
    const params = new URLSearchParams(location.hash.replace(/^#/, ""));
    // A plain anchor (#review) only scrolls; the state stays as it is.
    if (items.length && !HASH_KEYS.some((k) => params.has(k))) return;
    let changed = false;
    const view = params.get("view") === "split" ? "split" : "unified";
    if (view !== state.view) { setView(view, true); }
    const kind = params.get("kind") || "";
    if (kind !== state.kind && (kind === "" || D.by_kind[kind])) { state.kind = kind; $("kind").value = kind; changed = true; }
    const query = params.get("job") || "";
    if (query !== state.query) { state.query = query; $("search").value = query; changed = true; }
    let key = null;
    if (params.get("change") && changeById.has(params.get("change"))) key = "change:" + params.get("change");
    else if (params.get("error") && errorById.has(params.get("error"))) key = "error:" + params.get("error");
    else if (params.get("bad") && badByLine.has(params.get("bad"))) key = "bad:" + params.get("bad");
    if (key) {
      // A link to something the filters hide shows it anyway.
      const ref = key.startsWith("change:") ? changeById.get(key.slice(7)) : key.startsWith("error:") ? errorById.get(key.slice(6)) : null;
      const status = key.startsWith("change:") ? "changed" : key.startsWith("error:") ? "error" : "bad";
      if (!state.statuses.has(status)) { toggleStatusQuiet(status); changed = true; }
      if (ref && state.kind && ref.kind !== state.kind) { state.kind = ""; $("kind").value = ""; changed = true; }
      if (!ref && state.kind) { state.kind = ""; $("kind").value = ""; changed = true; }
    }
    if (changed || !items.length) buildItems();
    if (key && items.some((it) => it.key === key)) {
      select(key, { keepHash: true });
      $("detail").scrollTop = 0;
    } else if (!state.selected || !items.some((it) => it.key === state.selected)) {
      refresh();
    }
  }

  function toggleStatusQuiet(status) {
    state.statuses.add(status);
    document.querySelector(`#statuses [data-status="${status}"]`).setAttribute("aria-pressed", "true");
  }

  // -- the detail pane ------------------------------------------------------------------

  let jobsList = null;

  function drawDetail() {
    const pane = $("detail");
    if (jobsList) { jobsList.destroy(); jobsList = null; }
    pane.replaceChildren();
    const key = state.selected;
    if (!key) {
      pane.append(el("p", { class: "empty", text: emptyText() }));
      return;
    }
    const type = key.slice(0, key.indexOf(":")), id = key.slice(key.indexOf(":") + 1);
    if (type === "change") drawChange(pane, changeById.get(id));
    else if (type === "error") drawError(pane, errorById.get(id));
    else drawBad(pane, badByLine.get(id));
  }

  function emptyText() {
    if (!T.drift.changed && !errorJobs && !T.bad_lines) {
      return T.with_prior_messages ? "No job changed, failed or was unreadable." : "Nothing to review: no line of the input carried prior messages, and every job rendered.";
    }
    return "Nothing matches the filters.";
  }

  function permalink(hash) {
    return el("a", { class: "permalink", href: hash, title: "link to this", text: "#" });
  }

  function drawChange(pane, c) {
    const kindRow = D.by_kind[c.kind] || { drift_same: 0, drift_changed: 0, drift_error: 0 };
    const compared = kindRow.drift_same + kindRow.drift_changed + kindRow.drift_error;
    pane.append(
      el("h2", null, "Change ", el("span", { class: "badge", text: c.kind }), el("code", { class: "muted", text: c.id.slice(c.kind.length + 1) }), permalink("#change=" + encodeURIComponent(c.id))),
      el("p", { class: "meta" },
        el("strong", { text: plural(c.jobs, "job") }), ` made this change (${pct(c.jobs, compared)} of the ${fmt(compared)} compared ${c.kind} jobs); `,
        `${plural(c.messages, "message")} differ${c.messages === 1 ? "s" : ""}, −${fmt(c.removed)} +${fmt(c.added)} lines.`));
    const others = (bySignature.get(c.signature) || []).filter((o) => o.id !== c.id);
    if (others.length) {
      const also = el("p", { class: "meta also" }, "The same change in other kinds: ");
      for (const o of others) also.append(el("a", { href: "#change=" + encodeURIComponent(o.id), text: `${o.kind} (${fmt(o.jobs)})` }));
      pane.append(also);
    }
    const [line, jobId] = c.example_job;
    pane.append(el("h3", null, "Diff of job ", el("code", { text: jobId === null ? "(no job id)" : jobId }), ` (input line ${fmt(line)}): before → after`));
    if (c.cacheable) {
      // The session's cacheable prefix per message of the new prompt (meta.cache).
      pane.append(el("p", { class: "meta cacheable" }, "Cacheable prefix of the new prompt: " +
        c.cacheable.map((m, i) => `${i} ${m.role} ${fmt(m.cacheable)} of ${fmt(m.chars)} characters (${pct(m.cacheable, m.chars)})`).join(" · ")));
    }
    if (c.diff === null) {
      pane.append(el("p", { class: "note" },
        "This change's diff did not fit in the page (see the notes at the top). Its record: ",
        el("code", { text: `sed -n '${line}p' ${D.output}` }), ", or re-run with ", el("code", { text: "--all-diffs" }), "."));
    } else {
      const box = el("div", { id: "diff" });
      c.diff.forEach((message, m) => box.append(drawMessage(c, message, m)));
      pane.append(box);
      if (c.diff_cut) pane.append(el("p", { class: "note muted", text: "Some of this diff's text did not fit in the page: folds without text cannot be unfolded, and cut lines end in …" }));
    }
    drawJobs(pane, c);
  }

  function drawError(pane, e) {
    pane.append(
      el("h2", null, "Error ", el("span", { class: "badge error", text: e.code }), el("span", { class: "badge", text: e.kind }), permalink("#error=" + encodeURIComponent(e.id))),
      el("p", { class: "meta" }, el("strong", { text: plural(e.jobs, "job") }), " did not render, with this message:"),
      el("pre", { class: "message", text: e.message || "(no message)" }));
    drawJobs(pane, e);
  }

  function drawBad(pane, b) {
    pane.append(
      el("h2", null, "Bad input line ", el("span", { text: fmt(b.line) }), el("span", { class: "badge error", text: b.code }), permalink("#bad=" + b.line)),
      el("p", { class: "meta", text: "The line could not be read as a job; it was not rendered. Its output line holds an error record." }),
      el("h3", { text: "Reason" }), el("pre", { class: "message", text: b.reason || "(none)" }),
      el("h3", { text: "The line (its beginning)" }), el("pre", { class: "message", text: b.text }),
      el("p", { class: "meta" }, "The whole line: ", el("code", { text: `sed -n '${b.line}p' ${D.input}` })));
  }

  function drawJobs(pane, group) {
    const q = state.query.toLowerCase();
    const listed = group.ids.length;
    pane.append(el("h3", null, "Jobs ", el("span", { class: "muted", text: listed < group.jobs ? `(the first ${fmt(listed)} of ${fmt(group.jobs)})` : `(${fmt(listed)})` })));
    const host = el("div", { class: "job-list", role: "list", "aria-label": "job ids" });
    pane.append(host, el("p", { class: "meta" }, "A job's record: ", el("code", { text: `sed -n 'LINEp' ${D.output}` }), " with its input line."));
    host.style.height = Math.min(240, Math.max(1, listed) * JOB_ROW + 2) + "px";
    const jobs = jobsList = new VirtualList(host, JOB_ROW, ([line, id]) => el("div", {
      class: "job" + (q && id !== null && id.toLowerCase().includes(q) ? " match" : ""), role: "listitem",
    }, el("span", { class: "ln", text: "line " + fmt(line) }), id === null ? el("span", { class: "muted", text: "(no job id)" }) : id));
    jobs.setItems(group.ids);
    if (q) {
      const at = group.ids.findIndex(([, id]) => id !== null && id.toLowerCase().includes(q));
      if (at > 0) requestAnimationFrame(() => { host.scrollTop = Math.max(0, at * JOB_ROW - 2 * JOB_ROW); jobs.render(); });
    }
  }

  // -- diffs ----------------------------------------------------------------------------

  function pieces(row, cls) {
    const [, text, words] = row;
    const span = document.createDocumentFragment();
    if (!words) {
      span.append(text);
    } else {
      words.forEach((piece, i) => {
        if (!piece) return;
        span.append(i % 2 ? el(cls, { class: "w", text: piece }) : document.createTextNode(piece));
      });
    }
    if (row.length > 4) span.append(el("span", { class: "note", text: ` … (${fmt(row[4] - text.length)} more characters not in the page)` }));
    return span;
  }

  function noEolNote() {
    return el("span", { class: "note", text: " ⏎ no newline at the end" });
  }

  // Rows of one message with unfolded folds expanded: [kind, row, oldNo, newNo, foldKey].
  function lineRows(c, message, m) {
    const out = [];
    let oldNo = 1, newNo = 1;
    message.rows.forEach((row, r) => {
      const kind = row[0];
      if (kind === "=") { out.push(["=", row, oldNo++, newNo++]); return; }
      if (kind === "-") { out.push(["-", row, oldNo++, null]); return; }
      if (kind === "+") { out.push(["+", row, null, newNo++]); return; }
      const key = `${c.id}/${m}/${r}`;
      if (row[2] !== null && state.unfolded.has(key)) {
        for (const text of row[2].split("\n")) out.push(["=", ["=", text], oldNo++, newNo++]);
      } else {
        out.push(["~", row, oldNo, newNo, key]);
        oldNo += row[1]; newNo += row[1];
      }
    });
    return out;
  }

  function foldRow(row, key) {
    const [, count, text] = row;
    if (text === null) {
      return el("div", { class: "fold", text: `⋯ ${plural(count, "unchanged line")} (not in the page)` });
    }
    const button = el("button", {
      type: "button", class: "fold", "aria-expanded": "false",
      onclick: () => { state.unfolded.add(key); drawDetailKeepScroll(); },
    }, `⋯ Show ${plural(count, "unchanged line")}`);
    return button;
  }

  function drawMessage(c, message, m) {
    const head = el("div", { class: "msg-head" }, el("span", { text: `messages[${message.index}]` }));
    if (message.before === "absent") head.append(el("span", { text: `added (${message.after})` }));
    else if (message.after === "absent") head.append(el("span", { text: `removed (${message.before})` }));
    else if (message.before !== message.after) head.append(el("span", { text: `role ${message.before} → ${message.after}` }));
    else head.append(el("span", { class: "muted", text: message.after }));
    const body = el("div", { class: "diff " + state.view });
    const rows = lineRows(c, message, m);
    if (state.view === "unified") drawUnified(body, rows); else drawSplit(body, rows);
    return el("section", { class: "msg" }, head, body);
  }

  function numberCell(n) {
    return el("span", { class: "n", text: n === null ? "" : String(n) });
  }

  function eolPairs(rows) {
    // Lines that differ only by their final newline: say so, or they would look equal.
    const flagged = new Set();
    for (let i = 0; i < rows.length; i++) {
      if (rows[i][0] !== "-") continue;
      let j = i;
      while (j < rows.length && rows[j][0] === "-") j++;
      let k = j;
      while (k < rows.length && rows[k][0] === "+") k++;
      for (let p = 0; p < Math.min(j - i, k - j); p++) {
        const a = rows[i + p][1], b = rows[j + p][1];
        if (a[1] === b[1] && a[3] !== b[3]) { flagged.add(rows[i + p]); flagged.add(rows[j + p]); }
      }
      i = k - 1;
    }
    return flagged;
  }

  function drawUnified(body, rows) {
    const flagged = eolPairs(rows);
    let previous = "=";
    for (const entry of rows) {
      const [kind, row, oldNo, newNo, key] = entry;
      if (kind === "~") { body.append(foldRow(row, key)); previous = "~"; continue; }
      const cls = kind === "-" ? "del" : kind === "+" ? "ins" : "";
      const r = el("div", { class: "r" + ((kind !== "=" && (previous === "=" || previous === "~")) ? " hunk-start" : "") },
        numberCell(oldNo), numberCell(newNo), el("span", { class: "s " + cls, text: kind === "=" ? " " : kind === "-" ? "−" : "+" }));
      const text = el("span", { class: "t " + cls });
      if (kind === "=") text.textContent = row[1]; else text.append(pieces(row, kind === "-" ? "del" : "ins"));
      if (flagged.has(entry) && row[3]) text.append(noEolNote());
      r.append(text);
      body.append(r);
      previous = kind;
    }
  }

  function drawSplit(body, rows) {
    const flagged = eolPairs(rows);
    let i = 0;
    while (i < rows.length) {
      const [kind, row, oldNo, newNo, key] = rows[i];
      if (kind === "~") { body.append(foldRow(row, key)); i++; continue; }
      if (kind === "=") {
        body.append(el("div", { class: "r" }, numberCell(oldNo), el("span", { class: "t", text: row[1] }), numberCell(newNo), el("span", { class: "t", text: row[1] })));
        i++;
        continue;
      }
      const removed = [], added = [];
      while (i < rows.length && rows[i][0] === "-") removed.push(rows[i++]);
      while (i < rows.length && rows[i][0] === "+") added.push(rows[i++]);
      for (let p = 0; p < Math.max(removed.length, added.length); p++) {
        const r = el("div", { class: "r" + (p === 0 ? " hunk-start" : "") });
        for (const [entry, cls, tag] of [[removed[p], "del", "del"], [added[p], "ins", "ins"]]) {
          if (!entry) { r.append(numberCell(null), el("span", { class: "t blank" })); continue; }
          const text = el("span", { class: "t " + cls }, pieces(entry[1], tag));
          if (flagged.has(entry) && entry[1][3]) text.append(noEolNote());
          r.append(numberCell(cls === "del" ? entry[2] : entry[3]), text);
        }
        body.append(r);
      }
    }
  }

  function drawDetailKeepScroll() {
    const pane = $("detail");
    const top = pane.scrollTop;
    drawDetail();
    pane.scrollTop = top;
  }

  function setView(view, quiet) {
    state.view = view;
    $("view-unified").setAttribute("aria-pressed", String(view === "unified"));
    $("view-split").setAttribute("aria-pressed", String(view === "split"));
    if (!quiet) { drawDetailKeepScroll(); writeHash(); }
  }

  function unfoldAll() {
    if (!state.selected || !state.selected.startsWith("change:")) return;
    const c = changeById.get(state.selected.slice(7));
    if (!c.diff) return;
    c.diff.forEach((message, m) => message.rows.forEach((row, r) => { if (row[0] === "~") state.unfolded.add(`${c.id}/${m}/${r}`); }));
    drawDetailKeepScroll();
  }

  function jumpHunk(step) {
    const hunks = [...document.querySelectorAll("#detail .hunk-start")];
    if (!hunks.length) return;
    for (const h of hunks) h.classList.remove("current");
    state.hunk = Math.min(hunks.length - 1, Math.max(0, state.hunk + step));
    const target = hunks[state.hunk];
    target.classList.add("current");
    target.scrollIntoView({ block: "center" });
  }

  // -- search and keys ----------------------------------------------------------------

  let searchTimer = 0;
  function onSearch() {
    clearTimeout(searchTimer);
    searchTimer = setTimeout(() => {
      state.query = $("search").value.trim();
      refresh();
      writeHash();
    }, 120);
  }

  function typing(target) {
    return target && (target.tagName === "INPUT" || target.tagName === "SELECT" || target.tagName === "TEXTAREA");
  }

  function onKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey) return;
    const help = $("help");
    if (help.open && event.key !== "Escape") return;
    if (event.key === "Escape") {
      if (help.open) { help.close(); return; }
      if (document.activeElement === $("search") || state.query) {
        $("search").value = ""; state.query = ""; refresh(); writeHash(); $("list").focus(); event.preventDefault();
      }
      return;
    }
    if (typing(event.target)) {
      if (event.key === "Enter" && event.target === $("search")) { clearTimeout(searchTimer); state.query = $("search").value.trim(); refresh(); writeHash(); $("list").focus(); }
      if ((event.key === "ArrowDown") && event.target === $("search")) { $("list").focus(); move(0); event.preventDefault(); }
      return;
    }
    const actions = {
      j: () => move(1), ArrowDown: () => move(1), k: () => move(-1), ArrowUp: () => move(-1),
      PageDown: () => move(10), PageUp: () => move(-10),
      Home: () => move(-items.length), End: () => move(items.length),
      n: () => jumpHunk(1), p: () => jumpHunk(-1),
      v: () => setView(state.view === "unified" ? "split" : "unified"),
      e: () => unfoldAll(),
      "/": () => { $("search").focus(); $("search").select(); },
      "?": () => { if (!help.open) help.showModal(); },
      1: () => toggleStatus("changed"), 2: () => toggleStatus("error"), 3: () => toggleStatus("bad"),
      Enter: () => $("detail").focus(),
    };
    const action = actions[event.key];
    if (!action) return;
    // Arrows and paging keys inside the detail pane scroll it, as usual.
    if (event.target === $("detail") && ["ArrowDown", "ArrowUp", "PageDown", "PageUp", "Home", "End"].includes(event.key)) return;
    event.preventDefault();
    action();
  }

  // -- start ----------------------------------------------------------------------------

  header();
  summary();
  statusButtons();
  kindSelect();
  $("search").addEventListener("input", onSearch);
  $("view-unified").addEventListener("click", () => setView("unified"));
  $("view-split").addEventListener("click", () => setView("split"));
  $("help-button").addEventListener("click", () => $("help").showModal());
  $("help-close").addEventListener("click", () => $("help").close());
  document.addEventListener("keydown", onKey);
  window.addEventListener("hashchange", readHash);
  readHash();
  document.body.dataset.ready = "1";
})();
