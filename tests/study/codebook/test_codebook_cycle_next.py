"""The codebook cycle's outcome names only the next steps that apply (``run_cycle``'s
result, printed by ``rcea codebook run``)."""

from __future__ import annotations

from rcea.study.codebook.cycle import CycleResult


def test_nothing_waits_then_export_is_the_only_next_step() -> None:
    res = CycleResult()
    assert res.waiting is None and res.next_steps() == ["rcea codebook export"]


def test_only_what_waits_is_suggested() -> None:
    queue_only = CycleResult(n_queue=2)
    assert queue_only.waiting == "researcher"
    assert [s.split(",")[0] for s in queue_only.next_steps()] == ["rcea codebook queue"]
    ext_only = CycleResult(n_extensions=1)
    assert [s.split(",")[0] for s in ext_only.next_steps()] == ["rcea codebook extend"]


def test_unanswered_batches_come_first() -> None:
    res = CycleResult(n_queue=1, n_extensions=1, n_unanswered=3)
    assert res.waiting == "unanswered"
    assert res.next_steps()[0].startswith("rcea codebook run")
    assert res.to_dict()["unanswered_batches"] == 3
