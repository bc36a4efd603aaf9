// The attribution-graph viewer: one canvas by layer x position, node and edge sliders, hover details (see _feature_graph.py).
(function () {
  var D = __INTERP_DATA__;
  var root = document.getElementById(D.id);
  var canvas = root.querySelector("canvas"), ctx = canvas.getContext("2d");
  var info = root.querySelector(".fg-info");
  var nodeSlider = root.querySelector(".fg-nodes"), edgeSlider = root.querySelector(".fg-edges");
  var nodeOut = root.querySelector(".fg-nodes-n"), edgeOut = root.querySelector(".fg-edges-n");
  var N = D.label.length, nPos = D.tokens.length, nRows = D.n_layers + 2;
  var left = 70, top = 10, bottom = 60;
  var avail = (canvas.parentNode.clientWidth || 1100) - left - 12;
  var colW = Math.max(36, Math.min(160, Math.floor(avail / Math.max(nPos, 1))));
  // rows fit the window below the viewer's top (every layer and the token axis in view when it opens): at most
  // row_height, at least 14 px (then the box scrolls)
  var wrapTop = canvas.parentNode.getBoundingClientRect().top + (window.scrollY || 0);
  var availH = Math.max(240, (window.innerHeight || 900) - Math.max(0, wrapTop) - 16);
  var rowH = Math.max(14, Math.min(D.row_height, Math.floor((availH - top - bottom - 4) / nRows)));
  canvas.width = left + colW * nPos + 10;
  canvas.height = top + rowH * nRows + bottom;
  var X = new Float64Array(N), Y = new Float64Array(N), R = new Float64Array(N);
  var shown = new Uint8Array(N), hovered = -1, pinned = -1;
  function row(i) { return D.n_layers - D.layer[i]; }  // outputs on top, tokens at the bottom
  function layout() {
    var cells = {};
    for (var i = 0; i < N; i++) {
      if (!shown[i]) continue;
      var key = D.layer[i] + "," + D.pos[i];
      (cells[key] = cells[key] || []).push(i);
    }
    Object.keys(cells).forEach(function (key) {
      var ids = cells[key];
      ids.sort(function (a, b) { return D.rank[a] - D.rank[b]; });
      var k = ids.length, cols = Math.ceil(Math.sqrt(k * colW / rowH)), rows = Math.ceil(k / cols);
      var dx = (colW - 8) / cols, dy = (rowH - 8) / rows, r = Math.max(1.5, Math.min(7, Math.min(dx, dy) / 2 - 0.5));
      ids.forEach(function (i, j) {
        var c = j % cols, rr = Math.floor(j / cols);
        X[i] = left + D.pos[i] * colW + 4 + dx * (c + 0.5);
        Y[i] = top + row(i) * rowH + 4 + dy * (rr + 0.5);
        R[i] = r;
      });
    });
  }
  var COLORS = {feature: "#1f77b4", error: "#7f7f7f", token: "#2ca02c", logit: "#d62728"};
  var edgeLimit = 0, visibleEdges = [];
  var wmax = 1;
  function recompute() {
    var k = +nodeSlider.value;
    for (var i = 0; i < N; i++)
      shown[i] = (D.kind[i] === "token" || D.kind[i] === "logit" || D.rank[i] < k || D.pin[i]) ? 1 : 0;
    layout();
    // the m strongest edges by influence-weighted weight whose ends are drawn, then the edges always drawn (into the
    // outputs, and each drawn node's strongest inputs) that are not among them
    visibleEdges = [];
    var m = Math.min(+edgeSlider.value, D.edges.length), hidden = 0, extra = 0;
    var taken = new Uint8Array(D.edges.length);
    for (var e = 0; e < m; e++) {
      if (shown[D.edges[e][0]] && shown[D.edges[e][1]]) { visibleEdges.push(e); taken[e] = 1; } else hidden++;
    }
    for (var a = 0; a < D.always.length; a++) {
      var ea = D.always[a];
      if (taken[ea] || !shown[D.edges[ea][0]] || !shown[D.edges[ea][1]]) continue;
      visibleEdges.push(ea); taken[ea] = 1; extra++;
    }
    wmax = 1e-30;
    for (var j = 0; j < visibleEdges.length; j++) wmax = Math.max(wmax, Math.abs(D.edges[visibleEdges[j]][2]));
    nodeOut.textContent = k + " of " + D.n_ranked;
    // short (the controls' row must not wrap): drawn; of the m asked, those joining hidden nodes; the always-drawn
    var txt = visibleEdges.length + " drawn (" + (hidden ? hidden + " of " + m + " join hidden nodes, " : "") +
      "+" + extra + " strongest inputs)";
    if (D.edges_asked > D.edges.length) txt += ", edges=" + D.edges_asked + " > " + D.edges.length + " held";
    edgeOut.textContent = txt;
    edgeOut.title = "the " + m + " strongest edges by influence-weighted weight whose ends are drawn, and the " +
      "strongest inputs of the outputs and of each drawn node; the page holds " + D.edges.length + " of the " +
      "graph's " + D.n_edges_total + " edges";
    draw();
  }
  function draw() {
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.font = "11px sans-serif"; ctx.fillStyle = "#444"; ctx.textAlign = "right"; ctx.textBaseline = "middle";
    for (var r = 0; r < nRows; r++) {
      var lab = r === 0 ? "output" : (r === nRows - 1 ? "tokens" : "L" + (D.n_layers - r));
      ctx.fillText(lab, left - 6, top + r * rowH + rowH / 2);
      ctx.strokeStyle = "#eee"; ctx.beginPath();
      ctx.moveTo(left, top + r * rowH); ctx.lineTo(canvas.width, top + r * rowH); ctx.stroke();
    }
    ctx.textAlign = "center"; ctx.textBaseline = "top";
    for (var p = 0; p < nPos; p++) {
      var x = left + p * colW + colW / 2;
      ctx.save(); ctx.translate(x, top + nRows * rowH + 4); ctx.rotate(-0.5);
      ctx.textAlign = "right"; ctx.fillText(D.tokens[p].slice(0, 14), 0, 0); ctx.restore();
    }
    var focus = pinned >= 0 ? pinned : hovered;
    for (var j = visibleEdges.length - 1; j >= 0; j--) {
      var ed = D.edges[visibleEdges[j]], s = ed[0], t = ed[1], w = ed[2];
      var on = focus >= 0 && (s === focus || t === focus);
      ctx.strokeStyle = w > 0 ? (on ? "rgba(31,119,180,0.95)" : "rgba(31,119,180,0.25)")
                              : (on ? "rgba(214,39,40,0.95)" : "rgba(214,39,40,0.25)");
      ctx.lineWidth = (on ? 1.5 : 0.5) + 3 * Math.abs(w) / wmax;
      ctx.beginPath(); ctx.moveTo(X[s], Y[s]); ctx.lineTo(X[t], Y[t]); ctx.stroke();
    }
    for (var i = 0; i < N; i++) {
      if (!shown[i]) continue;
      ctx.fillStyle = COLORS[D.kind[i]] || "#000";
      ctx.beginPath();
      if (D.kind[i] === "error") ctx.rect(X[i] - R[i], Y[i] - R[i], 2 * R[i], 2 * R[i]);
      else ctx.arc(X[i], Y[i], R[i], 0, 2 * Math.PI);
      ctx.fill();
      if (i === focus) { ctx.strokeStyle = "#000"; ctx.lineWidth = 2; ctx.stroke(); }
    }
  }
  function at(mx, my) {  // the drawn node under (mx, my), searching its cell only
    var col = Math.floor((mx - left) / colW), r = Math.floor((my - top) / rowH);
    if (col < 0 || col >= nPos || r < 0 || r >= nRows) return -1;
    var layer = D.n_layers - r, best = -1, bd = 1e9;
    var ids = D.cell[layer + "," + col] || [];
    for (var j = 0; j < ids.length; j++) {
      var i = ids[j];
      if (!shown[i]) continue;
      var d = Math.hypot(X[i] - mx, Y[i] - my);
      if (d <= R[i] + 3 && d < bd) { bd = d; best = i; }
    }
    return best;
  }
  function fmt(v) {
    return Math.abs(v) >= 1e4 || (Math.abs(v) < 1e-3 && v !== 0) ? v.toExponential(3) : v.toFixed(4);
  }
  function el(tag, text, cls) {
    var e = document.createElement(tag); if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls; return e;
  }
  function table(rows) {
    var t = el("table");
    rows.forEach(function (r) {
      var tr = el("tr"); tr.appendChild(el("td", r[0]));
      tr.appendChild(el("td", fmt(r[1]), "num")); t.appendChild(tr);
    });
    return t;
  }
  function show(i) {
    info.textContent = "";
    if (i < 0) { info.appendChild(el("p", "Hover a node (click pins it).", "fg-muted")); return; }
    info.appendChild(el("h4", D.label[i] + "  (" + D.kind[i] + ")"));
    var facts;
    if (D.kind[i] === "logit") {  // the output itself: its influence on itself says nothing
      facts = [[D.diff ? "logit difference (the output this graph explains)" : "logit (the output this graph explains)",
                D.value[i]]];
      if (D.prob[i] !== null) facts.push([D.diff ? "the model's probability of the target token" :
                                          "the model's probability of this token", D.prob[i]]);
      if (D.act[i] !== D.value[i]) facts.push(["activation", D.act[i]]);
    } else {
      facts = [["activation", D.act[i]], ["influence on the output", D.infl[i]]];
      if (D.kind[i] === "feature") facts.push(["value (pre-activation)", D.value[i]]);
    }
    info.appendChild(table(facts));
    var eff = D.effects[i];
    if (eff && eff.length) {
      var h = eff.length / 2;
      info.appendChild(el("h4", "logit effects (per unit activation, through the final norm)"));
      info.appendChild(el("div", "promotes", "fg-muted")); info.appendChild(table(eff.slice(0, h)));
      info.appendChild(el("div", "suppresses", "fg-muted")); info.appendChild(table(eff.slice(h)));
    } else if (D.no_effects && D.kind[i] === "feature") {
      info.appendChild(el("div", "logit effects not computed: attribution_graph(..., logit_effects=5)", "fg-muted"));
    }
    info.appendChild(el("h4", "strongest incoming edges"));
    info.appendChild(D.ins[i].length ? table(D.ins[i]) : el("div", "none (a source)", "fg-muted"));
    info.appendChild(el("h4", "strongest outgoing edges"));
    info.appendChild(D.outs[i].length ? table(D.outs[i]) : el("div", "none", "fg-muted"));
    var cx = D.contexts[i];
    if (cx && cx.length) {
      info.appendChild(el("h4", "top activating contexts"));
      cx.forEach(function (c) { info.appendChild(el("div", c, "ctx")); });
    }
  }
  function pos(ev) { var b = canvas.getBoundingClientRect(); return [ev.clientX - b.left, ev.clientY - b.top]; }
  canvas.addEventListener("mousemove", function (ev) {
    var p = pos(ev), i = at(p[0], p[1]);
    if (i !== hovered) { hovered = i; if (pinned < 0) show(i); draw(); }
  });
  canvas.addEventListener("click", function (ev) {
    var p = pos(ev), i = at(p[0], p[1]);
    pinned = (i === pinned) ? -1 : i; show(pinned >= 0 ? pinned : hovered); draw();
  });
  nodeSlider.addEventListener("input", recompute);
  edgeSlider.addEventListener("input", recompute);
  window.interpFeatureGraph = window.interpFeatureGraph || {};
  window.interpFeatureGraph[D.id] = {
    xy: function (label) { var i = D.label.indexOf(label); if (i < 0 || !shown[i]) return null;
      var b = canvas.getBoundingClientRect(); return [b.left + X[i], b.top + Y[i]]; },
    shownNodes: function () { var n = 0; for (var i = 0; i < N; i++) n += shown[i]; return n; },
    drawnEdges: function () { return visibleEdges.length; },
    drawnInto: function (label) { var t = D.label.indexOf(label), n = 0;
      visibleEdges.forEach(function (e) { if (D.edges[e][1] === t) n++; }); return n; },
    edgeText: function () { return edgeOut.textContent; }
  };
  recompute(); show(-1);
})();
