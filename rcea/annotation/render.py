"""Markdown and TeX rendered to sanitised HTML with MathML, for Label Studio tasks.

:func:`render` turns a text (a solution, a problem statement) into an HTML fragment that
Label Studio's ``<HyperText>`` shows and Chromium lays out natively:

- Markdown (CommonMark through markdown-it-py, tables and strikethrough on, raw HTML
  *off*: ``<script>`` in a text is shown as text), with two departures for model
  outputs: a single newline is a line break (solutions are written one step per line),
  and a lone ``*`` between two operands (``3*5-3*3``, ``(a+b)*(c-d)``) is a
  multiplication sign, not emphasis (``**bold**`` and ``*word*`` still are);
- TeX math through latex2mathml: inline ``$…$`` and ``\\(…\\)``, display ``$$…$$`` and
  ``\\[…\\]``, top-level ``align``-style environments, ``aligned``/``split`` inside
  display math (shown as ``align*``), ``\\boxed{}`` inside math or bare in the text
  (``<menclose notation="box">``,
  framed by the label config's stylesheet);
- a formula that fails to convert, is longer than :data:`MAX_FORMULA` characters or
  nests braces deeper than :data:`MAX_DEPTH` is shown as its source, marked
  (``<code class="tex-error">``); a text longer than :data:`MAX_TEXT` characters is
  shown whole as source (``<pre class="source-only">``) without being parsed;
- hidden characters become ``⟨U+XXXX⟩`` first (:func:`rcea.annotation.display.marked`).

Every fragment then goes through an allowlist sanitizer (nh3, i.e. ammonia) that keeps
only :data:`ALLOWED_TAGS` with :data:`ALLOWED_ATTRIBUTES` and :data:`ALLOWED_CLASSES`:
no script, style, event handler, link, image, iframe, form, MathML ``href`` or
``actiontype`` survives. The output is deterministic (same text, same HTML), so the
render is part of a task's frozen content (:func:`shown_hash`).
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections.abc import Mapping, Sequence
from functools import cache, lru_cache
from typing import Any

import nh3
from latex2mathml.converter import convert
from markdown_it import MarkdownIt
from markdown_it.rules_block import StateBlock
from markdown_it.rules_inline import StateInline
from mdit_py_plugins.amsmath import RE_OPEN, amsmath_block, amsmath_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

from rcea.annotation.display import marked

#: Longest formula converted to MathML; a longer one is shown as marked source.
MAX_FORMULA = 20_000
#: Deepest brace / ``\\left`` / environment nesting converted; deeper shows as source.
MAX_DEPTH = 100
#: Longest text parsed as Markdown; a longer one is shown whole as source (real
#: solutions are far shorter; Markdown's own emphasis rules grow faster than linearly
#: on adversarial input).
MAX_TEXT = 100_000

MATHML_TAGS = frozenset(
    [
        "math",
        "mrow",
        "mi",
        "mn",
        "mo",
        "ms",
        "mtext",
        "mspace",
        "mfrac",
        "msqrt",
        "mroot",
        "msub",
        "msup",
        "msubsup",
        "munder",
        "mover",
        "munderover",
        "mmultiscripts",
        "mprescripts",
        "none",
        "mtable",
        "mtr",
        "mtd",
        "mlabeledtr",
        "mpadded",
        "mphantom",
        "menclose",
        "mstyle",
        "merror",
        "semantics",
        "annotation",
    ]
)
MARKDOWN_TAGS = frozenset(
    [
        "p",
        "br",
        "hr",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "em",
        "strong",
        "s",
        "del",
        "blockquote",
        "ul",
        "ol",
        "li",
        "pre",
        "code",
        "table",
        "thead",
        "tbody",
        "tr",
        "th",
        "td",
        "div",
        "span",
    ]
)
ALLOWED_TAGS = MARKDOWN_TAGS | MATHML_TAGS
#: Attributes kept, per element (``class`` is filtered by :data:`ALLOWED_CLASSES`).
ALLOWED_ATTRIBUTES: dict[str, set[str]] = {
    "math": {"display", "xmlns"},
    "mo": {"stretchy", "fence", "separator", "lspace", "rspace", "largeop", "movablelimits"},
    "mi": {"mathvariant"},
    "mn": {"mathvariant"},
    "mtext": {"mathvariant"},
    "mstyle": {"displaystyle", "scriptlevel", "mathvariant"},
    "mfrac": {"linethickness"},
    "mspace": {"width", "height", "depth"},
    "mpadded": {"width", "height", "depth", "lspace", "voffset"},
    "mtable": {"displaystyle", "rowspacing", "columnspacing", "columnalign", "rowlines"},
    "mtd": {"columnalign"},
    "menclose": {"notation"},
    "munder": {"accentunder"},
    "mover": {"accent"},
    "munderover": {"accent", "accentunder"},
    "ol": {"start"},
    "th": {"align"},
    "td": {"align"},
}
ALLOWED_CLASSES: dict[str, set[str]] = {
    "div": {"math", "block", "inline", "amsmath", "rendered", "source-only", "transcript", "turn"},
    "p": {"turn-role"},
    "span": {"math", "inline"},
    "code": {"tex-error"},
    "pre": {"source-only"},
}

_DELIMS = re.compile(r"\\(?:begin|end)\s*\{|\\left\b|\\right\b|[{}]")
_MARKER = re.compile(r"⟨U\+[0-9A-F]{4,6}⟩")
_ALIGNED = re.compile(r"\\(begin|end)\s*\{(?:aligned|split)\}")


def _too_deep(tex: str) -> bool:
    depth = 0
    for m in _DELIMS.finditer(tex):
        tok = m.group()
        if tok == "}" or tok in ("\\right",) or tok.startswith("\\end"):
            depth -= 1
        elif tok == "{" or tok == "\\left" or tok.startswith("\\begin"):
            depth += 1
            if depth > MAX_DEPTH:
                return True
    return False


def source(tex: str, *, display: bool) -> str:
    """A formula shown as its source, marked as not converted."""
    shown = html.escape(tex)
    out = f'<code class="tex-error" title="not rendered">{shown}</code>'
    return f"<p>{out}</p>" if display else out


def formula(tex: str, *, display: bool) -> str:
    """MathML for ``tex``, or its marked source when it is too long, too deep or fails."""
    if len(tex) > MAX_FORMULA or _too_deep(tex):
        return source(tex, display=display)
    body = _ALIGNED.sub(lambda m: f"\\{m.group(1)}{{align*}}", tex)
    body = _MARKER.sub(lambda m: f"\\text{{{m.group()}}}", body)  # shown whole
    try:
        return convert(body, display="block" if display else "inline")
    except Exception:  # latex2mathml raises many kinds of errors on bad input
        return source(tex, display=display)


def _next_close(env: Any, src: str, close: str, start: int, stop: int) -> int:
    """``src.find(close, start, stop)``, cached in the render's ``env``: the next closing
    delimiter is looked up once per run of openers, so many unclosed openers cost linear
    time, not quadratic."""
    cache = env.setdefault("tex_close", {})
    key = (id(src), close, stop)
    known = cache.get(key)
    if known is None or (known != -1 and known < start):
        known = src.find(close, start, stop)
        cache[key] = known
    return known


def _inline_paren(state: StateInline, silent: bool) -> bool:
    """``\\(…\\)`` inline and ``\\[…\\]`` inside a paragraph (shown as display)."""
    if not state.src.startswith(("\\(", "\\["), state.pos):
        return False
    paren = state.src[state.pos + 1] == "("
    close = "\\)" if paren else "\\]"
    # The next closing delimiter, cached per paragraph, so that many unclosed openers
    # cost linear time, not quadratic.
    known = _next_close(state.env, state.src, close, state.pos + 2, state.posMax)
    if known == -1:
        return False
    if not silent:
        tok = state.push("tex_paren" if paren else "tex_bracket_inline", "math", 0)
        tok.content = state.src[state.pos + 2 : known]
    state.pos = known + 2
    return True


def _bare_boxed(state: StateInline, silent: bool) -> bool:
    """A ``\\boxed{…}`` outside math delimiters (models often write the final answer
    so) is a formula: otherwise the annotator reads ``\\boxed{6}`` as source. Braces are
    matched within :data:`MAX_FORMULA` characters; unbalanced, it stays text."""
    src, pos = state.src, state.pos
    if not src.startswith("\\boxed{", pos):
        return False
    depth, i, stop = 0, pos + len("\\boxed"), min(state.posMax, pos + MAX_FORMULA)
    while i < stop:
        ch = src[i]
        if ch == "\\":
            i += 2  # an escaped brace does not count
            continue
        depth += (ch == "{") - (ch == "}")
        if depth == 0:
            break
        i += 1
    if depth != 0 or i >= stop:
        return False
    if not silent:
        state.push("tex_paren", "math", 0).content = src[pos : i + 1]
    state.pos = i + 1
    return True


def _block_bracket(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """A ``\\[…\\]`` block starting a line (it may span lines)."""
    begin = state.bMarks[start] + state.tShift[start]
    if not state.src.startswith("\\[", begin):
        return False
    close = _next_close(state.env, state.src, "\\]", begin + 2, state.eMarks[end - 1])
    if close == -1:
        return False
    line = start
    while line < end and close + 2 > state.eMarks[line]:
        line += 1
    if line >= end:
        return False
    if state.src[close + 2 : state.eMarks[line]].strip():
        return False  # text after the block on its line: leave it to the inline rule
    if not silent:
        tok = state.push("tex_bracket_block", "math", 0)
        tok.block = True
        tok.content = state.src[begin + 2 : close]
    state.line = line + 1
    return True


def _amsmath_guarded(state: StateBlock, start: int, end: int, silent: bool) -> bool:
    """mdit-py-plugins' amsmath rule, tried only when the environment is closed somewhere
    after it (its own search goes line by line to the end of the text for every opener,
    quadratic on many unclosed ones)."""
    begin = state.bMarks[start] + state.tShift[start]
    m = re.match(RE_OPEN, state.src[begin : state.eMarks[start]])
    if m is None:
        return False
    closing = f"\\end{{{m.group(1)}{m.group(2)}}}"
    if _next_close(state.env, state.src, closing, begin, len(state.src)) == -1:
        return False
    return amsmath_block(state, start, end, silent)


#: Characters that make a ``*`` between them an operator: ``3*5``, ``x*y``, ``)*(``.
_OPERAND_END = re.compile(r"[0-9A-Za-z)\]}]")
_OPERAND_START = re.compile(r"[0-9A-Za-z(\[{]")


def _times_star(state: StateInline, silent: bool) -> bool:
    """A lone ``*`` with an operand on each side is text: CommonMark would open emphasis
    at ``3*5-3*3`` and italicise ``5-3``, which changes what an annotator reads."""
    pos, src = state.pos, state.src
    if src[pos] != "*" or pos == 0 or pos + 1 >= state.posMax:
        return False
    if not (_OPERAND_END.match(src[pos - 1]) and _OPERAND_START.match(src[pos + 1])):
        return False
    if not silent:
        state.push("text", "", 0).content = "*"
    state.pos += 1
    return True


@cache
def _markdown() -> MarkdownIt:
    # breaks: a model writes one step per line; CommonMark would join them into one line
    md = MarkdownIt(
        "commonmark", {"html": False, "linkify": False, "typographer": False, "breaks": True}
    )
    md.inline.ruler.before("emphasis", "times_star", _times_star)
    md.enable(["table", "strikethrough"])
    md.disable(["image", "link", "autolink"])  # links and images show as text
    dollarmath_plugin(
        md,
        allow_space=True,
        allow_digits=False,
        double_inline=True,
        renderer=lambda tex, opts: formula(tex, display=bool(opts.get("display_mode"))),
    )
    amsmath_plugin(md, renderer=lambda tex: formula(tex, display=True))
    md.block.ruler.at(
        "amsmath",
        _amsmath_guarded,
        {"alt": ["paragraph", "reference", "blockquote", "list", "footnote_def"]},
    )
    md.inline.ruler.before("escape", "tex_paren", _inline_paren)
    md.inline.ruler.before("escape", "tex_boxed", _bare_boxed)
    md.block.ruler.before(
        "fence", "tex_bracket", _block_bracket, {"alt": ["paragraph", "blockquote", "list"]}
    )
    md.add_render_rule(
        "tex_paren",
        lambda self, tokens, idx, options, env: formula(tokens[idx].content.strip(), display=False),
    )
    md.add_render_rule(
        "tex_bracket_inline",
        lambda self, tokens, idx, options, env: formula(tokens[idx].content.strip(), display=True),
    )
    md.add_render_rule(
        "tex_bracket_block",
        lambda self, tokens, idx, options, env: (
            '<div class="math block">\n'
            + formula(tokens[idx].content.strip(), display=True)
            + "\n</div>\n"
        ),
    )
    return md


def sanitize(fragment: str) -> str:
    """``fragment`` through the allowlist (see the module docstring)."""
    return nh3.clean(
        fragment,
        tags=set(ALLOWED_TAGS),
        attributes={**ALLOWED_ATTRIBUTES, "code": {"title"}},
        allowed_classes=ALLOWED_CLASSES,
        url_schemes=set(),
        link_rel=None,
        strip_comments=True,
        clean_content_tags={"script", "style"},
    )


#: Texts up to this length are cached (a trajectory is shown in many pairs, to both
#: annotators and in adjudication: a push renders each distinct text once).
CACHED_TEXT = 16_000
CACHE_SIZE = 2048


def render(text: str) -> str:
    """``text`` (Markdown with TeX) as a sanitised HTML fragment (one ``<div>``).
    Deterministic; the :data:`CACHE_SIZE` most recent texts of at most
    :data:`CACHED_TEXT` characters are cached (:func:`clear_cache`)."""
    if len(text) <= CACHED_TEXT:
        return _render_cached(text)
    return _render(text)


def clear_cache() -> None:
    """Forget every cached render (the push benchmark measures rendering from cold)."""
    _render_cached.cache_clear()


def _render(text: str) -> str:
    text = marked(text)
    if len(text) > MAX_TEXT:
        body = f'<pre class="source-only">{html.escape(text)}</pre>'
    else:
        body = _markdown().render(text)
    return sanitize(f'<div class="rendered">{body}</div>')


_render_cached = lru_cache(maxsize=CACHE_SIZE)(_render)


def render_turns(turns: Sequence[tuple[str, str]]) -> str:
    """A multi-turn transcript (``(role, content)`` pairs, in order) as one fragment:
    one ``<div class="turn">`` per turn, its role in a heading line above its content
    (:func:`render` of it), so annotators see the turns apart (docs/how-to-verl.md)."""
    blocks = []
    for role, content in turns:
        inner = render(content)
        blocks.append(
            f'<div class="turn"><p class="turn-role"><strong>{html.escape(role)}</strong></p>'
            f"{inner}</div>"
        )
    return sanitize(f'<div class="rendered transcript">{"".join(blocks)}</div>')


def turns_source(turns: Sequence[tuple[str, str]]) -> str:
    """A transcript's source as one text: each turn under a ``[role]`` line."""
    return "\n\n".join(f"[{role}]\n{content}" for role, content in turns)


def html_text(fragment: str) -> str:
    """The text a reader sees in ``fragment`` (tags dropped, entities decoded): what the
    blinding scan reads in a rendered field."""
    return html.unescape(re.sub(r"<[^>]*>", "", fragment))


def shown_hash(data: Mapping[str, Any]) -> str:
    """SHA-256 of a task's data as Label Studio shows it (canonical JSON: sorted keys, no
    whitespace, UTF-8), recorded with the task."""
    blob = json.dumps(dict(data), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(blob.encode()).hexdigest()


__all__ = [
    "ALLOWED_ATTRIBUTES",
    "ALLOWED_CLASSES",
    "ALLOWED_TAGS",
    "CACHED_TEXT",
    "CACHE_SIZE",
    "MAX_DEPTH",
    "MAX_FORMULA",
    "MAX_TEXT",
    "clear_cache",
    "formula",
    "html_text",
    "render",
    "render_turns",
    "sanitize",
    "shown_hash",
    "source",
    "turns_source",
]
