"""A–B agreement on validity labels against scikit-learn, and its edge cases."""

from __future__ import annotations

import itertools

import pytest
from sklearn.metrics import cohen_kappa_score, f1_score

from rcea.audits.calibration import validity_agreement

LABELS = ("valid", "invalid")


@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_matches_sklearn_on_every_small_case(n: int) -> None:
    for a in itertools.product(LABELS, repeat=n):
        for b in itertools.product(LABELS, repeat=n):
            got = validity_agreement(a, b)
            assert got.n_items == n and got.n_agree == sum(
                x == y for x, y in zip(a, b, strict=True)
            )
            assert got.agreement == pytest.approx(got.n_agree / n)
            f1 = f1_score(a, b, labels=list(LABELS), average="macro", zero_division=0)
            assert got.macro_f1 == pytest.approx(f1, abs=1e-12)
            assert validity_agreement(b, a).macro_f1 == pytest.approx(got.macro_f1)
            if len(set(a) | set(b)) == 1:
                assert got.cohen_kappa is None
            else:
                assert got.cohen_kappa == pytest.approx(cohen_kappa_score(a, b), abs=1e-12)


def test_refuses_other_labels_and_lengths() -> None:
    with pytest.raises(ValueError):
        validity_agreement(["valid"], ["maybe"])
    with pytest.raises(ValueError):
        validity_agreement(["valid", "valid"], ["valid"])
