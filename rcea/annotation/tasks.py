"""Blinded Label Studio tasks for the pair audit, and the scan that proves the blinding.

A task holds an opaque pair key, the two texts (left/right, order randomised per pair and
annotator) and, when the study stores one, the problem statement both answer. No run,
model, step, seed, trajectory id, question id, automatic label or prediction ever goes into
a task.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rcea.annotation.display import config_text, strip_display_marks, visible, xml_attr
from rcea.annotation.render import html_text, render, render_turns, shown_hash, turns_source

PAIR_CHOICE = "strategy"
NOTE_FIELD = "note"
TASK_DATA_KEYS = ("pair", "left", "right")
#: Suffix of the data key holding a text's rendered HTML (``left_html`` …); the plain
#: key keeps the source (made visible), shown one toggle away.
HTML_SUFFIX = "_html"
#: Data key of the SHA-256 of everything else in the task's data
#: (:func:`rcea.annotation.render.shown_hash`): what the annotator saw.
SHOWN_KEY = "shown_sha256"
#: Each solution's column: half the width whatever its content (``min-width: 0``), long
#: words broken inside it, anything still wider scrolled inside it, never pushing the
#: other solution off-screen; at most 70 % of the window high, scrolling on its own.
COLUMN_STYLE = (
    "flex: 1 1 0; min-width: 0; overflow-wrap: anywhere; overflow-x: auto; "
    "max-height: 70vh; overflow-y: auto; padding: 0.5em; border: 1px solid #ccc;"
)
#: The stylesheet of every task that shows rendered texts (``!important``: Label
#: Studio's own rules are more specific): code blocks monospaced and wrapping,
#: ``\boxed{}`` framed, formulas in a font with an OpenType MATH table (in Label Studio's
#: own font Chromium draws no radical for ``\sqrt``), a formula that did not convert
#: marked, display math scrolling sideways inside its column, each turn of a
#: multi-turn transcript set apart by a rule on its left under its role.
RENDER_STYLE = """
  <Style>
    .rendered pre, .rendered code { font-family: monospace !important;
      white-space: pre-wrap !important; overflow-wrap: anywhere !important; }
    .rendered pre { background: #f6f6f6; padding: 0.4em; }
    .rendered menclose[notation="box"] { border: 1px solid currentColor !important;
      padding: 0.2em !important; }
    .rendered code.tex-error { border: 1px dashed #c00 !important; color: #900 !important; }
    .rendered math, .rendered math * { font-family: "STIX Two Math", "Cambria Math",
      "Latin Modern Math", "DejaVu Math TeX Gyre", math !important; }
    .rendered math[display="block"] { overflow-x: auto; max-width: 100%; }
    .rendered .source-only { white-space: pre-wrap !important;
      overflow-wrap: anywhere !important; }
    .rendered .turn { border-left: 3px solid #bbb !important; margin: 0.6em 0 !important;
      padding-left: 0.6em !important; }
    .rendered .turn-role { font-size: 0.85em !important; color: #555 !important;
      margin: 0 0 0.2em 0 !important; }
  </Style>"""


def rendered_text(name: str, title: str, indent: str = "    ") -> str:
    """A text shown rendered (``<HyperText>`` of ``$<name>_html``) with its source one
    click away (a collapsed panel holding ``<Text>`` of ``$<name>``)."""
    return (
        f'{indent}<HyperText name="{name}" value="${name}{HTML_SUFFIX}" inline="true"/>\n'
        f'{indent}<Collapse bordered="false">\n'
        f'{indent}  <Panel value="{xml_attr(title)}">\n'
        f'{indent}    <Text name="{name}_source" value="${name}"/>\n'
        f"{indent}  </Panel>\n"
        f"{indent}</Collapse>"
    )


#: What a task shows of a solution: its text, or a multi-turn transcript's turns as
#: ``(role, content)`` pairs (``rcea.pipeline.transcript.Turn`` is one).
Shown = str | Sequence[tuple[str, str]]


def with_rendered(data: Mapping[str, Shown], keys: Iterable[str]) -> dict[str, str]:
    """``data`` with ``<key>_html`` (:func:`rcea.annotation.render.render` of the raw text, or
    :func:`rcea.annotation.render.render_turns` of a transcript's turns: one block per turn,
    its role named) for each of ``keys`` and :data:`SHOWN_KEY`, the hash of all of it.
    ``data`` holds the raw texts under ``keys``; they are replaced by their visible form
    (a transcript's: each turn under a ``[role]`` line). No key is added for turns: the
    task data keys stay the same, so the blinding is unchanged."""
    out: dict[str, Any] = dict(data)
    for key in keys:
        value = data[key]
        if isinstance(value, str):
            out[key + HTML_SUFFIX] = render(value)
            out[key] = visible(value)
        else:
            out[key + HTML_SUFFIX] = render_turns(value)
            out[key] = visible(turns_source(value))
    out[SHOWN_KEY] = shown_hash(out)
    return out


ADJUDICATION_DATA_KEYS = (*TASK_DATA_KEYS, "answer_1", "answer_2")
#: The optional data key holding the problem statement both solutions answer.
QUESTION_KEY = "question"
#: Shown when a pair's question has no stored text (the project shows problems).
NO_QUESTION = "(no problem statement was stored for this question)"
PROBLEM_STYLE = (
    "min-width: 0; overflow-wrap: anywhere; overflow-x: auto; max-height: 30vh; "
    "overflow-y: auto; padding: 0.5em;"
)


def pair_label_config(
    strategy_definition: str, *, adjudication: bool = False, question: bool = False
) -> str:
    """Side-by-side labelling interface with a required same/different choice and an
    optional note. The adjudication variant also shows the two human answers (not who
    gave them, never the automatic label). With ``question`` the tasks carry the problem
    statement (data key ``question``), shown above the two solutions.

    Every text placed in the XML goes through :func:`~rcea.annotation.display.xml_attr`; the
    rubric's definition is also made visible (:func:`~rcea.annotation.display.visible`)."""
    definition = config_text(strategy_definition)
    choice, note = xml_attr(PAIR_CHOICE), xml_attr(NOTE_FIELD)
    answers = (
        '\n  <Header value="The two annotators answered: $answer_1 / $answer_2 (in random '
        'order; who gave which answer is hidden, and so is the automatic label)" size="5"/>'
        if adjudication
        else ""
    )
    problem = (
        f'\n  <View style="{PROBLEM_STYLE}">\n    <Header value="Problem" size="4"/>\n'
        + rendered_text(QUESTION_KEY, "Source of the problem")
        + "\n  </View>"
        if question
        else ""
    )
    left = rendered_text("left", "Source of solution 1", "      ")
    right = rendered_text("right", "Source of solution 2", "      ")
    return f"""<View>{RENDER_STYLE}
  <Header value="Do these two solutions use the same strategy?"/>
  <Text name="definition" value="{definition}"/>{answers}{problem}
  <View style="display: flex; gap: 1em;">
    <View style="{COLUMN_STYLE}">
      <Header value="Solution 1" size="4"/>
{left}
    </View>
    <View style="{COLUMN_STYLE}">
      <Header value="Solution 2" size="4"/>
{right}
    </View>
  </View>
  <Choices name="{choice}" toName="left" choice="single" required="true"
           showInLine="true">
    <Choice value="same" alias="same"/>
    <Choice value="different" alias="different"/>
  </Choices>
  <TextArea name="{note}" toName="left" placeholder="optional note"
            maxSubmissions="1" editable="true"/>
</View>"""


@dataclass(frozen=True)
class PairTask:
    pair_key: str
    left_is_a: bool
    data: dict[str, str]


def build_pair_task(
    pair_key: str,
    text_a: Shown,
    text_b: Shown,
    *,
    rng: random.Random,
    answers: tuple[str, str] | None = None,
    question: str | None = None,
) -> PairTask:
    """One blinded task; ``rng`` decides the left/right order (recorded by the caller).
    The texts, the problem statement (``question``: data key ``question`` when given)
    and answers are shown through :func:`~rcea.annotation.display.visible` (bidi and
    invisible characters as ``⟨U+XXXX⟩``, long lines cut); each text is also rendered
    (``<key>_html``, :func:`rcea.annotation.render.render`), and :data:`SHOWN_KEY` holds
    the hash of the whole task data (:func:`with_rendered`). A text may be a multi-turn
    transcript's turns (:data:`Shown`), rendered one block per turn."""
    left_is_a = rng.random() < 0.5
    left, right = (text_a, text_b) if left_is_a else (text_b, text_a)
    data: dict[str, Shown] = {"pair": pair_key, "left": left, "right": right}
    if question is not None:
        data[QUESTION_KEY] = question
    if answers is not None:
        shuffled = [visible(a) for a in answers]
        rng.shuffle(shuffled)  # the adjudicator must not learn which annotator said what
        data["answer_1"], data["answer_2"] = shuffled
    shown = ["left", "right", *([QUESTION_KEY] if question is not None else [])]
    return PairTask(pair_key, left_is_a, with_rendered(data, shown))


class BlindingViolation(AssertionError):
    """Something that must never reach an annotator was found in what was sent."""


def _trie_pattern(words: Iterable[str]) -> re.Pattern[str] | None:
    """One regular expression matching any of ``words``, compiled from a prefix tree so
    that its cost grows with the text, not with the number of words (a plain alternation
    of thousands of ids is much slower)."""
    trie: dict[str, Any] = {}
    for word in words:
        node = trie
        for ch in word:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict[str, Any]) -> str:
        end = "" in node
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if end else body

    return re.compile(build(trie)) if trie else None


class LeakScanner:
    """Compiled once, used for many items (a push batch, every prompt of a question).

    ``forbidden`` values (identifiers such as trajectory ids, run and model names) are
    matched as whole values and, when at least 6 characters long, as substrings of any
    string. ``forbidden_exact`` values (short or natural-language ones such as mode names,
    question ids, steps and seeds, which occur naturally inside solution texts) are matched
    as whole values only. ``forbidden_keys`` are matched against every mapping key.
    """

    def __init__(
        self,
        forbidden: Iterable[str],
        *,
        forbidden_keys: Iterable[str] = (),
        forbidden_exact: Iterable[str] = (),
    ) -> None:
        values = {str(v) for v in forbidden if str(v)}
        self.exact = {str(v) for v in forbidden_exact if str(v)} | values
        self.long_values = {v for v in values if len(v) >= 6}
        self.pattern = _trie_pattern(self.long_values)
        self.keys = set(forbidden_keys)

    def scan(self, sent: Iterable[Any]) -> list[str]:
        """Every forbidden value or key found anywhere in ``sent``, sorted."""
        found: list[str] = []

        def walk(obj: Any) -> None:
            if isinstance(obj, dict):
                for k, v in obj.items():
                    if k in self.keys:
                        found.append(f"key {k!r}")
                    walk(v)
            elif isinstance(obj, list | tuple):
                for v in obj:
                    walk(v)
            elif isinstance(obj, str):
                check(obj)
                joined = strip_display_marks(obj)
                if joined != obj:  # what a reader pieces together across soft breaks
                    check(joined)
                if "<" in obj:  # rendered HTML: the text a reader sees in it
                    shown = html_text(obj)
                    if shown != obj:
                        check(shown)
                        check(strip_display_marks(shown))
            elif obj is not None:
                check(json.dumps(obj))

        def check(text: str) -> None:
            if text in self.exact:
                found.append(f"value {text!r}")
            if self.pattern is not None and self.pattern.search(text):
                # Rare path: name every forbidden value inside this text.
                for v in self.long_values:
                    if v != text and v in text:
                        found.append(f"value {v!r} in {text[:60]!r}")

        for item in sent:
            walk(item)
        return sorted(set(found))
