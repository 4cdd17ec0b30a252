// The execution page's Streams panel: ask for the chunks after those shown, every second,
// until the run is finished (durableflow/admin/streams.py answers).
(function () {
  "use strict";
  function ready(fn) {
    if (document.readyState !== "loading") fn(); else document.addEventListener("DOMContentLoaded", fn);
  }
  ready(function () {
    var panel = document.querySelector("[data-df-streams]");
    if (!panel || panel.hasAttribute("data-done")) return;
    var url = panel.getAttribute("data-url");
    var pollMs = parseInt(panel.getAttribute("data-poll-ms"), 10) || 1000;
    var state = panel.querySelector(".df-streams-state");

    function section(streamId) {
      var found = Array.prototype.find.call(panel.querySelectorAll(".df-stream"), function (el) {
        return el.getAttribute("data-stream") === streamId;
      });
      if (found) return found;
      var div = document.createElement("div");
      div.className = "df-stream";
      div.setAttribute("data-stream", streamId);
      div.setAttribute("data-last", "0");
      var h3 = document.createElement("h3");
      h3.textContent = streamId + " ";
      var count = document.createElement("span");
      count.className = "df-quiet df-stream-count";
      h3.appendChild(count);
      var ol = document.createElement("ol");
      ol.className = "df-stream-chunks";
      div.appendChild(h3);
      div.appendChild(ol);
      panel.insertBefore(div, state);
      return div;
    }

    function positions() {
      var after = {};
      panel.querySelectorAll(".df-stream").forEach(function (el) {
        after[el.getAttribute("data-stream")] = parseInt(el.getAttribute("data-last"), 10) || 0;
      });
      return after;
    }

    function show(answer) {
      Object.keys(answer.streams).forEach(function (streamId) {
        var stream = answer.streams[streamId];
        var el = section(streamId);
        var list = el.querySelector(".df-stream-chunks");
        stream.chunks.forEach(function (chunk) {
          if (chunk.seq <= (parseInt(el.getAttribute("data-last"), 10) || 0)) return;  // shown already
          var li = document.createElement("li");
          li.value = chunk.seq;
          li.setAttribute("data-seq", chunk.seq);
          var code = document.createElement("code");
          code.textContent = chunk.text;
          li.appendChild(code);
          list.appendChild(li);
          el.setAttribute("data-last", chunk.seq);
        });
        el.querySelector(".df-stream-count").textContent =
          stream.last + (stream.last === 1 ? " chunk" : " chunks");
      });
    }

    function poll() {
      var query = "?after=" + encodeURIComponent(JSON.stringify(positions()));
      fetch(url + query, {credentials: "same-origin", headers: {"Accept": "application/json"}})
        .then(function (response) {
          if (!response.ok) throw new Error("HTTP " + response.status);
          return response.json();
        })
        .then(function (answer) {
          show(answer);
          state.textContent = "Live: new chunks appear as the run writes them.";
          if (answer.done) {
            panel.setAttribute("data-done", "");
            state.textContent = "The run is finished: its streams are complete.";
          } else {
            setTimeout(poll, pollMs);
          }
        })
        .catch(function (error) {
          state.textContent = "Live updates paused (" + error.message + "); retrying.";
          setTimeout(poll, pollMs * 5);
        });
    }
    setTimeout(poll, pollMs);
  });
})();
