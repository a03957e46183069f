"""The shared LLM client against a real local OpenAI-compatible server: validated JSON,
retries (429 + Retry-After, 5xx, timeouts), invalid replies, cache, counters, bounds."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import numpy as np
import pytest
from pydantic import BaseModel

from rcea.pipeline.llm import (
    LLMClient,
    LLMConfig,
    ReplyFormatError,
    ResponseCache,
    parse_json_reply,
    retry_after_seconds,
    run_jobs,
)
from tests.support.fake_llm import FakeLLM, expected_fingerprint


class Echo(BaseModel):
    ok: bool
    n_messages: int


def _client(llm: FakeLLM, tmp_path: Path, sleeps: list[float] | None = None, **cfg) -> LLMClient:  # type: ignore[no-untyped-def]
    config = LLMConfig(
        base_url=llm.base_url,
        model="fake-model",
        api_key="k",
        timeout_s=cfg.pop("timeout_s", 5.0),
        backoff_base_s=0.01,
        **cfg,
    )
    rec = sleeps if sleeps is not None else []
    return LLMClient(
        config,
        cache=ResponseCache(tmp_path / "cache"),
        sleep=lambda s: (rec.append(s), time.sleep(min(s, 0.05))),  # type: ignore[func-returns-value]
    )


def _msgs(text: str = "hello") -> list[dict[str, str]]:
    return [{"role": "system", "content": "echo"}, {"role": "user", "content": text}]


@pytest.fixture(scope="module")
def llm():  # type: ignore[no-untyped-def]
    with FakeLLM() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(llm: FakeLLM) -> None:
    llm.script.clear()


def test_validated_reply_is_cached_and_keyed_like_the_server(llm: FakeLLM, tmp_path: Path) -> None:
    client = _client(llm, tmp_path)
    before = len(llm.served())
    first = client.complete_json(_msgs("a"), Echo)
    assert first.ok and first.value == Echo(ok=True, n_messages=2) and not first.cached
    # the client's cache key is the documented content hash of what it sent (computed
    # independently in tests/support/fake_llm.py, not by the production function)
    assert first.key == expected_fingerprint(llm.bodies[llm.served()[-1].key])
    second = client.complete_json(_msgs("a"), Echo)
    assert second.cached and second.value == first.value and second.key == first.key
    assert len(llm.served()) == before + 1  # no second call
    # A fresh client on the same cache dir (a resumed run) repeats no call either.
    third = _client(llm, tmp_path).complete_json(_msgs("a"), Echo)
    assert third.cached and len(llm.served()) == before + 1
    u = client.usage.snapshot()
    assert (u.requests, u.completed, u.cache_hits) == (1, 1, 1)
    assert u.prompt_tokens > 0 and u.completion_tokens > 0


def test_cost_counter_uses_prices(llm: FakeLLM, tmp_path: Path) -> None:
    client = _client(llm, tmp_path, price_input_per_mtok=2.0, price_output_per_mtok=10.0)
    r = client.complete_json(_msgs("cost"), Echo)
    u = client.usage.snapshot()
    assert u.cost_usd == pytest.approx((r.prompt_tokens * 2.0 + r.completion_tokens * 10.0) / 1e6)
    assert u.cost_usd > 0


def test_429_honours_retry_after(llm: FakeLLM, tmp_path: Path) -> None:
    sleeps: list[float] = []
    client = _client(llm, tmp_path, sleeps)
    llm.script.extend([("429", 0.3), ("429", 0.2)])
    r = client.complete_json(_msgs("rl"), Echo)
    assert r.ok and r.attempts == 3
    assert sleeps == [0.3, 0.2]  # exactly what the server asked for, not the backoff
    u = client.usage.snapshot()
    assert (u.rate_limited, u.retries, u.failures) == (2, 2, 0)


def test_5xx_is_retried_with_backoff_then_given_up(llm: FakeLLM, tmp_path: Path) -> None:
    sleeps: list[float] = []
    client = _client(llm, tmp_path, sleeps, max_retries=2)
    llm.script.append(("500", 0))
    assert client.complete_json(_msgs("5xx"), Echo).ok
    llm.script.extend([("500", 0)] * 3)
    r = client.complete_json(_msgs("5xx-forever"), Echo)
    assert not r.ok and "HTTP 500" in (r.error or "") and r.attempts == 3
    assert client.usage.snapshot().server_errors == 4 and client.usage.snapshot().failures == 1
    assert all(0 < s <= 0.1 for s in sleeps)  # backoff_base_s=0.01 doubling, with jitter
    # A failure is not cached: the next run asks again.
    assert not client.is_cached(_msgs("5xx-forever"), Echo)


def test_4xx_is_not_retried(llm: FakeLLM, tmp_path: Path) -> None:
    client = _client(llm, tmp_path)
    llm.script.append(("400", 0))
    r = client.complete_json(_msgs("bad"), Echo)
    assert not r.ok and r.attempts == 1 and "HTTP 400" in (r.error or "")


def test_hang_past_timeout_is_retried(llm: FakeLLM, tmp_path: Path) -> None:
    client = _client(llm, tmp_path, timeout_s=0.5)
    llm.script.append(("hang", 1.5))
    t0 = time.monotonic()
    r = client.complete_json(_msgs("hang"), Echo)
    assert r.ok and r.attempts == 2
    assert client.usage.snapshot().timeouts == 1
    assert time.monotonic() - t0 < 1.4  # did not wait for the hung reply


def test_malformed_reply_is_reasked_then_returned_as_failure(llm: FakeLLM, tmp_path: Path) -> None:
    client = _client(llm, tmp_path, max_invalid_retries=1)
    llm.script.append(("malformed", 0))
    r = client.complete_json(_msgs("mal-once"), Echo)
    assert r.ok and r.attempts == 2
    llm.script.extend([("malformed", 0)] * 2)
    bad = client.complete_json(_msgs("mal-twice"), Echo)
    assert not bad.ok and bad.value is None and "invalid reply" in (bad.error or "")
    assert bad.raw and bad.raw.startswith("Sure!")
    u = client.usage.snapshot()
    assert u.invalid_replies == 3 and u.failures == 1
    # The model answered: that finished call is cached as a failure, not asked again.
    n = len(llm.calls)
    again = client.complete_json(_msgs("mal-twice"), Echo)
    assert not again.ok and again.cached and "cached" in (again.error or "")
    assert len(llm.calls) == n


def test_schema_mismatch_counts_as_invalid(llm: FakeLLM, tmp_path: Path) -> None:
    class Other(BaseModel):
        required_field: int

    client = _client(llm, tmp_path, max_invalid_retries=0)
    r = client.complete_json(_msgs("schema"), Other)
    assert not r.ok and "required_field" in (r.error or "")


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    with FakeLLM(latency_s=0.15) as slow:
        client = _client(slow, tmp_path, concurrency=3)
        results = []
        run_jobs(
            [f"job{i}" for i in range(9)],
            lambda j: client.complete_json(_msgs(j), Echo),
            concurrency=9,  # more workers than the client allows in flight
            on_result=lambda j, r: results.append(r.ok),
        )
        assert results == [True] * 9
        assert slow.max_in_flight == 3


def test_run_jobs_delivers_in_calling_thread_and_bounds_workers() -> None:
    active, peak, lock = [0], [0], threading.Lock()
    caller = threading.get_ident()
    seen: list[tuple[int, int]] = []

    def work(i: int) -> int:
        with lock:
            active[0] += 1
            peak[0] = max(peak[0], active[0])
        time.sleep(0.02)
        with lock:
            active[0] -= 1
        return i * i

    n = run_jobs(
        range(20),
        work,
        concurrency=4,
        on_result=lambda j, r: seen.append((j, r)) or assert_thread(caller),
    )
    assert n == 20 and sorted(seen) == [(i, i * i) for i in range(20)] and peak[0] <= 4


def assert_thread(ident: int) -> None:
    assert threading.get_ident() == ident


def test_parse_json_reply_and_retry_after() -> None:
    assert parse_json_reply('```json\n{"ok": true, "n_messages": 1}\n```', Echo).ok
    assert parse_json_reply('Here: {"ok": false, "n_messages": 2} done', Echo).n_messages == 2
    with pytest.raises(ReplyFormatError):
        parse_json_reply("no json at all", Echo)
    with pytest.raises(ValueError):
        parse_json_reply('{"ok": "maybe"}', Echo)
    assert retry_after_seconds({"retry-after": "2.5"}) == 2.5
    assert retry_after_seconds({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after_seconds({"retry-after": later}) or 0) <= 30
    assert retry_after_seconds({}) is None


def test_cache_segments_survive_a_torn_write_and_new_processes(tmp_path: Path) -> None:
    cache = ResponseCache(tmp_path / "c")
    cache.put("k1", {"content": "a", "messages": [{"role": "user", "content": "x"}]})
    cache.put("k2", {"content": "b"})
    cache.put("k1", {"content": "c"})  # a later entry wins
    assert cache.get("k1") == {"content": "c", "key": "k1"}
    cache.close()
    (segment,) = (tmp_path / "c").glob("*.jsonl")
    with segment.open("a") as fh:
        fh.write('{"key": "k3", "content": "torn')  # a crash mid-write
    fresh = ResponseCache(tmp_path / "c")
    assert fresh.keys() == {"k1", "k2"}
    assert fresh.get("k1")["content"] == "c" and fresh.get("k3") is None  # type: ignore[index]
    assert '"messages"' in segment.read_text()  # prompts stay on disk for audit
    fresh.put("k4", {"content": "d"})
    assert len(list((tmp_path / "c").glob("*.jsonl"))) == 2  # one segment per writer


def test_cache_index_holds_offsets_not_replies(tmp_path: Path) -> None:
    """Memory flat in the replies: the index maps a key's digest to a packed (segment,
    byte offset) int and ``get`` reads the entry back from disk, in this process and in
    a fresh one."""
    cache = ResponseCache(tmp_path / "c")
    for i in range(50):
        cache.put(f"k{i}", {"content": "é" * i, "messages": [{"role": "user", "content": "x"}]})
    assert cache.get("k49") == {"content": "é" * 49, "key": "k49"}
    index = cache._index
    assert index is not None and len(index) == 50  # 50 locations, no reply in memory
    assert index.digests.dtype == np.uint64 and index.where.dtype == np.int64
    fresh = ResponseCache(tmp_path / "c")
    assert [fresh.get(f"k{i}")["content"] for i in range(50)] == ["é" * i for i in range(50)]  # type: ignore[index]
    cache.put("k7", {"content": "new"})  # a later entry wins, in the writer's index too
    assert cache.get("k7")["content"] == "new" and cache.get("k8")["content"] == "é" * 8  # type: ignore[index]


def test_cache_digest_collision_is_a_miss_not_a_wrong_reply(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two keys with one digest: the index keeps the later, ``get`` of the other reads a
    stored key that differs and answers a miss (the call is repeated, never mixed up)."""
    import rcea.pipeline.llm.cache as cache_mod

    monkeypatch.setattr(cache_mod, "_digest", lambda key: 7)
    cache = ResponseCache(tmp_path / "c")
    cache.put("a", {"content": "for a"})
    cache.put("b", {"content": "for b"})
    assert cache.get("b") == {"content": "for b", "key": "b"}
    assert cache.get("a") is None
    assert ResponseCache(tmp_path / "c").get("a") is None
    assert cache.keys() == {"a", "b"}


def test_cache_index_costs_under_forty_bytes_a_key(tmp_path: Path) -> None:
    """The index of 20,000 replies (64-char hex keys, as the LLM client's) costs under
    40 bytes a key: sorted arrays of digests and locations (16), not a dict of key
    strings and tuples (≈ 220) nor of ints (≈ 100)."""
    import hashlib
    import tracemalloc

    root = tmp_path / "c"
    writer = ResponseCache(root)
    keys = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(20_000)]
    for k in keys:
        writer.put(k, {"content": "x"})
    writer.close()
    fresh = ResponseCache(root)
    tracemalloc.start()
    try:
        before = tracemalloc.take_snapshot()
        assert fresh.get(keys[123]) == {"content": "x", "key": keys[123]}
        after = tracemalloc.take_snapshot()
    finally:
        tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    assert grown / len(keys) < 40, grown / len(keys)


def test_cache_index_equals_a_dict_through_merges(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compact index answers as a plain dict would (later entry wins, misses are
    misses) across many merges, with digests above 2**63 (the uint64 high bit)."""
    import random

    import rcea.pipeline.llm.cache as cache_mod

    monkeypatch.setattr(cache_mod._Index, "MERGE_AT", 7)
    rng = random.Random(3)
    pool = [rng.getrandbits(64) for _ in range(120)] + [2**64 - 1, 2**63, 0, 1]
    index, ref = cache_mod._Index(), {}
    for step in range(2_000):
        d = rng.choice(pool)
        if rng.random() < 0.5:
            index.set(d, step)
            ref[d] = step
        else:
            assert index.get(d) == ref.get(d), (step, d)
    index.merge()
    assert len(index) == len(ref)
    assert all(index.get(d) == ref.get(d) for d in pool)
    assert list(index.digests) == sorted(ref)
