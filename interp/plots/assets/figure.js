// Draw one plotly figure of a page (plotly.js is inlined once in the page head).
(function () {
  var s = __INTERP_SPEC__;
  Plotly.newPlot(__INTERP_ID__, s.data, s.layout, __INTERP_CONFIG__);
})();
