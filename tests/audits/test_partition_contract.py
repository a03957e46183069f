"""Contract tests for rcea.audits.partition (mutation testing): the partition hash
is pinned against ``hashlib`` over hand-written canonical JSON."""

from __future__ import annotations

import hashlib

import pytest

from rcea.audits.partition import partition_hash


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def test_partition_hash_is_sha256_of_the_compact_sorted_json() -> None:
    rows = [("q2", "t0", "m1"), ("q1", "t2", "é"), ("q1", "t1", None)]
    expected = '[["q1","t1",null],["q1","t2","é"],["q2","t0","m1"]]'
    assert partition_hash(rows) == _sha(expected)


def test_partition_hash_uncertain_is_null_not_the_string_none() -> None:
    assert partition_hash([("q", "t", None)]) == _sha('[["q","t",null]]')
    assert partition_hash([("q", "t", None)]) != partition_hash([("q", "t", "None")])


def test_partition_hash_depends_on_the_question() -> None:
    assert partition_hash([(1, 2, 3)]) == _sha('[["1","2","3"]]')
    assert partition_hash([("q1", "t", "m")]) != partition_hash([("q2", "t", "m")])


def test_partition_hash_double_assignment_message() -> None:
    with pytest.raises(ValueError) as e:
        partition_hash([("q1", "t", "a"), ("q2", "t", "b")])
    assert str(e.value) == "trajectory 't' is assigned twice"
