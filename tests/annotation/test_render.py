"""rcea.annotation.render: Markdown and TeX to sanitised HTML with MathML."""

from __future__ import annotations

import re
import time

import pytest

from rcea.annotation.render import (
    ALLOWED_TAGS,
    MAX_TEXT,
    html_text,
    render,
    sanitize,
    shown_hash,
)

SOLUTION = r"""The sum is $\frac{n}{2}(a + l)$ and $\sqrt{2} < 2$.

\[
S = \frac{100}{2}(1 + 100)
\]

$$\boxed{5050}$$

\begin{align}
a &= 1 \\
b &= 2
\end{align}

$$\begin{aligned} x &= 1 \\ y &= 2 \end{aligned}$$

Inline \(x^2\) too.

```output
print(sum(range(101)))
```
"""


def tags(fragment: str) -> set[str]:
    return set(re.findall(r"<([a-z0-9]+)", fragment))


def test_each_construct_renders() -> None:
    out = render(SOLUTION)
    assert "<mfrac>" in out and "<msqrt>" in out
    assert out.count('display="block"') >= 4  # \[ \], $$ $$ twice, align
    assert '<menclose notation="box">' in out  # \boxed
    assert out.count("<mtable") == 2  # align and aligned
    assert "<mi>&amp;</mi>" not in out  # aligned is laid out, not shown as "&"
    assert "<msup><mi>x</mi><mn>2</mn></msup>" in out  # \( \)
    assert re.search(r"<pre><code[^>]*>print\(sum\(range\(101\)\)\)\n</code></pre>", out)
    assert "tex-error" not in out


def test_markdown_constructs() -> None:
    out = render("# Head\n\n- one\n- **two**\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n`x`")
    assert {"h1", "ul", "li", "strong", "table", "td", "code"} <= tags(out)


@pytest.mark.parametrize("text", ["3*5-3*3 = 6", "(a+b)*(c-d)", "2*x*3", "a[1]*b{2}"])
def test_a_star_between_operands_is_a_times_sign(text: str) -> None:
    """CommonMark would italicise ``5-3`` in ``3*5-3*3``: the annotator would read
    another expression."""
    out = render(text)
    assert "<em>" not in out and "<strong>" not in out
    assert text in html_text(out)


def test_emphasis_still_renders() -> None:
    out = render("**bold** and *word* and a**b**c, 2 * 3 * 4")
    assert out.count("<strong>") == 2 and out.count("<em>") == 1
    assert "2 * 3 * 4" in out


def test_one_step_per_line_stays_one_step_per_line() -> None:
    out = render("Step 1: 3*5 = 15\nStep 2: 15-9 = 6")
    assert "Step 1: 3*5 = 15<br>" in out and "Step 2" in out


def test_a_bare_boxed_answer_is_a_formula() -> None:
    out = render("3*2 = 6\n\\boxed{\\frac{1}{2}} and \\boxed{ unclosed")
    assert 'notation="box"' in out and "<mfrac>" in out
    assert "\\boxed{ unclosed" in html_text(out)  # unbalanced: shown as written


def test_a_bare_boxed_bomb_falls_back_quickly() -> None:
    began = time.monotonic()
    out = render("\\boxed" + "{" * 10_000 + "}" * 10_000)
    assert time.monotonic() - began < 5 and "<math" not in out


def test_dollar_amounts_stay_text() -> None:
    out = render("It costs $5 and $6.")
    assert "<math" not in out and "$5 and $6" in out


def test_failed_formula_shows_marked_source() -> None:
    out = render(r"bad $x^{$ here")
    assert '<code class="tex-error" title="not rendered">x^{</code>' in out


@pytest.mark.parametrize(
    "text",
    [
        "<script>alert(1)</script>",
        "<img src=x onerror=alert(1)>",
        "[click](javascript:alert(1)) <a href='javascript:alert(1)'>x</a>",
        "![pic](https://example.com/x.png)",
        r"$\href{javascript:alert(1)}{x}$",
        r"$\text{<img src=x onerror=alert(1)>}$ $\text{<script>alert(1)</script>}$",
        '<div style="position:fixed;top:0;left:0;width:100%;height:100%">x</div>',
        r"$\style{position:fixed}{x}$ $\color{red}{x}$",
        "<iframe src=x></iframe><form><input></form><svg onload=alert(1)>",
        '<math><maction actiontype="statusline"><mi href="javascript:1">x</mi></maction></math>',
    ],
)
def test_hostile_input_is_inert(text: str) -> None:
    out = render(text)
    assert tags(out) <= ALLOWED_TAGS
    lowered = out.lower()
    for bad in ("<script", "<img", "<a ", "<iframe", "<form", "<svg", "<style", "<maction"):
        assert bad not in lowered
    for tag in re.findall(r"<[a-z][^>]*>", lowered):  # real tags (not escaped text)
        assert not re.search(r"\s(on\w+|href|src|style|actiontype)\s*=", tag), tag


def test_sanitizer_drops_what_is_not_allowed() -> None:
    dirty = (
        '<p onclick="x" style="color:red">a<script>b</script><a href="http://x">c</a>'
        '<math><mi href="http://x" mathvariant="bold">d</mi></math></p>'
    )
    assert sanitize(dirty) == '<p>ac<math><mi mathvariant="bold">d</mi></math></p>'


def test_markers_still_show() -> None:
    out = render("\u202eevil and $x\u200by$")
    assert "⟨U+202E⟩evil" in out and "⟨U+200B⟩" in out
    assert "\u202e" not in out and "\u200b" not in out


@pytest.mark.parametrize(
    "text",
    [
        "$" + "x" * 1_000_000 + "$",  # a 1 MB formula
        "$" + "{" * 10_000 + "$",  # 10,000 nested braces
        "$" + "{" * 10_000 + "x" + "}" * 10_000 + "$",
        "\\(" * 45_000,
        "\\[\n" * 30_000,
        "\\begin{align}\n" * 7_000,
        "a$b" * 30_000,
    ],
)
def test_hostile_sizes_fall_back_quickly(text: str) -> None:
    t0 = time.perf_counter()
    out = render(text)
    assert time.perf_counter() - t0 < 5
    assert "<math" not in out or len(text) < MAX_TEXT


def test_huge_formula_is_source() -> None:
    text = "$" + "{" * 10_000 + "x" + "}" * 10_000 + "$"
    assert "tex-error" in render(text)
    big = "$" + "x" * 1_000_000 + "$"
    out = render(big)
    assert out.startswith('<div class="rendered"><pre class="source-only">$xxx')


def test_deterministic_and_hash() -> None:
    assert render(SOLUTION) == render(SOLUTION)
    a = {"left": render(SOLUTION), "pair": "p1"}
    assert shown_hash(a) == shown_hash(dict(reversed(a.items())))
    assert shown_hash(a) != shown_hash({**a, "pair": "p2"})
    assert re.fullmatch(r"[0-9a-f]{64}", shown_hash(a))


def test_html_text() -> None:
    assert html_text("<p>a &amp; <em>b</em></p>") == "a & b"


def test_cache_is_transparent() -> None:
    from rcea.annotation.render import CACHED_TEXT, clear_cache

    short, long = SOLUTION, SOLUTION + "x" * CACHED_TEXT
    first = render(short), render(long)
    clear_cache()
    assert (render(short), render(long)) == first
