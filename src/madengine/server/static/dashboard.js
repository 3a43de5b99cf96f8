/* madengine dashboard: keeps an open page current, submits filter lists when changed, sorts tables,
   remembers who triages. The project's own code; no library. The server renders every page (escaped);
   this script swaps the page's #live part for a fresh copy of the same URL when /api/events says rows
   landed or an alert was triaged (not while someone is typing in it), sorts the rows of a
   data-sortable table on a click on its header (a paged table sorts on the server: its headers are
   links), and fills the "your name" field of triage forms from the last one sent. */
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  var fetching = false;
  var again = false;

  function show(text, name) {
    if (state) { state.textContent = text; state.setAttribute("data-state", name); }
  }

  function editing() {
    var active = document.activeElement;
    return active && live && live.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName);
  }

  function refresh() {
    if (editing()) {  /* a fresh copy would throw away what is being typed: after it */
      document.activeElement.addEventListener("blur", function () { setTimeout(refresh, 0); }, {once: true});
      return;
    }
    if (fetching) { again = true; return; }
    fetching = true;
    fetch(window.location.href, {headers: {"X-Dashboard-Fragment": "1"}, credentials: "same-origin"})
      .then(function (response) {
        if (!response.ok) { throw new Error("HTTP " + response.status); }
        var version = response.headers.get("X-Dashboard-Version") || "";
        return response.text().then(function (html) { return [html, version]; });
      })
      .then(function (result) {
        live.innerHTML = result[0];  /* server-rendered with autoescape: text stays text */
        remember();
        live.setAttribute("data-version", result[1]);
        document.body.setAttribute("data-refreshed", String(Date.now()));
        show("live", "on");
      })
      .catch(function () { show("reconnecting…", "error"); })
      .then(function () {
        fetching = false;
        if (again) { again = false; refresh(); }
      });
  }

  function listen() {
    if (!live || !window.EventSource) { return; }
    var source = new EventSource("/api/events");
    source.onopen = function () { show("live", "on"); };
    source.onerror = function () { show("reconnecting…", "error"); };
    source.onmessage = function (event) {
      var data;
      try { data = JSON.parse(event.data); } catch (e) { return; }
      if (data.error) { show("database unreachable", "error"); return; }
      var token = data.token !== undefined ? data.token : data.version;
      if (String(token) !== live.getAttribute("data-version")) { refresh(); }
    };
  }

  function cellValue(row, index) {
    var cell = row.cells[index];
    if (!cell) { return ""; }
    var raw = cell.hasAttribute("data-value") ? cell.getAttribute("data-value") : cell.textContent.trim();
    var cleaned = raw.replace(/[,%\s]/g, "").replace("−", "-");
    var number = cleaned === "" ? NaN : Number(cleaned);  /* the whole text a number, or text (dates stay text) */
    return isNaN(number) ? raw.toLowerCase() : number;
  }

  function sortBy(header) {
    var table = header.closest("table");
    var body = table && table.tBodies[0];
    if (!body) { return; }
    var index = Array.prototype.indexOf.call(header.parentNode.cells, header);
    var ascending = header.getAttribute("aria-sort") !== "ascending";
    Array.prototype.forEach.call(header.parentNode.cells, function (cell) { cell.removeAttribute("aria-sort"); });
    header.setAttribute("aria-sort", ascending ? "ascending" : "descending");
    var rows = Array.prototype.slice.call(body.rows);
    rows.sort(function (a, b) {
      var x = cellValue(a, index), y = cellValue(b, index);
      if (typeof x !== typeof y) { x = String(x); y = String(y); }
      return (x < y ? -1 : x > y ? 1 : 0) * (ascending ? 1 : -1);
    });
    rows.forEach(function (row) { body.appendChild(row); });
  }

  document.addEventListener("click", function (event) {
    var header = event.target.closest && event.target.closest("table[data-sortable] thead th");
    if (header) { sortBy(header); }
  });

  function remember() {  /* who triages: kept in this browser only */
    var name = "";
    try { name = window.localStorage.getItem("madengine-triage-by") || ""; } catch (e) { return; }
    Array.prototype.forEach.call(document.querySelectorAll("input[data-remember='by']"), function (input) {
      if (!input.value) { input.value = name; }
    });
  }

  document.addEventListener("submit", function (event) {
    var by = event.target.querySelector && event.target.querySelector("input[data-remember='by']");
    if (by && by.value) {
      try { window.localStorage.setItem("madengine-triage-by", by.value); } catch (e) { /* private mode */ }
    }
  });

  Array.prototype.forEach.call(document.querySelectorAll("select[data-autosubmit]"), function (select) {
    select.addEventListener("change", function () { if (select.form) { select.form.submit(); } });
  });
  remember();
  listen();
  document.documentElement.setAttribute("data-ready", "1");
}());
