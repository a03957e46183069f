// MathJax for the estimator formulas (pymdownx.arithmatex, generic mode). No CDN is
// loaded: the page shows the TeX source when MathJax itself is not available offline.
window.MathJax = {
  tex: { inlineMath: [["\\(", "\\)"]], displayMath: [["\\[", "\\]"]] },
  options: { ignoreHtmlClass: ".*", processHtmlClass: "arithmatex" },
};
