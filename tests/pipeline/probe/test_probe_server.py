"""Probe sampling through an OpenAI-compatible server (``[probe] backend = "server"``)
against the local fake server: what is sent, what is written (ids, ℓ, records) against
the fake's own replies, resumption that repeats no finished call, retried faults, clear
errors with nothing half-written, and the CLI path."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("fastapi")

from rcea.pipeline.probe import ConfigError, load_config, parse_config, run_sample  # noqa: E402
from rcea.pipeline.probe.server import ServerSampleError  # noqa: E402
from rcea.pipeline.records import read_records  # noqa: E402
from tests.support.fake_llm import FakeLLM, body_key, fake_completion_choices  # noqa: E402
from tests.support.probe import save_policy  # noqa: E402

K, MAX_NEW, N_Q = 4, 12, 5


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return save_policy(tmp_path_factory.mktemp("srv") / "p0", seed=3)


@pytest.fixture()
def fake() -> Any:
    with FakeLLM() as server:
        yield server


def write_config(path: Path, policy: Path, base_url: str, **sections: dict[str, Any]) -> Path:
    body: dict[str, dict[str, Any]] = {
        "probe": {"seed": 5, "k": K, "max_new_tokens": MAX_NEW, "backend": "server"},
        "questions": {"source": "toy", "split": "probe", "n": N_Q},
        "server": {
            "base_url": base_url,
            "model": "{label}",
            "logprobs_mode": "raw_logprobs",
            "concurrency": 3,
            "timeout_s": 10,
            "backoff_base_s": 0.01,
        },
    }
    for table, values in sections.items():
        body[table] = {**body.get(table, {}), **values}
    lines = []
    for table, values in body.items():
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in values.items()]
    for step in (0, 10):  # two checkpoints (one weights dir): two served model names
        lines += ["[[checkpoints.list]]", f'path = "{policy}"', 'run = "srv"']
        lines += ['model = "tiny"', f"step = {step}"]
    path.write_text("\n".join(lines) + "\n")
    return path


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in path.open()] if path.exists() else []


def _files(out: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(out)): p.read_bytes()
        for p in sorted(out.rglob("*.jsonl"))
        if p.parent.name in ("records", "samples") or p.name == "records.jsonl"
    }


def _ok_calls_by_key(fake: FakeLLM) -> dict[str, int]:
    out: dict[str, int] = {}
    for c in fake.served("completions"):
        out[c.key] = out.get(c.key, 0) + 1
    return out


def _tok() -> Any:
    from rcea.pipeline.policy import build_char_tokenizer

    return build_char_tokenizer()


def _unit_seed(probe_seed: int, run: str, model: str, step: int, qid: str) -> int:
    """The documented unit seed, written out again (rcea/pipeline/probe/common.py docstring)."""

    def h(*parts: Any) -> int:
        d = hashlib.sha256("|".join(str(p) for p in parts).encode()).hexdigest()
        return int(d[:8], 16) & 0x7FFFFFFF

    return h(h(probe_seed, run, model, step), qid)


def test_requests_and_outputs_match_the_fake_server(
    policy: Path, fake: FakeLLM, tmp_path: Path
) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", policy, fake.base_url))
    out = tmp_path / "out"
    res = run_sample(cfg, out, progress=False)
    assert res.units_run == 2 * N_Q and res.units_skipped == 0
    assert res.info["server"] == {"calls": 2 * N_Q, "cache_hits": 0}
    assert res.info["server_logprobs_mode"] == "raw_logprobs"
    tok = _tok()
    bodies = {(b["model"], tuple(b["prompt"])): b for b in fake.requests}
    assert len(fake.requests) == len(bodies) == 2 * N_Q  # one request per unit, no repeat
    n_records = n_truncated = n_stopped = 0
    for step in (0, 10):
        label = f"srv--tiny--step{step}"
        samples = _rows(out / "samples" / f"{label}.jsonl")
        records = {r["trajectory_id"]: r for r in _rows(out / "records" / f"{label}.jsonl")}
        assert len(samples) == N_Q * K
        by_q: dict[str, list[dict[str, Any]]] = {}
        for s in samples:
            by_q.setdefault(s["question_id"], []).append(s)
        assert len(by_q) == N_Q
        for qid, rows in by_q.items():
            prompt = rows[0]["prompt_ids"]
            body = bodies[(label, tuple(prompt))]
            # the request: prompt ids as written, every sampling knob explicit
            assert {k: v for k, v in body.items() if k not in ("prompt", "seed")} == {
                "model": label,
                "n": K,
                "temperature": 1.0,
                "top_p": 1.0,
                "top_k": -1,
                "min_p": 0.0,
                "repetition_penalty": 1.0,
                "frequency_penalty": 0.0,
                "presence_penalty": 0.0,
                "max_tokens": MAX_NEW,
                "stop_token_ids": [tok.eos_token_id],
                "logprobs": 1,
                "return_tokens_as_token_ids": True,
            }
            assert body["seed"] == _unit_seed(5, "srv", "tiny", step, qid)
            # what was written is what the fake returned, choice by choice
            expected = fake_completion_choices(body)
            assert [r["index"] for r in rows] == list(range(K))
            for r, choice in zip(rows, expected, strict=True):
                ids = [int(t.split(":")[1]) for t in choice["logprobs"]["tokens"]]
                lps = choice["logprobs"]["token_logprobs"]
                assert r["completion_ids"] == ids
                assert r["server_logprobs"] == lps  # exact floats
                assert r["truncated"] == (choice["finish_reason"] == "length")
                assert r["truncated"] == (ids[-1] != tok.eos_token_id)
                n_truncated += r["truncated"]
                n_stopped += not r["truncated"]
                text = tok.decode(ids, skip_special_tokens=True)
                assert r["empty"] == (not text.strip())
                if r["empty"]:
                    assert r["trajectory_id"] not in records
                    continue
                rec = records[r["trajectory_id"]]
                n_records += 1
                assert rec["text"] == text and rec["question_id"] == qid
                assert rec["seq_logprob"] == math.fsum(lps)  # ℓ, EOS included
                assert rec["logprob_temperature"] == 1.0  # raw: temperature-1 log-probs
                assert rec["sampling_temperature"] == 1.0 and rec["step"] == step
    assert n_truncated > 0 and n_stopped > 0  # both endings exercised
    batch = read_records(out / "records.jsonl")  # the interchange schema accepts them
    assert len(batch.columns["trajectory_id"]) == n_records
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["sample_settings"]["server_logprobs_mode"] == "raw_logprobs"
    # a re-run skips every finished unit and sends nothing
    before = _files(out)
    again = run_sample(cfg, out, progress=False)
    assert again.units_run == 0 and again.units_skipped == 2 * N_Q
    assert len(fake.requests) == 2 * N_Q and _files(out) == before


@pytest.mark.parametrize(
    ("mode", "temperature", "top_p", "logprob_temperature"),
    [
        ("processed_logprobs", 0.7, 1.0, 0.7),  # log-softmax(z/τ): the probe's ℓ at τ
        ("raw_logprobs", 0.7, 1.0, 1.0),  # log-softmax(z): ℓ at temperature 1
        ("processed_logprobs", 1.0, 0.9, None),  # nucleus-renormalised: no record ℓ
    ],
)
def test_what_the_records_say_l_is(
    policy: Path,
    fake: FakeLLM,
    tmp_path: Path,
    mode: str,
    temperature: float,
    top_p: float,
    logprob_temperature: float | None,
) -> None:
    cfg = load_config(
        write_config(
            tmp_path / "c.toml",
            policy,
            fake.base_url,
            probe={"temperature": temperature, "top_p": top_p},
            server={"logprobs_mode": mode},
            questions={"n": 2},
        )
    )
    out = tmp_path / "out"
    run_sample(cfg, out, progress=False)
    recs = _rows(out / "records.jsonl")
    assert recs and {r["sampling_top_p"] for r in recs} == {top_p}
    assert {b["temperature"] for b in fake.requests} == {temperature}
    assert {b["top_p"] for b in fake.requests} == {top_p}
    if logprob_temperature is None:
        assert all("seq_logprob" not in r and "logprob_temperature" not in r for r in recs)
        samples = _rows(out / "samples" / "srv--tiny--step0.jsonl")
        assert all(len(s["server_logprobs"]) == len(s["completion_ids"]) for s in samples)
    else:
        assert {r["logprob_temperature"] for r in recs} == {logprob_temperature}
        assert all(r["seq_logprob"] < 0 for r in recs)
    # another mode in the same directory is refused (records would mix meanings of ℓ)
    other = "raw_logprobs" if mode == "processed_logprobs" else "processed_logprobs"
    from rcea.pipeline.probe import ProbeSetMismatch

    with pytest.raises(ProbeSetMismatch, match="server_logprobs_mode"):
        run_sample(
            load_config(
                write_config(
                    tmp_path / "c2.toml",
                    policy,
                    fake.base_url,
                    probe={"temperature": temperature, "top_p": top_p},
                    server={"logprobs_mode": other},
                    questions={"n": 2},
                )
            ),
            out,
            progress=False,
        )


def test_entropy_after_server_sampling_replaces_l_with_the_teacher_forced_one(
    policy: Path, fake: FakeLLM, tmp_path: Path
) -> None:
    """`probe entropy` runs on server samples unchanged: it scores the server's ids under
    the local weights, and its ℓ (at τ, full vocabulary) replaces the server's in the
    records; the server's values stay in samples/."""
    from rcea.pipeline.probe import run_entropy
    from rcea.pipeline.probe.entropy_kernel import naive_token_stats

    cfg = load_config(
        write_config(
            tmp_path / "c.toml",
            policy,
            fake.base_url,
            probe={"temperature": 0.7},
            questions={"n": 2},
        )
    )
    out = tmp_path / "out"
    run_sample(cfg, out, progress=False)
    before = {r["trajectory_id"]: r for r in _rows(out / "records.jsonl")}
    assert {r["logprob_temperature"] for r in before.values()} == {1.0}  # raw_logprobs
    run_entropy(cfg, out, progress=False)
    after = {r["trajectory_id"]: r for r in _rows(out / "records.jsonl")}
    assert after.keys() == before.keys()
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(policy)
    samples = {s["trajectory_id"]: s for s in _rows(out / "samples" / "srv--tiny--step0.jsonl")}
    checked = 0
    for tid, rec in after.items():
        assert rec["logprob_temperature"] == 0.7
        assert rec["seq_logprob"] != before[tid]["seq_logprob"]
        s = samples.get(tid)
        if s is None:
            continue
        ref = naive_token_stats(model, s["prompt_ids"], s["completion_ids"], temperature=0.7)
        assert rec["seq_logprob"] == pytest.approx(ref.seq_logprob, abs=1e-4)
        assert rec["n_tokens"] == len(s["completion_ids"]) == len(s["server_logprobs"])
        checked += 1
    assert checked > 0


def test_429_500_and_timeouts_are_retried(policy: Path, tmp_path: Path) -> None:
    """Each unit's first attempt fails (429 with Retry-After, 500, or a hang past the
    timeout); the output equals a fault-free run's, and every unit got one good reply."""
    with FakeLLM() as clean_fake:
        clean_cfg = load_config(write_config(tmp_path / "a.toml", policy, clean_fake.base_url))
        run_sample(clean_cfg, tmp_path / "clean", progress=False)
    kinds = ["429", "500", "hang"]
    first_seen: dict[str, str] = {}

    def fault(body: dict[str, Any], attempt: int) -> str | None:
        key = body_key(body)
        if key not in first_seen:
            first_seen[key] = kinds[len(first_seen) % 3]
        return first_seen[key] if attempt == 1 else None

    with FakeLLM() as fake:
        fake.completion_fault = fault
        fake.faults.retry_after_s = 0.05
        fake.faults.hang_s = 2.0
        cfg = load_config(
            write_config(tmp_path / "b.toml", policy, fake.base_url, server={"timeout_s": 0.5})
        )
        res = run_sample(cfg, tmp_path / "faulty", progress=False)
        statuses = sorted({c.status for c in fake.calls})
        ok = _ok_calls_by_key(fake)
        sent: dict[str, int] = {}
        for b in fake.requests:
            sent[body_key(b)] = sent.get(body_key(b), 0) + 1
    assert res.units_run == 2 * N_Q
    # a hang is logged only when it ends, after the client gave up on it (timeout)
    assert {200, 429, 500} <= set(statuses)
    assert sorted(first_seen.values()).count("hang") == 3
    # every unit: the faulted attempt, then exactly one good reply
    assert set(sent.values()) == {2} and len(sent) == 2 * N_Q
    assert len(ok) == 2 * N_Q and set(ok.values()) == {1}
    assert _files(tmp_path / "faulty") == _files(tmp_path / "clean")


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("malformed", "JSONDecodeError|not JSON"),
        ("no_logprobs", "no logprobs"),
        ("few_choices", f"expected {K} choices, got {K - 1}"),
        ("text_tokens", "not 'token_id:N'"),
    ],
)
def test_unusable_reply_is_a_clear_error_and_a_rerun_repeats_no_finished_call(
    policy: Path, fake: FakeLLM, tmp_path: Path, kind: str, message: str
) -> None:
    cfg = load_config(write_config(tmp_path / "c.toml", policy, fake.base_url))
    out = tmp_path / "out"
    tok = _tok()
    from rcea.pipeline.probe.common import probe_questions

    questions = probe_questions(cfg)
    bad = questions[2]
    bad_prompt = tok(bad.prompt)["input_ids"]

    def fault(body: dict[str, Any], attempt: int) -> str | None:
        return kind if body["prompt"] == bad_prompt and body["model"].endswith("step0") else None

    fake.completion_fault = fault
    with pytest.raises(ServerSampleError) as err:
        run_sample(cfg, out, progress=False)
    text = str(err.value)
    assert "checkpoint srv--tiny--step0" in text and f"question {bad.question_id}" in text
    assert "'srv--tiny--step0'" in text  # the served model name
    import re

    assert re.search(message, text), text
    # nothing half-written: exactly the units the manifest calls done, in question order
    manifest = json.loads((out / "manifest.json").read_text())
    done = manifest["done"]["sample"].get("srv--tiny--step0", [])
    assert done == [q.question_id for q in questions[:2]]
    samples = _rows(out / "samples" / "srv--tiny--step0.jsonl")
    assert [s["question_id"] for s in samples] == [q for q in done for _ in range(K)]
    assert not (out / "samples" / "srv--tiny--step10.jsonl").exists()
    cached_at_failure = len(list((out / "server-cache").glob("*.jsonl")))
    assert cached_at_failure == 1

    # the server is fixed: the rerun finishes, and no call that had been answered well
    # (written, or only cached by its worker) is sent again
    fake.completion_fault = None
    res = run_sample(cfg, out, progress=False)
    assert res.units_skipped == 2 and res.units_run == 2 * N_Q - 2
    counts: dict[str, int] = {}
    for b in fake.requests:
        counts[body_key(b)] = counts.get(body_key(b), 0) + 1
    bad_keys = [
        k for k, b in fake.bodies.items() if b["prompt"] == bad_prompt and "step0" in b["model"]
    ]
    assert len(bad_keys) == 1
    assert counts.pop(bad_keys[0]) == 2  # the unusable reply, then the good one
    assert len(counts) == 2 * N_Q - 1 and set(counts.values()) == {1}
    with FakeLLM() as clean_fake:
        clean = tmp_path / "clean"
        run_sample(
            load_config(write_config(tmp_path / "d.toml", policy, clean_fake.base_url)),
            clean,
            progress=False,
        )
    assert _files(out) == _files(clean)


def test_server_errors_that_are_not_retried_name_the_unit(
    policy: Path, fake: FakeLLM, tmp_path: Path
) -> None:
    """A 400 (e.g. an unknown served model name) fails at once, naming the checkpoint."""
    cfg = load_config(
        write_config(tmp_path / "c.toml", policy, fake.base_url, server={"concurrency": 1})
    )
    fake.script.append(("400", 0))
    with pytest.raises(ServerSampleError, match=r"srv--tiny--step0.*HTTP 400"):
        run_sample(cfg, tmp_path / "out", progress=False)
    assert [c.status for c in fake.calls] == [400]


def test_cli_probe_sample_with_the_server_backend(
    policy: Path, fake: FakeLLM, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from rcea.app.cli import app as cli

    # the config names no endpoint; --base-url gives it
    cfg_path = write_config(
        tmp_path / "c.toml", policy, fake.base_url, server={"base_url": "http://unused:1/v1"}
    )
    out = tmp_path / "out"
    args = ["probe", "sample", "--config", str(cfg_path), "--out", str(out)]
    res = CliRunner().invoke(cli, [*args, "--base-url", fake.base_url, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["ok"] and data["units_run"] == 2 * N_Q
    assert data["info"]["server"]["calls"] == 2 * N_Q
    assert len(fake.requests) == 2 * N_Q
    assert len(read_records(out / "records.jsonl").columns["trajectory_id"]) > 0
    # a broken server: a clear error, exit code 1, the unit named
    fake.completion_fault = lambda body, attempt: "no_logprobs"
    res = CliRunner().invoke(
        cli, [*args[:-1], str(tmp_path / "out2"), "--base-url", fake.base_url, "--json"]
    )
    assert res.exit_code == 1
    assert "no logprobs" in res.output and "srv--tiny--step0" in res.output
    # the backend without logprobs_mode is a config error naming the key
    bad = tmp_path / "bad.toml"
    bad.write_text(cfg_path.read_text().replace('logprobs_mode = "raw_logprobs"\n', ""))
    res = CliRunner().invoke(cli, ["probe", "sample", "--config", str(bad), "--out", str(out)])
    assert res.exit_code == 1 and "[server] logprobs_mode" in res.output


def test_server_config_checks() -> None:
    base = {"probe": {"backend": "server"}, "checkpoints": {"list": []}}
    ok = {"base_url": "http://h:8000/v1", "logprobs_mode": "raw_logprobs"}
    cfg = parse_config({**base, "server": ok})
    assert cfg.server.model == "{path}" and cfg.server.concurrency == 8
    cases = [
        ({"logprobs_mode": "raw_logprobs"}, r"\[server\] base_url"),
        ({**ok, "logprobs_mode": "processed"}, r"logprobs_mode.*raw_logprobs, processed_logprobs"),
        ({**ok, "model": "{nope}"}, r"\[server\] model: bad template"),
        ({**ok, "models": {"a--b--step1": 3}}, r"\[server.models\] a--b--step1"),
        ({**ok, "models": {"x": {"model": "m", "port": "1"}}}, r"\[server.models\] x"),
        ({**ok, "concurrency": 0}, r"concurrency: must be > 0"),
        ({**ok, "colour": "red"}, r"\[server\] colour: unknown key"),
    ]
    for server, pattern in cases:
        with pytest.raises(ConfigError, match=pattern):
            parse_config({**base, "server": server})
    # per-checkpoint endpoints replace base_url
    both = {"logprobs_mode": "raw_logprobs", "models": {"a": {"model": "m", "base_url": "u"}}}
    assert parse_config({**base, "server": both}).server.models["a"]["base_url"] == "u"
    # other backends ignore [server]
    assert parse_config({"server": {"model": "x"}}).probe.backend == "auto"


def test_served_model_names(policy: Path) -> None:
    from rcea.pipeline.probe.config import Checkpoint, served_model

    cfg = parse_config(
        {
            "probe": {"backend": "server"},
            "server": {
                "base_url": "http://a/v1",
                "model": "{run}-{step}",
                "logprobs_mode": "raw_logprobs",
                "models": {
                    "r--m--step5": "special",
                    "r--m--step9": {"base_url": "http://b/v1"},
                },
            },
        }
    )
    ck = Checkpoint(str(policy), "r", "m", 1)
    assert served_model(cfg, ck) == ("http://a/v1", "r-1")
    assert served_model(cfg, Checkpoint("p", "r", "m", 5)) == ("http://a/v1", "special")
    assert served_model(cfg, Checkpoint("p", "r", "m", 9)) == ("http://b/v1", "r-9")


@pytest.mark.slow
def test_killed_run_resumes_without_repeating_finished_calls(policy: Path, tmp_path: Path) -> None:
    """``rcea probe sample`` is SIGKILLed mid-run; the resumed run sends no request whose
    reply had been received (written, or cached by its worker) before the kill, and ends
    with the files of an uninterrupted run."""
    from tests.support.probe import run_until_killed

    with FakeLLM() as clean_fake:
        clean = tmp_path / "clean"
        run_sample(
            load_config(write_config(tmp_path / "a.toml", policy, clean_fake.base_url)),
            clean,
            progress=False,
        )
    with FakeLLM(latency_s=0.15) as fake:
        cfg_path = write_config(tmp_path / "b.toml", policy, fake.base_url)
        out = tmp_path / "resumed"
        args = ["probe", "sample", "--config", str(cfg_path), "--out", str(out)]
        killed_at = run_until_killed(args, out / "manifest.json", "sample", 2)
        assert 2 <= killed_at < 2 * N_Q
        received = set()  # (checkpoint, question) whose reply the killed run had
        for seg in (out / "server-cache").glob("*.jsonl"):
            for line in seg.read_text().splitlines():
                try:
                    e = json.loads(line)
                except ValueError:
                    continue  # a torn last line
                received.add((e["checkpoint"], e["question_id"]))
        assert len(received) >= killed_at
        sent_before = len(fake.requests)
        res = run_sample(load_config(cfg_path), out, progress=False)
        assert res.units_skipped == killed_at and res.units_run == 2 * N_Q - killed_at
        assert res.info["server"]["cache_hits"] == len(received) - killed_at
        prompts = {
            s["question_id"]: tuple(s["prompt_ids"])
            for s in _rows(out / "samples" / "srv--tiny--step0.jsonl")
        }
        after = [(b["model"], tuple(b["prompt"])) for b in fake.requests[sent_before:]]
        for label, qid in received:
            assert (label, prompts[qid]) not in after, (label, qid)
        assert len(after) == 2 * N_Q - len(received)
    assert _files(out) == _files(clean)
