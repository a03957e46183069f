"""Label Studio project titles: one scheme for every round — which round (pairs or
validity, by the store's number, never the researcher's name) and the person's role,
named the same way in pair and validity rounds — and short enough for a project card
(the browser check is in tests/annotation/test_browser_labelling.py)."""

from __future__ import annotations

from rcea.study.labelling import person_role, round_title
from rcea.study.labelling.push import TITLE_MAX, TITLE_SHOWN


def test_roles_are_named_alike_in_every_round() -> None:
    assert [person_role(r) for r in ("A", "B", "adjudicator")] == [
        "annotator A",
        "annotator B",
        "adjudicator",
    ]
    # a singly labelled calibration's 1st, 2nd, ... annotator: the same letters
    assert [person_role(f"annotator-{i}") for i in (1, 2, 3)] == [
        "annotator A",
        "annotator B",
        "annotator C",
    ]
    assert round_title("pairs", 3, "A") == "Pairs 3 · annotator A"
    assert round_title("validity", 4, "annotator-1") == "Validity 4 · annotator A"
    assert round_title("validity", 4, "B") == "Validity 4 · annotator B"
    assert round_title("validity", 4, "adjudicator") == "Validity 4 · adjudicator"


def test_titles_fit_a_project_card() -> None:
    longest = max(
        (
            round_title(k, 999, r)
            for k in ("pairs", "validity")
            for r in ("A", "annotator-2", "adjudicator")
        ),
        key=len,
    )
    assert len(longest) == TITLE_SHOWN <= TITLE_MAX
