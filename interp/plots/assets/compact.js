// Decompress a gzip+base64 block into text; then run plotly.js once and draw every figure in order.
(function () {
  var status = document.getElementById("interp-status") || document.createElement("p");
  function block(id) {
    var s = atob(document.getElementById(id).textContent.trim()), n = s.length, b = new Uint8Array(n);
    for (var i = 0; i < n; i++) b[i] = s.charCodeAt(i);
    return new Response(new Blob([b]).stream().pipeThrough(new DecompressionStream("gzip"))).text();
  }
  if (typeof DecompressionStream === "undefined") {
    status.textContent = "This browser cannot decompress the page's figures (no DecompressionStream); " +
      "open it in a recent Chrome, Edge, Firefox or Safari, or export the figures without compact=True.";
    return;
  }
  var ready = window.Plotly ? Promise.resolve() : block("interp-plotlyjs").then(function (src) {
    window.PlotlyConfig = {MathJaxConfig: "local"};
    var s = document.createElement("script");
    s.textContent = src;
    document.head.appendChild(s);
  });
  var figs = Array.prototype.slice.call(document.querySelectorAll("div.interp-figure"));
  figs.reduce(function (p, div) {
    return p.then(function () { return block(div.getAttribute("data-spec")); }).then(function (text) {
      var spec = JSON.parse(text);
      return Plotly.newPlot(div, spec.data, spec.layout, __INTERP_CONFIG__);
    });
  }, ready).then(function () { status.remove(); }, function (e) {
    status.textContent = "Drawing the figures failed: " + e;
  });
})();
