// hfmem scan dashboard: draws the table's rows from the page's JSON blob, sorts by a clicked header, filters by
// text and status. The view lives in the address's hash (#sort=KEY&dir=asc|desc&q=TEXT&status=ok), so a link
// reopens the same view. Cells are written with textContent only: no value from the data becomes markup.
(function () {
  "use strict";
  var data = JSON.parse(document.getElementById("scan-data").textContent);
  var columns = data.columns, rows = data.rows;
  var body = document.getElementById("rows");
  var query = document.getElementById("q"), status = document.getElementById("status");
  var shown = document.getElementById("shown");
  var statusAt = columns.findIndex(function (c) { return c.key === "status"; });
  var view = { sort: null, dir: "asc" };
  // Built once: localeCompare and toLocaleString build a collator or formatter per call, seconds over 10,000 rows.
  var collator = new Intl.Collator("en", { numeric: true });
  var integer = new Intl.NumberFormat("en-US");

  function count(n) {
    var units = [[1e12, "T"], [1e9, "B"], [1e6, "M"], [1e3, "K"]];
    for (var i = 0; i < units.length; i++) {
      if (Math.abs(n) >= units[i][0]) { return (n / units[i][0]).toFixed(2) + units[i][1]; }
    }
    return String(n);
  }

  function show(value, kind) {
    if (value === null || value === undefined) { return ""; }
    if (kind === "count") { return count(value); }
    if (kind === "gib") { return value.toFixed(2); }
    return String(value);
  }

  // Each row's <tr> is built once, as a copy of one empty row (cheaper than a createElement per cell); sorting and
  // filtering only reorder and hide them.
  var blank = document.createElement("tr");
  columns.forEach(function (column, i) {
    var cell = blank.appendChild(document.createElement(i === 0 ? "th" : "td"));
    if (i === 0) { cell.scope = "row"; }
    cell.className = column.kind === "text" ? (i === 0 ? "model" : "") : "num";
  });
  var built = rows.map(function (row) {
    var tr = blank.cloneNode(true), cell = tr.firstChild;
    row.forEach(function (value, i) {
      var kind = columns[i].kind;
      cell.textContent = show(value, kind);
      if (kind === "count" && value !== null) { cell.title = integer.format(value); }
      cell = cell.nextSibling;
    });
    if (statusAt >= 0 && row[statusAt] !== "ok") { tr.className = "failed"; }
    var text = row.filter(function (v, i) { return columns[i].kind === "text" && v !== null; }).join(" ");
    return { tr: tr, row: row, text: text.toLowerCase() };
  });

  function compare(at, kind, dir) {
    var sign = dir === "desc" ? -1 : 1;
    return function (a, b) {
      var x = a.row[at], y = b.row[at];
      if (x === null || x === undefined) { return (y === null || y === undefined) ? 0 : 1; }  // empty cells last
      if (y === null || y === undefined) { return -1; }
      if (kind === "text") { return sign * collator.compare(String(x), String(y)); }
      return sign * (x - y);
    };
  }

  function apply() {
    var terms = query.value.toLowerCase().split(/\s+/).filter(Boolean);
    var wanted = status.value;
    var order = built.slice();
    var at = columns.findIndex(function (c) { return c.key === view.sort; });
    if (at >= 0) { order.sort(compare(at, columns[at].kind, view.dir)); }  // Array.prototype.sort is stable
    var visible = order.filter(function (item) {
      if (wanted && (wanted === "ok") !== (item.row[statusAt] === "ok")) { return false; }
      return terms.every(function (t) { return item.text.indexOf(t) >= 0; });
    });
    body.replaceChildren.apply(body, visible.map(function (item) { return item.tr; }));
    shown.textContent = integer.format(visible.length) + " of " + integer.format(rows.length) +
      " models";
    document.querySelectorAll("th[aria-sort]").forEach(function (th) { th.removeAttribute("aria-sort"); });
    if (at >= 0) {
      var head = document.querySelector('th button[data-key="' + columns[at].key + '"]').parentNode;
      head.setAttribute("aria-sort", view.dir === "desc" ? "descending" : "ascending");
    }
  }

  function save() {
    var params = new URLSearchParams();
    if (view.sort) { params.set("sort", view.sort); params.set("dir", view.dir); }
    if (query.value) { params.set("q", query.value); }
    if (status.value) { params.set("status", status.value); }
    history.replaceState(null, "", "#" + params.toString());
  }

  function load() {
    var params = new URLSearchParams(location.hash.slice(1));
    var key = params.get("sort");
    view.sort = columns.some(function (c) { return c.key === key; }) ? key : null;
    view.dir = params.get("dir") === "desc" ? "desc" : "asc";
    query.value = params.get("q") || "";
    status.value = ["ok", "failed"].indexOf(params.get("status")) >= 0 ? params.get("status") : "";
    apply();
  }

  document.querySelectorAll("th button[data-key]").forEach(function (button) {
    button.addEventListener("click", function () {
      var key = button.getAttribute("data-key");
      view.dir = view.sort === key && view.dir === "asc" ? "desc" : "asc";
      view.sort = key;
      apply();
      save();
    });
  });
  query.addEventListener("input", function () { apply(); save(); });
  status.addEventListener("change", function () { apply(); save(); });
  window.addEventListener("hashchange", load);
  load();
  document.body.setAttribute("data-ready", Math.round(performance.now()) + " ms");  // a test reads it
}());
