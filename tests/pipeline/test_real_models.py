"""Real-shaped models: a tiny random Qwen2 with a byte-level BPE
tokenizer, a ChatML chat template and eos (``<|im_end|>``) ≠ pad (``<|endoftext|>``), built
offline by :mod:`tests.support.tiny_qwen`, goes through the same CPU code paths as a local 1.5B
checkpoint: ``rcea probe sample|entropy`` and ``rcea train run``.

Checked against independent computations: the probe's prompt ids equal the tokenizer's own
``apply_chat_template(..., add_generation_prompt=True)``; the token entropies and ℓ equal a
plain full-vocabulary forward pass over completion positions only; completions end at the
first stop id; TRL conditions on the same prompt ids as the probe."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

pytest.importorskip("trl")
pytest.importorskip("tokenizers")

from rcea.app.cli import app  # noqa: E402
from tests.support.tiny_qwen import DEFAULT_SYSTEM, ENDOFTEXT, IM_END, TinyQwen, build_tiny_qwen  # noqa: E402

runner = CliRunner()
pytestmark = pytest.mark.filterwarnings("ignore::FutureWarning", "ignore::UserWarning")

MAX_NEW = 16
K = 4
PROBLEMS = {
    "q-add": ("What is 3 + 4?", "7"),
    "q-frac": ("Compute \\frac{1}{2} + \\frac{1}{3}.", "\\frac{5}{6}"),
    "q-area": ("The area of a circle of radius 2?", "4\\pi"),
}


def _ok(args: list[str]) -> dict[str, Any]:
    res = runner.invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout)


def _prompt(qid: str) -> str:
    from rcea.pipeline.probe.questions import DEFAULT_PROMPT_TEMPLATE

    return DEFAULT_PROMPT_TEMPLATE.replace("{question}", PROBLEMS[qid][0])


def _tokenizer(path: Path) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path)


def _template_ids(tok: Any, conversation: list[dict[str, str]]) -> list[int]:
    """The reference: the tokenizer's own call, independent of rcea.pipeline.chat."""
    out = tok.apply_chat_template(
        conversation, add_generation_prompt=True, tokenize=True, return_dict=True
    )
    return list(out["input_ids"])


def _samples(out: Path) -> list[dict[str, Any]]:
    (path,) = (out / "samples").glob("*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def qwen(tmp_path_factory: pytest.TempPathFactory) -> TinyQwen:
    import torch

    torch.set_num_threads(1)
    return build_tiny_qwen(tmp_path_factory.mktemp("qwen") / "tiny-qwen")


@pytest.fixture(scope="module")
def questions(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "math.jsonl"
    rows = [{"id": q, "problem": p, "answer": a} for q, (p, a) in PROBLEMS.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _probe_config(path: Path, questions: Path, checkpoints: str, extra: str = "") -> Path:
    path.write_text(
        f"""
[probe]
k = {K}
max_new_tokens = {MAX_NEW}
backend = "transformers"
torch_threads = 1
[questions]
source = "{questions}"
{checkpoints}
[entropy]
chunk_size = 7
batch_size = 8
{extra}
"""
    )
    return path


def _listed(model: Path) -> str:
    return f"""
[[checkpoints.list]]
path = "{model}"
run = "base"
model = "tiny-qwen"
step = 0
"""


@pytest.fixture(scope="module")
def probed(qwen: TinyQwen, questions: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`rcea probe sample` then `rcea probe entropy` on the tiny Qwen (chat template)."""
    tmp = tmp_path_factory.mktemp("probe")
    cfg = _probe_config(tmp / "probe.toml", questions, _listed(qwen.path))
    out = tmp / "out"
    sample = _ok(["probe", "sample", "--config", str(cfg), "--out", str(out)])
    assert sample["checkpoints"][0]["chat_template"] is True
    _ok(["probe", "entropy", "--config", str(cfg), "--out", str(out)])
    return out


def test_probe_prompt_ids_are_the_chat_template(qwen: TinyQwen, probed: Path) -> None:
    tok = _tokenizer(qwen.path)
    samples = _samples(probed)
    assert len(samples) == K * len(PROBLEMS)
    for s in samples:
        expected = _template_ids(tok, [{"role": "user", "content": _prompt(s["question_id"])}])
        assert s["prompt_ids"] == expected
        text = tok.decode(s["prompt_ids"])
        assert text.startswith(
            f"<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n<|im_start|>user\n"
        )
        assert text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert tok(_prompt(s["question_id"]))["input_ids"] != s["prompt_ids"]  # not raw text


def test_completions_end_at_eos_which_is_not_pad(qwen: TinyQwen, probed: Path) -> None:
    tok = _tokenizer(qwen.path)
    assert (tok.eos_token, tok.pad_token) == (IM_END, ENDOFTEXT)
    assert qwen.eos_id != qwen.pad_id
    samples = _samples(probed)
    stops = {qwen.eos_id, qwen.pad_id}
    ended = [s for s in samples if not s["truncated"]]
    cut = [s for s in samples if s["truncated"]]
    assert ended and cut  # the builder's EOS boost: both kinds occur
    for s in ended:
        ids = s["completion_ids"]
        assert ids[-1] == qwen.eos_id and not stops & set(ids[:-1])
    for s in cut:
        assert len(s["completion_ids"]) == MAX_NEW and not stops & set(s["completion_ids"])
    records = {
        json.loads(line)["trajectory_id"]: json.loads(line)
        for line in (probed / "records.jsonl").read_text().splitlines()
    }
    for s in samples:
        if s["empty"]:
            continue
        rec = records[s["trajectory_id"]]
        assert rec["text"] == tok.decode(s["completion_ids"], skip_special_tokens=True)
        assert IM_END not in rec["text"] and ENDOFTEXT not in rec["text"]
        assert rec["truncated"] is s["truncated"]
        assert rec["n_tokens"] == len(s["completion_ids"])  # EOS counted, prompt not


def test_entropies_are_over_completion_tokens_only(qwen: TinyQwen, probed: Path) -> None:
    """Independent reference: one unpadded forward pass per sample, float64 log-softmax over
    the full vocabulary at the positions that predict completion tokens."""
    import numpy as np
    import pyarrow.parquet as pq
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(qwen.path).eval()
    (art,) = (probed / "tokens").glob("*.parquet")
    stats = {r["trajectory_id"]: r for r in pq.read_table(art).to_pylist()}
    records = {
        json.loads(line)["trajectory_id"]: json.loads(line)
        for line in (probed / "records.jsonl").read_text().splitlines()
    }
    checked = 0
    for s in _samples(probed):
        if s["empty"]:
            continue
        prompt, comp = s["prompt_ids"], s["completion_ids"]
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + comp])).logits[0].double()
        logp = torch.log_softmax(logits[len(prompt) - 1 : len(prompt) + len(comp) - 1], -1)
        ent = -(logp.exp() * logp).sum(-1).numpy()
        chosen = logp[torch.arange(len(comp)), torch.tensor(comp)].numpy()
        st = stats[s["trajectory_id"]]
        assert len(st["token_entropies"]) == len(comp)
        np.testing.assert_allclose(st["token_entropies"], ent, atol=2e-5)
        np.testing.assert_allclose(st["token_logprobs"], chosen, atol=2e-5)
        rec = records[s["trajectory_id"]]
        assert rec["seq_logprob"] == pytest.approx(float(chosen.sum()), abs=1e-4)
        assert rec["mean_token_entropy"] == pytest.approx(float(ent.mean()), abs=2e-5)
        checked += 1
    assert checked >= K * len(PROBLEMS) - 2


def test_system_prompt_and_no_chat_template_options(
    qwen: TinyQwen, questions: Path, tmp_path: Path
) -> None:
    tok = _tokenizer(qwen.path)
    cfg = _probe_config(tmp_path / "p.toml", questions, _listed(qwen.path))
    short = ["--k", "1", "--max-new-tokens", "2", "--questions", "1"]
    sys_out = tmp_path / "sys"
    _ok(["probe", "sample", "--config", str(cfg), "--out", str(sys_out), *short,
         "--system-prompt", "Answer tersely."])  # fmt: skip
    (s,) = _samples(sys_out)
    conversation = [
        {"role": "system", "content": "Answer tersely."},
        {"role": "user", "content": _prompt(s["question_id"])},
    ]
    assert s["prompt_ids"] == _template_ids(tok, conversation)
    assert DEFAULT_SYSTEM not in tok.decode(s["prompt_ids"])
    # one directory never mixes prompt formats
    res = runner.invoke(
        app, ["probe", "sample", "--config", str(cfg), "--out", str(sys_out), *short,
              "--no-chat-template"],
    )  # fmt: skip
    assert res.exit_code != 0 and "chat_template='auto' (now 'none')" in res.output
    raw_out = tmp_path / "raw"
    sample = _ok(["probe", "sample", "--config", str(cfg), "--out", str(raw_out), *short,
                  "--no-chat-template"])  # fmt: skip
    assert sample["checkpoints"][0]["chat_template"] is False
    (s,) = _samples(raw_out)
    assert s["prompt_ids"] == tok(_prompt(s["question_id"]))["input_ids"]
    res = runner.invoke(
        app, ["probe", "sample", "--config", str(cfg), "--out", str(tmp_path / "x"), *short,
              "--no-chat-template", "--system-prompt", "Hi"],
    )  # fmt: skip
    assert res.exit_code != 0 and "[chat] system: needs a chat template" in res.output


def test_bench_runs_on_the_tiny_qwen(qwen: TinyQwen, questions: Path, tmp_path: Path) -> None:
    """`rcea probe bench` (greedy + pass@k) through the same generator and math verifier."""
    extra = f"""
[bench]
max_new_tokens = 4
trace = false
[[bench.sets]]
name = "math"
source = "{questions}"
[bench.passk]
n = 2
k = [1, 2]
"""
    cfg = _probe_config(tmp_path / "b.toml", questions, _listed(qwen.path), extra)
    _ok(["probe", "bench", "--config", str(cfg), "--out", str(tmp_path / "b")])
    greedy = [json.loads(x) for x in (tmp_path / "b/bench/greedy.jsonl").read_text().splitlines()]
    assert sorted(r["question_id"] for r in greedy) == sorted(PROBLEMS)
    assert all(r["correct"] in (0, 1) and 1 <= r["length"] <= 4 for r in greedy)
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["bench_settings"]["chat_template"] == "auto"


def test_base_model_without_a_template_gets_raw_text(tmp_path: Path) -> None:
    from rcea.pipeline.chat import PromptFormat
    from rcea.pipeline.probe.common import Generator
    from rcea.pipeline.probe.config import ConfigError

    base = build_tiny_qwen(tmp_path / "base", with_chat_template=False)
    gen = Generator(str(base.path), backend="transformers", max_new_tokens=2)
    assert not gen.uses_chat
    assert gen.prompt_ids("What is 3 + 4?") == _tokenizer(base.path)("What is 3 + 4?")["input_ids"]
    gen = Generator(
        str(base.path),
        backend="transformers",
        max_new_tokens=2,
        prompt_format=PromptFormat(system="Be brief."),
    )
    with pytest.raises(ConfigError, match="this tokenizer has none"):
        gen.prompt_ids("What is 3 + 4?")


def test_generation_conditions_on_the_given_prompt_ids(qwen: TinyQwen) -> None:
    """Greedy completions of the probe's generator equal ``model.generate`` on the chat ids."""
    import torch
    from transformers import AutoModelForCausalLM

    from rcea.pipeline.probe.common import Generator

    gen = Generator(str(qwen.path), backend="transformers", max_new_tokens=MAX_NEW)
    prompts = [_prompt(q) for q in PROBLEMS]
    tok = _tokenizer(qwen.path)
    ids = [_template_ids(tok, [{"role": "user", "content": p}]) for p in prompts]
    outs = gen.generate([gen.prompt_ids(p) for p in prompts], 1, seed=0, greedy=True)
    model = AutoModelForCausalLM.from_pretrained(qwen.path).eval()
    for row, (g,) in zip(ids, outs, strict=True):
        with torch.no_grad():
            ref = model.generate(
                torch.tensor([row]),
                attention_mask=torch.ones(1, len(row), dtype=torch.long),
                do_sample=False,
                max_new_tokens=MAX_NEW,
            )[0, len(row) :].tolist()
        n = next((i + 1 for i, t in enumerate(ref) if t in (qwen.eos_id, qwen.pad_id)), len(ref))
        assert g.completion_ids == ref[:n]


def test_generation_config_stop_ids_end_completions(tmp_path: Path) -> None:
    """Qwen2.5-Instruct also stops on ``<|endoftext|>`` (its generation config's EOS list;
    here also the pad id): a completion ending there is complete, not truncated."""
    from rcea.pipeline.probe.common import Generator

    m = build_tiny_qwen(tmp_path / "m", boost_token=ENDOFTEXT, eos_logit=4.0)
    gen = Generator(str(m.path), backend="transformers", max_new_tokens=MAX_NEW)
    assert gen.stop_ids() == [m.eos_id, m.pad_id]
    (outs,) = gen.generate([gen.prompt_ids("What is 3 + 4?")], 12, seed=0)
    ended = [g for g in outs if not g.truncated]
    assert ended, "no completion hit a stop id"
    for g in ended:
        assert g.completion_ids[-1] == m.pad_id
        assert m.pad_id not in g.completion_ids[:-1] and m.eos_id not in g.completion_ids
    for g in outs:
        assert g.truncated == (
            len(g.completion_ids) == MAX_NEW and g.completion_ids[-1] != m.pad_id
        )


def _train_config(path: Path, model: Path, questions: Path, out: Path, extra: str = "") -> Path:
    path.write_text(
        f"""
[model]
path = "{model}"
[objective]
name = "grpo"
[data]
source = "{questions}"
[training]
output_dir = "{out}"
max_steps = 2
learning_rate = 1e-3
per_device_train_batch_size = 4
num_generations = 4
max_completion_length = 8
save_steps = 1
torch_threads = 1
progress_bar = false
{extra}
"""
    )
    return path


def test_train_run_then_probe_the_checkpoints(
    qwen: TinyQwen, questions: Path, tmp_path: Path
) -> None:
    """`rcea train run` (2 steps, math verifier, chat template) on the tiny Qwen, then the
    run dir's base and final checkpoints are probed through the CLI."""
    run = tmp_path / "run"
    cfg = _train_config(tmp_path / "train.toml", qwen.path, questions, run)
    res = _ok(["train", "run", "--config", str(cfg)])
    assert res["steps"] == 2
    meta = json.loads((run / "run.json").read_text())
    assert meta["prompt"] == {"chat_template_applied": True, "verifier": "math"}
    curves = [json.loads(line) for line in (run / "curves.jsonl").read_text().splitlines()]
    assert [c["step"] for c in curves] == [1, 2]
    assert all("verifier/accuracy" in c and "rewards/verifier_correct/mean" in c for c in curves)
    final_tok = _tokenizer(run / "final")
    assert final_tok.chat_template and (final_tok.eos_token, final_tok.pad_token) == (
        IM_END,
        ENDOFTEXT,
    )
    probe = _probe_config(
        tmp_path / "probe.toml",
        questions,
        f'[checkpoints]\nrun_dirs = ["{run}"]\nmilestones = [0, 1]\nmodel = "tiny-qwen"',
    )
    out = _ok(["probe", "sample", "--config", str(probe), "--out", str(tmp_path / "p"),
               "--k", "2", "--max-new-tokens", "4"])  # fmt: skip
    assert [(c["run"], c["step"], c["chat_template"]) for c in out["checkpoints"]] == [
        ("grpo", 0, True),
        ("grpo", 2, True),
    ]


@pytest.mark.parametrize("chat", [True, False])
def test_trl_conditions_on_the_probe_prompt_ids(
    qwen: TinyQwen, questions: Path, tmp_path: Path, chat: bool
) -> None:
    """The prompt ids TRL generates from (captured from the trainer's scored batch) are the
    probe's: the chat template with add_generation_prompt, or the raw text."""
    from rcea.pipeline.training.config import load_config
    from rcea.pipeline.training.run import build_trainer

    cfg = load_config(
        _train_config(tmp_path / "t.toml", qwen.path, questions, tmp_path / "run"),
        max_steps=1,
        chat_template=None if chat else "none",
    )
    trainer, tok, _ = build_trainer(cfg, progress=False)
    captured: list[list[int]] = []
    original = trainer.rcea_prepare

    def capture(out: dict[str, Any], outcomes: list[float]) -> dict[str, Any]:
        for ids, mask in zip(out["prompt_ids"], out["prompt_mask"], strict=True):
            captured.append([int(i) for i, m in zip(ids, mask, strict=True) if m])
        return original(out, outcomes)

    trainer.rcea_prepare = capture
    trainer.train()
    ref = _tokenizer(qwen.path)
    expected = {
        tuple(
            _template_ids(ref, [{"role": "user", "content": _prompt(q)}])
            if chat
            else ref(_prompt(q))["input_ids"]
        )
        for q in PROBLEMS
    }
    assert len(captured) == 4  # one prompt x num_generations
    assert {tuple(c) for c in captured} <= expected
