"""The blinding guard's contract pinned exactly, written from the mutants `make mutation`
left alive in rcea/annotation/tasks.py (docs/mutation.md): values nested in mappings are
scanned, empty forbidden values are ignored, the prefix-tree prefilter matches exactly the
forbidden words (a word that is a prefix of another included), findings are worded
exactly, and the task and label config carry what they should."""

from __future__ import annotations

import random
from itertools import chain

import pytest

from rcea.annotation.tasks import LeakScanner, build_pair_task, pair_label_config
from tests.support.product_helpers import scan_for_leaks

WORDS = {"abcdef", "abcdefgh", "abcxyz12", "zzzzzz", "grpo-main-run"}


def test_values_nested_in_mappings_are_scanned() -> None:
    long_text = "Step 1: we add the terms. " * 3 + "see traj-000123 for details"
    sent = [{"data": {"left": long_text, "right": "fine"}, "meta": {"ids": ["traj-000123"]}}]
    assert scan_for_leaks(sent, {"traj-000123"}) == [
        "value 'traj-000123'",
        f"value 'traj-000123' in {long_text[:60]!r}",
    ]
    assert scan_for_leaks([{"a": {"b": {"c": "q7"}}}], set(), forbidden_exact={"q7"}) == [
        "value 'q7'"
    ]
    assert scan_for_leaks([{"run": 1}], set(), forbidden_keys={"run"}) == ["key 'run'"]


def test_empty_forbidden_values_are_ignored() -> None:
    assert scan_for_leaks(["", {"left": ""}], {""}, forbidden_exact={""}) == []
    scanner = LeakScanner({"", "abcdefg"}, forbidden_exact={"", "q1"})
    assert scanner.exact == {"abcdefg", "q1"} and scanner.long_values == {"abcdefg"}


def test_the_prefilter_matches_exactly_the_forbidden_words() -> None:
    pattern = LeakScanner(WORDS).pattern
    assert pattern is not None
    candidates = set(chain.from_iterable((w[:k] for k in range(len(w) + 2)) for w in WORDS))
    candidates |= {w + "q" for w in WORDS} | {"", "zzzzz", "abcdefg"}
    for s in sorted(candidates):
        assert bool(pattern.fullmatch(s)) is (s in WORDS), s
    assert LeakScanner([]).pattern is None
    assert LeakScanner(["short"], forbidden_exact=["abcdefgh"]).pattern is None  # < 6 chars


@pytest.mark.parametrize("word", sorted(WORDS))
def test_a_word_that_prefixes_another_is_still_found(word: str) -> None:
    text = f"the answer mentions {word}."
    inside = sorted(w for w in WORDS if w in text)  # "abcdefgh" contains "abcdef"
    assert word in inside
    assert scan_for_leaks([text], WORDS) == [f"value {w!r} in {text!r}" for w in inside]


def test_pair_task_and_label_config() -> None:
    task = build_pair_task("p-key", "text a", "text b", rng=random.Random(0))
    assert task.pair_key == "p-key" and task.data["pair"] == "p-key"
    plain = pair_label_config("d")
    adjud = pair_label_config("d", adjudication=True)
    assert '<Text name="definition" value="d"/>\n  <View style="display: flex;' in plain
    header = (
        '\n  <Header value="The two annotators answered: $answer_1 / $answer_2 (in random '
        'order; who gave which answer is hidden, and so is the automatic label)" size="5"/>'
    )
    assert f'<Text name="definition" value="d"/>{header}\n  <View style="display: flex;' in adjud
    assert adjud.replace(header, "") == plain
