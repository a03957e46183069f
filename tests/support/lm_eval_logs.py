"""Sample logs written by lm-evaluation-harness's own ``--log_samples`` path: its
``simple_evaluate`` on a two-task YAML (a local JSON dataset, ``generate_until``,
``exact_match``) with a scripted ``LM`` subclass standing in for a model, then its
``EvaluationTracker.save_results_samples`` — so the importer is tested on exactly the
``samples_<task>_<timestamp>.jsonl`` files lm-eval writes (as the verl tests use verl's own
dump writer). ``make install`` puts lm-eval (``LM_EVAL_VERSION``, --no-deps: it pins nothing
the writer needs that the project lacks, but brings heavy optional deps) and the modules its
evaluator imports in ``.lmeval-site``; the run happens in a subprocess with that folder on
its path, so lm-eval's imports never reach the test process."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.support.helpers import service_missing

LMEVAL_SITE = Path(__file__).resolve().parents[2] / ".lmeval-site"
#: the lm-eval release whose writer (lm_eval/evaluator.py, loggers/evaluation_tracker.py)
#: these files come from; the Makefile installs the same one
LM_EVAL_VERSION = "0.4.13"

QUESTIONS = (
    ("What is 2 + 3?", "5"),
    ("What is 7 - 4?", "3"),
    ("What is 3 * 3?", "9"),
    ("What is 8 / 2?", "4"),
)

TASK_YAML = """\
task: {name}
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
test_split: test
output_type: generate_until
doc_to_text: "Q: {{{{question}}}}\\nA:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  do_sample: {sample}
repeats: {repeats}
filter_list:
  - name: strict
    filter:
      - function: regex
        regex_pattern: "(-?[0-9]+)"
      - function: take_first
  - name: none
    filter:
      - function: take_first
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
"""

RUNNER = """
import json, sys
from pathlib import Path
from lm_eval import simple_evaluate
from lm_eval.api.model import LM
from lm_eval.loggers import EvaluationTracker
from lm_eval.tasks import TaskManager

out, tasks = Path(sys.argv[1]), sys.argv[2].split(",")

class Scripted(LM):
    # answers 'A: N' with N right for even question indices, off by one for odd ones, and
    # a different wrong answer on every repeat (so repeats differ)
    def __init__(self, seed):
        super().__init__()
        self.calls, self.seed = 0, seed
    def generate_until(self, requests):
        outs = []
        for req in requests:
            ctx = req.args[0]
            q = ctx.rsplit("Q: ", 1)[1].split("\\n")[0]
            a, op, b = q.removeprefix("What is ").removesuffix("?").split()
            val = int(eval(f"{a}{op}{b}"))
            self.calls += 1
            wrong = (int(a) + self.seed + self.calls) % 2
            outs.append(f" {val + wrong} because {a} {op} {b}")
        return outs
    def loglikelihood(self, requests):
        raise NotImplementedError
    def loglikelihood_rolling(self, requests):
        raise NotImplementedError

for seed in map(int, sys.argv[3].split(",")):
    # what `lm_eval --log_samples --output_path OUT/seed-N` does after evaluating
    tracker = EvaluationTracker(output_path=str(out / f"seed-{seed}"))
    res = simple_evaluate(
        model=Scripted(seed), tasks=tasks,
        task_manager=TaskManager(include_path=str(out / "tasks")),
        log_samples=True, evaluation_tracker=tracker, random_seed=seed,
    )
    tracker.general_config_tracker.log_end_time()
    tracker.save_results_aggregated(results=res, samples=res["samples"])
    for name in res["configs"]:
        tracker.save_results_samples(task_name=name, samples=res["samples"][name])
"""


def write_lm_eval_logs(tmp: Path, *, seeds: tuple[int, ...] = (0,)) -> list[Path]:
    """Run lm-eval once per seed on two tasks (``toy_arith``: repeats 1; ``toy_arith_rep``:
    repeats 3, sampling) and return, per seed, the folder holding its ``samples_*.jsonl``
    files (lm-eval writes them under ``OUTPUT/MODEL_NAME/``)."""
    if not (LMEVAL_SITE / "lm_eval").is_dir():
        service_missing("lm-eval", f"no lm_eval in {LMEVAL_SITE}; `make install` puts it there")
    tmp.mkdir(parents=True, exist_ok=True)
    data = tmp / "toy_arith.jsonl"
    data.write_text("".join(json.dumps({"question": q, "answer": a}) + "\n" for q, a in QUESTIONS))
    (tmp / "tasks").mkdir(exist_ok=True)
    for name, repeats, sample in (("toy_arith", 1, "false"), ("toy_arith_rep", 3, "true")):
        (tmp / "tasks" / f"{name}.yaml").write_text(
            TASK_YAML.format(name=name, data=data, repeats=repeats, sample=sample)
        )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([os.environ.get("PYTHONPATH", ""), str(LMEVAL_SITE)]),
        "HF_DATASETS_OFFLINE": "1",
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_CACHE": str(tmp / "hf-cache"),
        "TOKENIZERS_PARALLELISM": "false",
    }
    subprocess.run(
        [
            sys.executable,
            "-c",
            RUNNER,
            str(tmp),
            "toy_arith,toy_arith_rep",
            ",".join(map(str, seeds)),
        ],
        check=True,
        env=env,
        capture_output=True,
        timeout=300,
    )
    return [next((tmp / f"seed-{s}").rglob("samples_toy_arith_2*.jsonl")).parent for s in seeds]
