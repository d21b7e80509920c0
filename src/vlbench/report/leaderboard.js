// Draws the leaderboard from its embedded JSON (vlbench.report.leaderboard): every text goes
// in through textContent, never as HTML. Tables sort by any header; filters hide rows/sections.
(function () {
  "use strict";
  const data = JSON.parse(document.getElementById("leaderboard-data").textContent);
  const marks = data.marks;

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "text") node.textContent = value;
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children) if (child !== null && child !== undefined) node.append(child);
    return node;
  }

  function fixed(value, signed) {
    if (value === null || value === undefined) return marks.dash;
    const text = value.toFixed(2);
    return signed && value >= 0 ? "+" + text : text;
  }

  // The [min, max] a column's bars share: every value and interval end in it.
  function extent(cells) {
    const xs = [];
    for (const c of cells) {
      if (c) xs.push(...[c.lo, c.hi, c.value].filter((x) => x !== null));
    }
    if (!xs.length) return null;
    const low = Math.min(...xs), high = Math.max(...xs);
    const pad = high - low < 1e-9 ? 1 : 0.05 * (high - low); // no bar touches both ends
    return [low - pad, high + pad];
  }

  function bar(value, low, high, range) {
    if (range === null || low === null || high === null) return null;
    const at = (x) => (100 * (x - range[0])) / (range[1] - range[0]);
    const span = el("span", { class: "bar", title: `95% interval [${fixed(low)}, ${fixed(high)}]`,
      "data-ci-low": low, "data-ci-high": high });
    const ci = el("span", { class: "ci" });
    ci.style.left = at(low).toFixed(1) + "%";
    ci.style.width = Math.max(at(high) - at(low), 1).toFixed(1) + "%";
    const point = el("span", { class: "pt" });
    point.style.left = at(value).toFixed(1) + "%";
    span.append(ci, point);
    return span;
  }

  function valueCell(text, value, best, ...extra) {
    const td = el("td", { class: best ? "best" : null, "data-value": value ?? "" }, text);
    if (best) td.append(el("span", { class: "mark", title: "best or tied with the best",
      text: marks.best }));
    td.append(...extra.filter((x) => x !== null));
    return td;
  }

  function modelRow(model, label, title) {
    const tr = el("tr", { "data-model": model, "data-label": label });
    tr.append(el("td", { class: "label", "data-value": label, title: title || null, text: label }));
    return tr;
  }

  // A header that sorts its table by the row cell at `column` (text or number).
  function sortable(column, type, text, attrs) {
    return el("th", { "data-col": column, "data-type": type, ...attrs, text: text });
  }

  function board(name, kind, head, rows, foot) {
    const table = el("table", { class: "board", "data-table": name, "data-kind": kind },
      el("thead", null, ...head), el("tbody", null, ...rows));
    if (foot) table.append(el("tfoot", null, foot));
    const frame = el("div", { class: "scroll" }, table); // a wide table scrolls on its own
    for (const th of table.querySelectorAll("th[data-col]")) {
      th.addEventListener("click", () => sortBy(table, th));
    }
    return frame;
  }

  function paperTable(paper) {
    const top = el("tr", null, sortable(0, "text", "model", { rowspan: 2, class: "label" }));
    const sub = el("tr");
    paper.labels.forEach((label, i) => {
      top.append(el("th", { colspan: 3, text: label }));
      sub.append(sortable(1 + 3 * i, "number", "ours"),
        sortable(2 + 3 * i, "number", "published"), sortable(3 + 3 * i, "number", "Δ"));
    });
    const last = 1 + 3 * paper.labels.length;
    top.append(sortable(last, "text", "flags", { rowspan: 2, class: "flags" }));
    const ranges = paper.labels.map((_, i) => extent(paper.rows.map((r) => r.cells[i])));
    const rows = paper.rows.map((row) => {
      const title = [row.model, row.reference].filter(Boolean).join(" / ");
      const tr = modelRow(row.model, row.label, title);
      row.cells.forEach((c, i) => {
        const published = parseFloat(c.published);
        const beyond = c.beyond ? " " + marks.beyond : "";
        const diff = el("td", { class: c.beyond ? "beyond" : null, "data-value": c.difference ?? "",
          text: fixed(c.difference, true) + beyond });
        tr.append(valueCell(fixed(c.value), c.value, c.best, bar(c.value, c.lo, c.hi, ranges[i])),
          el("td", { "data-value": Number.isFinite(published) ? published : "",
            text: c.published || marks.dash }), diff);
      });
      const flags = row.flags.join("; ");
      tr.append(el("td", { class: "flags", "data-value": flags, text: flags }));
      return tr;
    });
    return board("paper:" + paper.name, "paper", [top, sub], rows, null);
  }

  function benchmarkCell(c, range) {
    if (c === null) return el("td", { "data-value": "" });
    if (c.value === null) return el("td", { class: "nc", "data-value": "", title: c.nc || null,
      text: c.nc ? marks.nc : marks.dash });
    let rank = null;
    if (c.rank !== null) {
      const bounds = c.rank_lo !== null && c.rank_hi !== null;
      const interval = bounds ? ` [${c.rank_lo}–${c.rank_hi}]` : "";
      rank = el("span", { class: "rank", text: `rank ${c.rank}${interval}` });
    }
    return valueCell(fixed(c.value), c.value, c.best, bar(c.value, c.lo, c.hi, range), rank);
  }

  function benchmarkTable(bench) {
    const head = el("tr", null, sortable(0, "text", "model", { class: "label" }),
      ...bench.columns.map((label, i) => sortable(i + 1, "number", label)));
    const ranges = bench.columns.map((_, i) => extent(bench.rows.map((r) => r.cells[i])));
    const rows = bench.rows.map((row) => {
      const tr = modelRow(row.model, row.model, null);
      row.cells.forEach((c, i) => tr.append(benchmarkCell(c, ranges[i])));
      return tr;
    });
    const foot = bench.chance && el("tr", null, el("td", { class: "label", text: "chance" }),
      ...bench.chance.map((x) => el("td", { text: x === null ? "" : fixed(x) })));
    return board(bench.name, "benchmark", [head], rows, foot);
  }

  function sortBy(table, th) {
    const order = th.getAttribute("aria-sort") === "ascending" ? "descending" : "ascending";
    table.querySelectorAll("th[aria-sort]").forEach((h) => h.removeAttribute("aria-sort"));
    th.setAttribute("aria-sort", order);
    const column = Number(th.dataset.col), numeric = th.dataset.type === "number";
    const sign = order === "ascending" ? 1 : -1;
    const body = table.tBodies[0];
    const keyed = Array.from(body.rows, (row, index) => {
      const raw = row.cells[column].dataset.value;
      const key = raw === undefined || raw === "" ? null : numeric ? Number(raw) : raw;
      return { row, index, key };
    });
    keyed.sort((a, b) => {
      if (a.key === null || b.key === null) {
        return (a.key === null) - (b.key === null) || a.index - b.index; // missing values last
      }
      const c = numeric ? a.key - b.key : a.key.localeCompare(b.key);
      return sign * c || a.index - b.index;
    });
    for (const { row } of keyed) body.append(row);
  }

  const modelFilter = document.getElementById("model-filter");
  const benchmarkFilter = document.getElementById("benchmark-filter");
  const models = new Set();

  function applyFilters() {
    const query = modelFilter.value.trim().toLowerCase();
    const names = (tr) => [tr.dataset.model, tr.dataset.label].map((x) => x.toLowerCase());
    const exact = [...models].some((m) => m.toLowerCase() === query);
    document.querySelectorAll("tr[data-model]").forEach((tr) => {
      tr.hidden = query !== "" && !names(tr).some((n) => (exact ? n === query : n.includes(query)));
    });
    const benchmark = benchmarkFilter.value;
    document.querySelectorAll("section[data-benchmark]").forEach((section) => {
      section.hidden = benchmark !== "" && section.dataset.benchmark !== benchmark;
    });
  }

  const coverage = document.getElementById("coverage");
  for (const entry of data.coverage) {
    coverage.append(el("li", { "data-table": entry.table, text: entry.text }));
  }
  const papers = document.getElementById("papers");
  if (data.papers.length) papers.append(el("p", { class: "legend", text: data.paper_legend }));
  for (const paper of data.papers) {
    paper.rows.forEach((row) => row.model && models.add(row.model));
    papers.append(el("section", { "data-paper": paper.name }, el("h3", { text: paper.title }),
      paperTable(paper)));
  }
  const benchmarks = document.getElementById("benchmarks");
  for (const bench of data.benchmarks) {
    bench.rows.forEach((row) => models.add(row.model));
    benchmarkFilter.append(el("option", { value: bench.name, text: bench.name }));
    const note = bench.note ? el("p", { class: "legend", text: bench.note }) : null;
    benchmarks.append(el("section", { "data-benchmark": bench.name },
      el("h3", { text: bench.name }), note, benchmarkTable(bench)));
  }
  const list = document.getElementById("model-list");
  for (const model of [...models].sort()) list.append(el("option", { value: model }));
  modelFilter.addEventListener("input", applyFilters);
  modelFilter.addEventListener("change", applyFilters);
  benchmarkFilter.addEventListener("change", applyFilters);
})();
