// Live updates for the Jobwarden console, without full reloads.
//
// Every element with data-live="URL" is refreshed every data-every milliseconds:
// the URL returns the server-rendered (and server-escaped) fragment, which
// replaces the element's content. Polling pauses while the tab is hidden, backs
// off after errors, and never runs while the user is typing in a form inside
// the element. Pages work without this script; it only saves reloads.
"use strict";
(function () {
  function refresh(el) {
    var url = el.getAttribute("data-live");
    var every = parseInt(el.getAttribute("data-every"), 10) || 3000;
    var failures = 0;
    function tick() {
      var delay = every * Math.min(1 + failures, 10);
      if (document.hidden || el.contains(document.activeElement) && document.activeElement !== document.body) {
        window.setTimeout(tick, delay);
        return;
      }
      fetch(url, { credentials: "same-origin", headers: { "X-Jobwarden-Live": "1" } })
        .then(function (response) {
          if (!response.ok) { throw new Error(String(response.status)); }
          return response.text();
        })
        .then(function (html) {
          el.innerHTML = html;
          failures = 0;
          el.setAttribute("data-refreshed", String(Date.now()));
        })
        .catch(function () { failures += 1; })
        .finally(function () { window.setTimeout(tick, every * Math.min(1 + failures, 10)); });
    }
    window.setTimeout(tick, every);
  }
  document.addEventListener("DOMContentLoaded", function () {
    var live = document.querySelectorAll("[data-live]");
    for (var i = 0; i < live.length; i++) { refresh(live[i]); }
  });
})();
