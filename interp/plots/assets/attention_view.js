// The attention view: hover a token to see where each head attends from it and to it (see _attention_view.py).
(function () {
  var D = __INTERP_DATA__, root = document.getElementById(D.id);
  if (!root) return;
  var nq = D.n_query, nk = D.tokens.length, off = nk - nq, pinned = null, shown = null;
  var on = D.heads.map(function () { return true; });
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function show(tok) { return tok === "" ? "\u2205" : tok.replace(/\n/g, "\\n"); }
  var controls = root.querySelector(".ia-controls"), strip = root.querySelector(".ia-tokens"),
      detail = root.querySelector(".ia-detail");
  D.heads.forEach(function (h, i) {
    var lab = el("label"), box = el("input");
    box.type = "checkbox"; box.checked = true; box.setAttribute("data-head", i);
    box.addEventListener("change", function () { on[i] = box.checked; render(shown); });
    lab.appendChild(box); lab.appendChild(document.createTextNode(" " + h));
    controls.appendChild(lab);
  });
  var spans = D.tokens.map(function (t, i) {
    var s = el("span", "ia-tok", show(t));
    s.setAttribute("data-pos", i); s.tabIndex = 0; s.title = "position " + i;
    s.addEventListener("mouseover", function () { if (pinned === null) render(i); });
    s.addEventListener("focus", function () { if (pinned === null) render(i); });
    s.addEventListener("click", function () {
      if (pinned !== null) spans[pinned].classList.remove("ia-pinned");
      pinned = pinned === i ? null : i;
      if (pinned !== null) s.classList.add("ia-pinned");
      render(i);
    });
    strip.appendChild(s); strip.appendChild(document.createTextNode(" "));
    return s;
  });
  function cell(tok, w, pos) {
    var c = el("span", "ia-cell");
    c.setAttribute("data-pos", pos);
    c.appendChild(el("span", "ia-t", show(tok)));
    if (w === null) { c.classList.add("ia-none"); c.appendChild(el("span", "ia-w", "\u00b7")); return c; }
    c.setAttribute("data-weight", w);
    c.appendChild(el("span", "ia-w", w.toFixed(3)));
    c.style.background = "rgba(33, 102, 172, " + Math.min(1, w).toFixed(3) + ")";
    if (w > 0.55) c.style.color = "#fff", c.lastChild.style.color = "#fff";
    return c;
  }
  function render(i) {
    shown = i;
    spans.forEach(function (s, j) { s.classList.toggle("ia-active", j === i); });
    detail.textContent = "";
    if (i === null) { detail.appendChild(el("span", "ia-hint", "Hover a token (click to pin it).")); return; }
    D.heads.forEach(function (h, hi) {
      if (!on[hi]) return;
      var box = el("div", "ia-head"), A = D.patterns[hi];
      box.setAttribute("data-head", hi);
      box.appendChild(el("div", "ia-head-name", h));
      var from = el("div", "ia-row ia-from"), to = el("div", "ia-row ia-to");
      from.appendChild(el("span", "ia-dir", "from " + show(D.tokens[i]) + " \u2192"));
      to.appendChild(el("span", "ia-dir", "to " + show(D.tokens[i]) + " \u2190"));
      for (var k = 0; k < nk; k++) {
        from.appendChild(cell(D.tokens[k], i - off >= 0 ? A[i - off][k] : null, k));
      }
      for (var q = 0; q < nk; q++) {
        to.appendChild(cell(D.tokens[q], q - off >= 0 ? A[q - off][i] : null, q));
      }
      box.appendChild(from); box.appendChild(to);
      detail.appendChild(box);
    });
  }
  render(nk - 1);  // start on the last token: where the prediction is made
})();
