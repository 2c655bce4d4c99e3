// pytest-hpml dashboard: the index's filters and sorting, and the metric pages' charts
// (drawn by plotly.js from the figures embedded in the page, each when it scrolls into view).
"use strict";

(function index() {
  const table = document.getElementById("metrics");
  if (!table) return;
  const body = table.tBodies[0];
  const rows = Array.from(body.rows);
  const search = document.getElementById("q");
  const selects = Array.from(document.querySelectorAll("select[data-filter]"));
  const count = document.getElementById("count");

  function apply() {
    const words = search.value.trim().toLowerCase().split(/\s+/).filter(Boolean);
    const chosen = selects.filter((s) => s.value).map((s) => [s.dataset.filter, s.value]);
    let shown = 0;
    for (const row of rows) {
      const ok = words.every((w) => row.dataset.text.includes(w)) &&
        chosen.every(([key, value]) => row.dataset[key] === value);
      row.hidden = !ok;
      if (ok) shown += 1;
    }
    count.textContent = `${shown} of ${rows.length} metrics`;
  }
  search.addEventListener("input", apply);
  selects.forEach((s) => s.addEventListener("change", apply));

  const heads = Array.from(table.tHead.rows[0].cells);
  heads.forEach((th, column) => {
    const kind = th.dataset.sortType;
    if (kind === "none") return;
    th.tabIndex = 0;
    const sort = () => {
      const ascending = th.getAttribute("aria-sort") !== "ascending";
      heads.forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      const key = (row) => {
        const cell = row.cells[column];
        if (kind === "number") {
          const v = parseFloat(cell.dataset.sort);
          return Number.isNaN(v) ? null : v;
        }
        return cell.textContent.trim().toLowerCase();
      };
      const keyed = rows.map((row) => [key(row), row]);
      keyed.sort((a, b) => {
        if (a[0] === b[0]) return 0;
        if (a[0] === null) return 1; // rows without a number last, either way
        if (b[0] === null) return -1;
        const order = a[0] < b[0] ? -1 : 1;
        return ascending ? order : -order;
      });
      body.append(...keyed.map(([, row]) => row));
    };
    th.addEventListener("click", sort);
    th.addEventListener("keydown", (e) => { if (e.key === "Enter") sort(); });
  });
})();

(function metricPage() {
  const holder = document.getElementById("figures");
  if (!holder) return;
  const figures = JSON.parse(holder.textContent);
  const charts = Array.from(document.querySelectorAll(".chart"));
  function draw(div) {
    const figure = figures[div.id];
    if (!figure || div.dataset.drawn) return;
    if (typeof Plotly === "undefined") {
      div.textContent = "plotly.min.js did not load: the chart cannot be drawn.";
      return;
    }
    Plotly.newPlot(div, figure.data, figure.layout, {displaylogo: false, responsive: true})
      // When it was drawn, in ms since the navigation (tools/dashboard_timing.py reads it).
      .then(() => { div.dataset.drawn = String(performance.now()); });
  }
  if ("IntersectionObserver" in window) {
    const seen = new IntersectionObserver((found) => {
      for (const e of found) {
        if (e.isIntersecting) { seen.unobserve(e.target); draw(e.target); }
      }
    }, {rootMargin: "300px"});
    charts.forEach((div) => seen.observe(div));
  } else {
    charts.forEach(draw);
  }
  // A link to one row's panel (from the index) opens with that panel drawn and in view.
  const target = location.hash && document.getElementById(location.hash.slice(1));
  if (target) {
    const chart = target.querySelector(".chart");
    if (chart) draw(chart);
    target.classList.add("target");
  }
})();
