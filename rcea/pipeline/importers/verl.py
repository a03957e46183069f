"""verl rollout / validation dumps → interchange records.

verl (``trainer.rollout_data_dir`` / ``trainer.validation_data_dir``) writes one
``{global_step}.jsonl`` per step; every line is one sample: ``input`` (the decoded prompt),
``output`` (the completion), ``score`` (the reward function's score), ``step``, optional
``gts`` (the ground truth) and any reward-extra keys the reward function returned. The
dumps carry no run or model name, no question id and no seed, so:

* ``run`` and ``model`` are given by the caller;
* ``question_id`` is ``q-`` + the first 16 hex digits of SHA-256 of the question text (the
  prompt without its chat template, ``rcea.pipeline.importers.chat``), or the value of a
  ``question_key``;
* ``seed`` is the sample's index within its question's group in that step file, in line
  order (the sampling order in a validation dump; ``balance_batch`` reorders rollout dumps);
* ``reward`` follows an explicit score rule (:func:`score_rule`): a dump whose scores are
  all 0/1 (or true/false) is its own reward; any other score (DAPO's ±1, a 0.1 partial
  credit, a −0.5 format penalty) needs ``reward_key`` (a 0/1/true/false key such as
  DAPO's ``acc``) or ``reward_threshold`` (reward = 1 when ``score > threshold``), else
  the file is refused with the distinct values seen and both options;
* trailing special tokens (``<|im_end|>``, ``<|endoftext|>``, …: a dump decoded with
  ``skip_special_tokens=False``) are stripped from ``output``, counted;
* an agent-loop transcript (``num_turns`` > 2, or tool calls in ``output``) follows an
  explicit ``--multi-turn`` choice (:data:`MULTI_TURN`; refused by default);
  ``num_turns`` stays in ``reward_extras``;
* ``trajectory_id`` is ``RUN:MODEL:sSTEP:QUESTION_ID:SEED`` (``RUN:MODEL:tTRAIN_SEED:sSTEP:…``
  with ``--train-seed``).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import defaultdict
from collections.abc import Generator
from contextlib import closing
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rcea.audits.inputs import InputError, iter_json_lines
from rcea.pipeline.importers.chat import (
    QuestionRegexTimeout,
    compile_question_regex,
    extract_question,
)
from rcea.pipeline.importers.common import (
    check_rollout_options,
    check_train_seed,
    digest_without_unset_train_seed,
    numbered_files,
    relabel,
    source_label,
)
from rcea.pipeline.records import (
    MAX_ERRORS,
    RecordBatch,
    RecordError,
    RecordValidationError,
    input_refusal,
    records_from_rows,
)
from rcea.pipeline.transcript import split_transcript, turns_json

STEP_FILE = re.compile(r"\A(\d+)\.jsonl\Z")
MAX_ID = 300  # the store's trajectory_id / question_id width


@dataclass(frozen=True)
class VerlOptions:
    run: str
    model: str
    reward_threshold: float | None = None
    reward_key: str | None = None
    question_key: str | None = None
    answer_key: str | None = None
    validity_key: str | None = None
    chat_template: str = "auto"
    question_regex: str | None = None
    skip_empty_output: bool = False
    multi_turn: str = "refuse"

    train_seed: int | None = None

    def __post_init__(self) -> None:
        check_train_seed(self.train_seed)
        check_rollout_options(
            run=self.run,
            model=self.model,
            chat_template=self.chat_template,
            reward_threshold=self.reward_threshold,
            question_regex=self.question_regex,
        )
        if self.multi_turn not in MULTI_TURN:
            raise ValueError(
                f"unknown --multi-turn {self.multi_turn!r}: use one of {', '.join(MULTI_TURN)}"
            )
        if self.reward_key is not None and not self.reward_key.strip():
            raise ValueError("--reward-key must be a non-empty key")

    def digest_options(self) -> dict[str, Any]:
        return digest_without_unset_train_seed(asdict(self))


def step_files(directory: Path) -> tuple[list[Path], list[Path]]:
    """The ``{global_step}.jsonl`` files of a dump directory in step order, and the other
    files found there (reported, never read)."""
    if not directory.exists():
        raise FileNotFoundError(f"{directory}: no such directory")
    if directory.is_file():
        return [directory], []
    return numbered_files(directory, STEP_FILE)


#: The keys every line of a verl dump has (``RayPPOTrainer._dump_generations``).
DUMP_KEYS = frozenset({"input", "output", "score"})


def looks_like_dump(path: Path) -> bool:
    """Whether ``path`` is a verl step file (first JSON line has ``input``, ``output`` and
    ``score`` and no ``trajectory_id``) rather than interchange records."""
    try:
        for _, obj in iter_json_lines(path):
            return isinstance(obj, dict) and obj.keys() >= DUMP_KEYS and "trajectory_id" not in obj
    except (OSError, InputError):
        return False
    return False


def dump_hint(path: Path) -> str:
    """What to run instead of ``rcea validate``/``rcea ingest`` on a verl dump."""
    where = Path(path).parent if STEP_FILE.match(Path(path).name) else Path(path)
    return (
        f"{path} is a verl dump (input/output/score per line), not interchange records: "
        f"import it with `rcea import verl {where} --study S --run RUN --model MODEL` "
        "(it converts and validates every step file)"
    )


def question_id_for(text: str) -> str:
    return "q-" + hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _trajectory_id(
    run: str, model: str, step: int, qid: str, seed: int, train_seed: int | None = None
) -> str:
    # a training seed (docs/estimators.md item 17) names its replicate: two seeds of one run
    # share every other part of the id
    replicate = "" if train_seed is None else f"t{train_seed}:"
    tid = f"{run}:{model}:{replicate}s{step}:{qid}:{seed}"
    if len(tid) <= MAX_ID:
        return tid
    return "verl-" + hashlib.sha256(tid.encode("utf-8")).hexdigest()[:40]


def _score(v: Any) -> float | None:
    if isinstance(v, bool):
        return float(v)
    if isinstance(v, int | float) and math.isfinite(v):
        return float(v)
    return None


#: Special tokens a dump decoded with ``skip_special_tokens=False`` keeps at the end of a
#: completion (Qwen / ChatML, Llama 3, Llama 2 / Mistral, GPT-2 style).
SPECIAL_TOKENS: tuple[str, ...] = (
    "<|im_end|>",
    "<|endoftext|>",
    "<|eot_id|>",
    "<|end_of_text|>",
    "</s>",
)
#: What ``--multi-turn`` does with an agent-loop transcript (``num_turns`` > 2, or tool
#: calls in the completion): ``refuse`` it (the default: judging or labelling a whole
#: transcript, or only its end, changes what is measured, so the user chooses), keep its
#: ``last-turn`` (the final assistant turn) as the text, or keep the whole
#: ``transcript``: the text as dumped plus its turns (:mod:`rcea.pipeline.transcript`), shown
#: to the judge and the annotators one block per turn.
MULTI_TURN = ("refuse", "last-turn", "transcript")
#: The keys of a dump line that are not reward extras.
DUMP_BASE_KEYS = frozenset({"input", "output", "gts", "score", "step"})
TOOL_MARKERS = ("<tool_call>", "<tool_response>")


def is_multi_turn(obj: dict[str, Any], output: str) -> bool:
    """verl's agent loops count the prompt's user turn: a single-turn sample has
    ``num_turns`` = 2 (``SingleTurnAgentLoop``), a tool loop user + assistant turns + 1."""
    turns = obj.get("num_turns")
    many = isinstance(turns, int) and not isinstance(turns, bool) and turns > 2
    return many or any(m in output for m in TOOL_MARKERS)


def last_turn(output: str) -> str | None:
    """The last assistant turn of a transcript, or ``None`` when it has only one turn
    (no turn header found: nothing tells where the last turn starts)."""
    turns = split_transcript(output)
    if len(turns) < 2 or turns[-1].role != "assistant":
        return None
    return turns[-1].content


#: Reward extras that verl's own scorers return as a 0/1 correctness (DAPO's ``acc``).
KNOWN_REWARD_KEYS: tuple[str, ...] = ("acc",)


def strip_special(text: str) -> tuple[str, int]:
    """``text`` without its trailing special tokens (any order, any number), and how many."""
    n = 0
    while True:
        bare = text.rstrip()
        for tok in SPECIAL_TOKENS:
            if bare.endswith(tok):
                text = bare[: -len(tok)]
                n += 1
                break
        else:
            return text, n


def _binary(v: Any) -> int | None:
    """0/1 from ``true``/``false``/``0``/``1`` (a number equal to them), else ``None``."""
    if isinstance(v, bool):
        return int(v)
    if isinstance(v, int | float) and v in (0, 1):
        return int(v)
    return None


class ScoreRuleError(ValueError):
    """A dump whose scores are not 0/1 and no rule given: names the values and options."""


def score_rule(values: list[float], keys: set[str], opts: VerlOptions) -> dict[str, Any]:
    """The rule that turns a file's scores into R ∈ {0, 1}, recorded with the import:
    ``{"source": "score"|KEY, "threshold": T|None, "score_values": [...]}``.
    ``ScoreRuleError`` when the scores are not all 0/1 and neither ``reward_key`` nor
    ``reward_threshold`` was given."""
    distinct = sorted(set(values))
    shown = distinct if len(distinct) <= 12 else [*distinct[:6], "…", *distinct[-5:]]
    if opts.reward_key is not None:
        return {
            "source": opts.reward_key,
            "threshold": opts.reward_threshold,
            "score_values": shown,
        }
    if opts.reward_threshold is not None:
        return {"source": "score", "threshold": opts.reward_threshold, "score_values": shown}
    if all(v in (0.0, 1.0) for v in distinct):
        return {"source": "score", "threshold": None, "score_values": shown}
    known = [k for k in KNOWN_REWARD_KEYS if k in keys]
    hint = (
        f"--reward-key {known[0]} (this dump has `{known[0]}`, a 0/1 correctness)"
        if known
        else "--reward-key KEY (a 0/1/true/false reward extra of the dump)"
    )
    raise ScoreRuleError(
        "scores are not only 0 and 1 (values seen: "
        + ", ".join(f"{v:g}" if isinstance(v, float) else str(v) for v in shown)
        + f"); choose the rule: {hint}, or --reward-threshold T (R = 1 when score > T,"
        " e.g. 0 for a ±1 scorer, 0.5 for 0.1 partial credit)"
    )


def pointless_threshold(values: list[Any], opts: VerlOptions) -> str | None:
    """Why ``--reward-threshold`` cannot apply to the 0/1 values of ``--reward-key``, or
    None: a threshold outside [0, 1) gives every sample one outcome (``R = acc > 1`` is 0
    for all), which is not what a user who names a 0/1 key means."""
    thr = opts.reward_threshold
    if thr is None or opts.reward_key is None or not values:
        return None
    if not all(v in (0.0, 1.0) for v in values) or 0.0 <= thr < 1.0:
        return None
    what = f"`{opts.reward_key}`"
    return (
        f"{what} are 0/1, so --reward-threshold {thr:g} (R = 1 when the value > {thr:g}) "
        "would give every sample the same reward; drop --reward-threshold (a 0/1 value is "
        "the reward) or give a threshold in [0, 1)"
    )


def _gold(v: Any) -> str | None:
    """verl's ``gts`` as text: a string as it is, a number as its text, a list or a dict
    (several accepted answers, a structured target) as JSON; ``None`` when absent."""
    if v is None or (isinstance(v, str) and not v.strip()):
        return None
    if isinstance(v, str):
        return v
    if isinstance(v, int | float) and not isinstance(v, bool):
        return str(v)
    return json.dumps(v, ensure_ascii=False, sort_keys=True, default=str)


def _id_value(v: Any) -> str | None:
    if isinstance(v, str) and v.strip():
        return v
    if isinstance(v, int) and not isinstance(v, bool):
        return str(v)
    return None


def _json_lines_or_refusal(path: Path) -> Generator[tuple[int, Any], None, None]:
    """The step file's JSON lines (each a value or its line's ``InputError``); a file that
    is not a readable regular file or not UTF-8 is one validation error."""
    try:
        yield from iter_json_lines(path)
    except InputError as exc:
        raise input_refusal(exc, str(path)) from None


def read_verl_file(path: Path, opts: VerlOptions, *, max_errors: int = MAX_ERRORS) -> RecordBatch:
    """One step file → validated records; ``RecordValidationError`` names every bad
    line as ``FILE:line N: KEY: message`` (KEY is verl's key, e.g. ``score``)."""
    source = str(path)
    m = STEP_FILE.match(path.name)
    file_step = int(m.group(1)) if m else None
    regex = compile_question_regex(opts.question_regex) if opts.question_regex else None
    errors: list[RecordError] = []

    def err(loc: str, key: str | None, msg: str) -> None:
        if len(errors) < max_errors:
            errors.append(RecordError(source, loc, key, msg))

    rows: list[dict[str, Any]] = []
    locs: list[str] = []
    scores: list[float] = []  # per row, for the score rule
    key_values: list[Any] = []  # per row, the --reward-key value
    keys_seen: set[str] = set()
    n_answer = 0
    n_stripped = 0
    n_empty = 0
    group_size: dict[tuple[int, str], int] = defaultdict(int)
    with closing(_json_lines_or_refusal(path)) as lines:  # the file closes on a break
        for lineno, obj in lines:
            if len(errors) >= max_errors:
                break
            loc = f"line {lineno}"
            if isinstance(obj, InputError):
                err(loc, None, obj.message)
                continue
            if not isinstance(obj, dict):
                err(loc, None, f"expected a JSON object, got {type(obj).__name__}")
                continue
            bad = len(errors)
            keys_seen.update(obj)
            prompt = obj.get("input")
            if not isinstance(prompt, str) or not prompt.strip():
                err(loc, "input", "missing" if prompt is None else "must be a non-empty string")
            output = obj.get("output")
            if not isinstance(output, str):
                err(loc, "output", "missing" if output is None else "must be a string")
            score = _score(obj.get("score"))
            if score is None:
                raw = obj.get("score")
                err(loc, "score", "missing" if raw is None else f"must be a number, got {raw!r}")
            step = obj.get("step", file_step)
            if isinstance(step, float) and step.is_integer():
                step = int(step)
            if not isinstance(step, int) or isinstance(step, bool) or step < 0:
                err(loc, "step", f"must be an integer >= 0, got {step!r}")
            elif file_step is not None and step != file_step:
                err(loc, "step", f"is {step} but the file name says step {file_step}")
            question: str | None = None
            if isinstance(prompt, str) and prompt.strip():
                try:
                    question = extract_question(prompt, template=opts.chat_template, regex=regex)
                except QuestionRegexTimeout as exc:
                    err(loc, "input", str(exc))
                    break  # every other line would take as long: one refusal is enough
                if question is None:
                    how = (
                        "does not match --question-regex"
                        if regex is not None
                        else f"is not a {opts.chat_template} chat-templated prompt"
                    )
                    err(loc, "input", how)
            if opts.question_key is not None:
                qid = _id_value(obj.get(opts.question_key))
                if qid is None:
                    raw = obj.get(opts.question_key)
                    err(
                        loc,
                        opts.question_key,
                        "missing (--question-key)"
                        if raw is None
                        else f"must be a non-empty string or an integer, got {raw!r}",
                    )
            else:
                qid = question_id_for(question) if question else None
            record: dict[str, Any] = {}
            extras = {k: v for k, v in obj.items() if k not in DUMP_BASE_KEYS}
            if extras:
                record["reward_extras"] = json.dumps(
                    extras, ensure_ascii=False, sort_keys=True, default=str
                )
            gold = _gold(obj.get("gts"))
            if gold is not None:
                record["ground_truth"] = gold
            if opts.reward_key is not None:
                kv = obj.get(opts.reward_key)
                ok = _binary(kv) is not None or (
                    opts.reward_threshold is not None and _score(kv) is not None
                )
                if not ok:
                    err(
                        loc,
                        opts.reward_key,
                        "missing (--reward-key)"
                        if kv is None
                        else f"must be 0, 1, true or false (or a number with --reward-threshold),"
                        f" got {kv!r}",
                    )
            if opts.answer_key is not None:
                ans = obj.get(opts.answer_key)
                n_answer += opts.answer_key in obj
                if ans is None or isinstance(ans, str):
                    record["answer"] = ans
                elif isinstance(ans, int | float) and not isinstance(ans, bool):
                    record["answer"] = str(ans)
                else:
                    err(loc, opts.answer_key, f"must be a string or a number, got {ans!r}")
            if opts.validity_key is not None:
                val = obj.get(opts.validity_key)
                if val is None or (isinstance(val, int | float) and val in (0, 1)):
                    record["validity"] = None if val is None else int(val)
                else:
                    err(loc, opts.validity_key, f"must be 0, 1, true, false or null, got {val!r}")
            if len(errors) > bad or qid is None or not isinstance(step, int):
                continue
            seed = group_size[(step, qid)]
            group_size[(step, qid)] += 1
            if isinstance(output, str) and not output.strip():
                if opts.skip_empty_output:
                    n_empty += 1
                    continue  # its seed stays used: the others keep their sampling index
                err(
                    loc,
                    "output",
                    "empty completion (pass --skip-empty-output to leave such samples out)",
                )
                continue
            if is_multi_turn(obj, output):  # type: ignore[arg-type]  # output is checked above (a missing or empty one is skipped)
                if opts.multi_turn == "refuse":
                    err(
                        loc,
                        "output",
                        f"a multi-turn transcript (num_turns={obj.get('num_turns')!r}): choose "
                        "--multi-turn transcript (every turn kept and shown as turns) or "
                        "last-turn (the final assistant turn only)",
                    )
                    continue
                if opts.multi_turn == "last-turn":
                    final = last_turn(output)  # type: ignore[arg-type]  # output is checked above (a missing or empty one is skipped)
                    if final is None:
                        err(
                            loc,
                            "output",
                            "--multi-turn last-turn: the transcript has no final assistant "
                            "turn after a turn header (an `assistant` line) to keep",
                        )
                        continue
                    output = final
                else:
                    record["turns"] = turns_json(split_transcript(output))  # type: ignore[arg-type]  # output is checked above (a missing or empty one is skipped)
            text, n_tok = strip_special(output)  # type: ignore[arg-type]  # output is checked above (a missing or empty one is skipped)
            n_stripped += n_tok
            if not text.strip():
                err(loc, "output", "only special tokens")
                continue
            scores.append(score)  # type: ignore[arg-type]  # not checked by hand yet: a row without a score is expected to be refused above
            key_values.append(obj.get(opts.reward_key) if opts.reward_key else None)
            record.update(
                trajectory_id=_trajectory_id(
                    opts.run, opts.model, step, qid, seed, opts.train_seed
                ),
                question_id=qid,
                text=text,
                reward=0,  # set by the score rule below
                run=opts.run,
                model=opts.model,
                step=step,
                seed=seed,
                train_seed=opts.train_seed,
                question=question,
            )
            rows.append(record)
            locs.append(loc)
    answer_absent = None  # the import decides over all its files (one file: an error)
    if opts.answer_key is not None and rows and n_answer == 0:
        answer_absent = RecordError(
            source,
            "file",
            opts.answer_key,
            f"--answer-key {opts.answer_key!r} is in no line of this file (keys: "
            + ", ".join(sorted(keys_seen))
            + ")"
            + (
                "; a reward function that returns a bare score (verl's GRPO examples) "
                "writes no reward extras: leave --answer-key out"
                if not keys_seen - DUMP_BASE_KEYS
                else ""
            ),
        )
    rule: dict[str, Any] | None = None
    if not errors and rows:
        try:
            rule = score_rule(scores, keys_seen, opts)
        except ScoreRuleError as exc:
            err("file", "score", str(exc))
        threshold_error = pointless_threshold([_score(kv) for kv in key_values], opts)
        if threshold_error:
            err("file", opts.reward_key, threshold_error)
    if errors:
        raise RecordValidationError(errors, truncated=len(errors) >= max_errors)
    for row, sc, kv in zip(rows, scores, key_values, strict=True):
        if opts.reward_key is not None and opts.reward_threshold is not None:
            # the recorded rule ("R = KEY > T") is the rule applied, to 0/1 values too
            row["reward"] = int(_score(kv) > opts.reward_threshold)  # type: ignore[operator]
        elif opts.reward_key is not None:
            row["reward"] = _binary(kv)
        elif opts.reward_threshold is not None:
            row["reward"] = int(sc > opts.reward_threshold)
        else:
            row["reward"] = int(sc)
    labels = {
        "text": source_label("output", "text"),
        "question": source_label("input", "question"),
        "ground_truth": source_label("gts", "ground_truth"),
        "turns": source_label("output", "turns"),
        "reward": source_label(opts.reward_key or "score", "reward"),
        "question_id": source_label(opts.question_key or "input", "question_id"),
        "answer": source_label(opts.answer_key or "answer", "answer"),
        "validity": source_label(opts.validity_key or "validity", "validity"),
        "run": "--run",
        "model": "--model",
        "train_seed": "--train-seed",
    }
    try:
        batch = records_from_rows(source, rows, locs, max_errors=max_errors)
    except RecordValidationError as exc:
        raise relabel(exc, labels) from None
    batch.extra["score_rule"] = rule
    batch.extra["n_special_stripped"] = n_stripped
    batch.extra["n_answer_missing"] = (
        sum(r.get("answer") is None for r in rows) if opts.answer_key else 0
    )
    batch.extra["answer_key_absent"] = answer_absent
    batch.extra["n_empty_skipped"] = n_empty
    return batch
