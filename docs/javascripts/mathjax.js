// MathJax 3 configuration for pymdownx.arithmatex (generic: true), as mkdocs-material documents it:
// typeset only the math that arithmatex marked (class "arithmatex": $...$ inline, $$...$$ display),
// and again after each instant-navigation page change (document$).
window.MathJax = {
  tex: {
    inlineMath: [["\\(", "\\)"]],
    displayMath: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};

document$.subscribe(() => {
  MathJax.startup.output.clearCache();
  MathJax.typesetClear();
  MathJax.texReset();
  MathJax.typesetPromise();
});
