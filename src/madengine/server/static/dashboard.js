/* madengine dashboard: keeps an open page current, and submits filter lists when changed.
   The project's own code; no library. The server renders every page (escaped); this script only
   swaps the page's #live part for a fresh copy of the same URL when /api/events says rows landed. */
(function () {
  "use strict";
  var live = document.getElementById("live");
  var state = document.getElementById("live-state");
  var fetching = false;
  var again = false;

  function show(text, name) {
    if (state) { state.textContent = text; state.setAttribute("data-state", name); }
  }

  function refresh() {
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
      if (String(data.version) !== live.getAttribute("data-version")) { refresh(); }
    };
  }

  Array.prototype.forEach.call(document.querySelectorAll("select[data-autosubmit]"), function (select) {
    select.addEventListener("change", function () { if (select.form) { select.form.submit(); } });
  });
  listen();
  document.documentElement.setAttribute("data-ready", "1");
}());
