"""The toy reasoning domain: three-number arithmetic with two genuinely different strategies.

Question kinds (a, b, c are digits 1..6):

* ``sum_times``     ``(a+b)*c``   strategies ``add_first`` (a+b, then *c) and ``distribute``
  (a*c, b*c, then add);
* ``diff_products`` ``a*b-a*c``   (b > c) strategies ``direct`` (both products, subtract) and
  ``factor`` (b-c, then a*);
* ``sum_products``  ``a*b+a*c``   strategies ``direct`` and ``factor`` (b+c, then a*).

A trajectory is a short list of steps ``x op y=z`` (one per line) ending in ``\\boxed{N}``.
Realisation variants inside a strategy (they never change the mode): operand order
(``commute``), the order of two independent steps (``reorder``), and spacing (``spaced``).

Oracles are deterministic: :func:`verify` (R), :func:`process_valid` (V) and
:func:`strategy` (the mode Z, invariant to the realisation variants).
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

KINDS: tuple[str, ...] = ("sum_times", "diff_products", "sum_products")
KIND_CODES: dict[str, str] = {"sum_times": "st", "diff_products": "dp", "sum_products": "sp"}
STRATEGIES: dict[str, tuple[str, str]] = {
    "sum_times": ("add_first", "distribute"),
    "diff_products": ("direct", "factor"),
    "sum_products": ("direct", "factor"),
}
UNKNOWN = "unknown"
SPLITS: tuple[str, ...] = ("train", "probe", "eval")
DIGITS = range(1, 7)
ERROR_KINDS: tuple[str, ...] = ("arith", "slip", "operand", "boxed")

_STEP_RE = re.compile(r"^\s*(-?\d+)\s*([+\-*])\s*(-?\d+)\s*=\s*(-?\d+)\s*$")
_BOXED_RE = re.compile(r"\\boxed\{([^{}]*)\}")


@dataclass(frozen=True)
class Question:
    """One toy question; ``question_id`` encodes it (``st-3-4-5``)."""

    kind: str
    a: int
    b: int
    c: int

    @property
    def question_id(self) -> str:
        return f"{KIND_CODES[self.kind]}-{self.a}-{self.b}-{self.c}"

    @property
    def expression(self) -> str:
        a, b, c = self.a, self.b, self.c
        if self.kind == "sum_times":
            return f"({a}+{b})*{c}"
        if self.kind == "diff_products":
            return f"{a}*{b}-{a}*{c}"
        return f"{a}*{b}+{a}*{c}"

    @property
    def prompt(self) -> str:
        """The text the policy is conditioned on (the completion follows it directly)."""
        return f"{self.expression}\n"

    @property
    def numbers(self) -> tuple[int, int, int]:
        return (self.a, self.b, self.c)

    @property
    def strategies(self) -> tuple[str, str]:
        return STRATEGIES[self.kind]


@dataclass(frozen=True)
class Variant:
    """A realisation variant: never changes the strategy (mode)."""

    commute: bool = False
    reorder: bool = False
    spaced: bool = False


VARIANTS: tuple[Variant, ...] = tuple(
    Variant(commute=bool(i & 1), reorder=bool(i & 2), spaced=bool(i & 4)) for i in range(8)
)


@dataclass(frozen=True)
class StepError:
    """An injected error.

    * ``arith``: step ``step`` writes ``true + delta`` and later steps use it (R=0, V=0);
    * ``slip``: step ``step`` (not the last) writes ``true + delta`` but later steps use the
      true value, so the final answer is right (R=1, V=0);
    * ``operand``: the first operand of step 0 is replaced by ``operand + delta`` and the
      computation proceeds consistently (R=0 unless it cancels, V=0);
    * ``boxed``: the boxed answer is ``true + delta`` although every step is right (R=0, V=0).
    """

    kind: str
    step: int = 0
    delta: int = 1

    def __post_init__(self) -> None:
        if self.kind not in ERROR_KINDS:
            raise ValueError(f"unknown error kind {self.kind!r} (choose from {ERROR_KINDS})")
        if self.delta == 0:
            raise ValueError("an injected error needs a non-zero delta")


# --------------------------------------------------------------------------- questions


def true_answer(question: Question) -> int:
    a, b, c = question.numbers
    if question.kind == "sum_times":
        return (a + b) * c
    if question.kind == "diff_products":
        return a * b - a * c
    return a * b + a * c


def _split_of(qid: str) -> str:
    h = int(hashlib.sha256(qid.encode()).hexdigest()[:8], 16) % 10
    return "eval" if h == 0 else "probe" if h == 1 else "train"


@lru_cache(maxsize=1)
def all_questions() -> tuple[Question, ...]:
    out = []
    for kind in KINDS:
        for a in DIGITS:
            for b in DIGITS:
                for c in DIGITS:
                    if kind == "diff_products" and b <= c:
                        continue
                    out.append(Question(kind, a, b, c))
    return tuple(out)


def question_pool(split: str) -> tuple[Question, ...]:
    """Every question of a split; splits are disjoint (a stable hash of the question id)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r} (choose from {', '.join(SPLITS)})")
    return tuple(q for q in all_questions() if _split_of(q.question_id) == split)


def generate_questions(split: str, n: int | None = None, seed: int = 0) -> list[Question]:
    """``n`` distinct questions of ``split`` drawn with ``seed`` (all when ``n`` is None)."""
    pool = list(question_pool(split))
    if n is None:
        n = len(pool)
    if not 0 < n <= len(pool):
        raise ValueError(f"split {split!r} has {len(pool)} questions; asked for n={n}")
    return random.Random(f"{split}:{seed}").sample(pool, n)


def question_from_id(question_id: str) -> Question:
    """Inverse of :attr:`Question.question_id`."""
    codes = {v: k for k, v in KIND_CODES.items()}
    parts = question_id.split("-")
    if len(parts) != 4 or parts[0] not in codes or not all(p.isdigit() for p in parts[1:]):
        raise ValueError(f"not a toy question id: {question_id!r}")
    return Question(codes[parts[0]], int(parts[1]), int(parts[2]), int(parts[3]))


# --------------------------------------------------------------------------- rendering

Step = tuple[int, str, int, int]
# An operand is a question number (int) or a reference to an earlier step's result (("s", i)).
Ref = int | tuple[str, int]


def _plan(question: Question, strategy: str, variant: Variant) -> list[tuple[Ref, str, Ref]]:
    """The steps of ``strategy`` under ``variant`` as operand references."""
    a, b, c = question.numbers
    kind = question.kind
    if strategy not in question.strategies:
        raise ValueError(
            f"strategy {strategy!r} does not apply to {kind} (choose from {question.strategies})"
        )
    if kind == "sum_times" and strategy == "add_first":
        plan: list[tuple[Ref, str, Ref]] = [(a, "+", b), (("s", 0), "*", c)]
    elif kind == "sum_times":
        plan = [(a, "*", c), (b, "*", c), (("s", 0), "+", ("s", 1))]
    elif strategy == "direct":
        op = "-" if kind == "diff_products" else "+"
        plan = [(a, "*", b), (a, "*", c), (("s", 0), op, ("s", 1))]
    else:
        op = "-" if kind == "diff_products" else "+"
        plan = [(b, op, c), (("s", 0), "*", a)]
    if variant.reorder and len(plan) == 3:
        # swap the two independent products; the combining step keeps its meaning
        # (a*b - a*c stays a*b - a*c: it now refers to step 1 minus step 0)
        _, op, _ = plan[2]
        plan = [plan[1], plan[0], (("s", 1), op, ("s", 0))]
    if variant.commute:
        plan = [(y, op, x) if op in "+*" else (x, op, y) for x, op, y in plan]
    return plan


def _steps(plan: list[tuple[Ref, str, Ref]], error: StepError | None) -> tuple[list[Step], int]:
    """Evaluate a plan, injecting ``error``; returns the written steps and the boxed value."""
    n = len(plan)
    if error is not None and error.kind in ("arith", "slip"):
        if not 0 <= error.step < n:
            raise ValueError(f"error step {error.step} out of range for {n} steps")
        if error.kind == "slip" and error.step == n - 1:
            raise ValueError("a slip must not be on the last step (the final answer stays right)")
    true_vals: list[int] = []
    used_vals: list[int] = []  # the value later steps consume
    out: list[Step] = []
    for k, (xr, op, yr) in enumerate(plan):
        x = used_vals[xr[1]] if isinstance(xr, tuple) else xr
        y = used_vals[yr[1]] if isinstance(yr, tuple) else yr
        if error is not None and error.kind == "operand" and k == 0:
            x = x + error.delta
        z = _eval(x, op, y)
        written = z
        if error is not None and error.kind in ("arith", "slip") and k == error.step:
            written = z + error.delta
        out.append((x, op, y, written))
        true_vals.append(z)
        used_vals.append(z if (error is not None and error.kind == "slip") else written)
    boxed = out[-1][3]
    if error is not None and error.kind == "boxed":
        boxed += error.delta
    return out, boxed


def _eval(x: int, op: str, y: int) -> int:
    return x + y if op == "+" else x - y if op == "-" else x * y


def render_trajectory(
    question: Question,
    strategy: str,
    variant: Variant | None = None,
    error: StepError | None = None,
) -> str:
    """The completion text: one step per line, then ``\\boxed{N}`` (no trailing newline)."""
    steps, boxed = _steps(_plan(question, strategy, variant or Variant()), error)
    spaced = bool(variant and variant.spaced)
    fmt = "{} {} {} = {}" if spaced else "{}{}{}={}"
    lines = [fmt.format(*s) for s in steps]
    lines.append(f"\\boxed{{{boxed}}}")
    return "\n".join(lines)


# --------------------------------------------------------------------------- oracles


def extract_answer(text: str) -> str | None:
    """The content of the last ``\\boxed{...}``, stripped; None when there is none."""
    found = _BOXED_RE.findall(text)
    return found[-1].strip() if found else None


def _as_int(s: str | None) -> int | None:
    if s is None or not re.fullmatch(r"-?\d+", s.replace(" ", "")):
        return None
    return int(s.replace(" ", ""))


def verify(question: Question, text: str) -> int:
    """R: 1 iff the last boxed value is an integer equal to the true answer."""
    value = _as_int(extract_answer(text))
    return int(value is not None and value == true_answer(question))


def parse_steps(text: str) -> tuple[list[Step], list[str], str | None]:
    """(parsed steps, unparseable non-empty lines, boxed content). The boxed line is not a step."""
    steps: list[Step] = []
    bad: list[str] = []
    boxed = None
    for line in text.split("\n"):
        if not line.strip():
            continue
        if "\\boxed" in line:
            boxed = extract_answer(line)
            continue
        m = _STEP_RE.match(line)
        if m:
            steps.append((int(m.group(1)), m.group(2), int(m.group(3)), int(m.group(4))))
        else:
            bad.append(line)
    return steps, bad, boxed


def process_valid(question: Question, text: str) -> int:
    """V: 1 iff every line is a step or the final boxed line, every step is arithmetically
    true, every operand is one of the question's numbers or an earlier step's result, there
    is at least one step, the boxed line comes last, and it repeats the last step's result."""
    lines = [ln for ln in text.split("\n") if ln.strip()]
    if not lines or "\\boxed" not in lines[-1]:
        return 0
    steps, bad, boxed = parse_steps(text)
    if bad or not steps or sum("\\boxed" in ln for ln in lines) != 1:
        return 0
    available = set(question.numbers)
    for x, op, y, z in steps:
        if x not in available or y not in available or _eval(x, op, y) != z:
            return 0
        available.add(z)
    return int(_as_int(boxed) == steps[-1][3])


def strategy(question: Question, text: str) -> str:
    """Z: the strategy (mode id) of a trajectory, or ``"unknown"``.

    Decided by the structure of the operations only (which operations, how many, which one
    comes first/last), so operand order, the order of independent steps, spacing and
    arithmetic slips never change it."""
    steps, _, _ = parse_steps(text)
    ops = [op for _, op, _, _ in steps]
    count = Counter(ops)
    if question.kind == "sum_times":
        if count == Counter({"+": 1, "*": 1}) and ops[0] == "+":
            return "add_first"
        if count == Counter({"*": 2, "+": 1}) and ops[-1] == "+":
            return "distribute"
        return UNKNOWN
    op = "-" if question.kind == "diff_products" else "+"
    if count == Counter({"*": 2, op: 1}) and ops[-1] == op:
        return "direct"
    if count == Counter({op: 1, "*": 1}) and ops[0] == op:
        return "factor"
    return UNKNOWN


def strategy_by_id(question_id: str, text: str) -> str | None:
    """``strategy_fn(question_id, text)`` for the codebook oracle backend
    (``--oracle rcea.pipeline.toy:strategy_by_id``): the mode, or None when unidentifiable."""
    mode = strategy(question_from_id(question_id), text)
    return None if mode == UNKNOWN else mode


def validity_by_id(question_id: str, text: str) -> int:
    """``validity_fn(question_id, text)`` for the judge's oracle backend
    (``--oracle rcea.pipeline.toy:validity_by_id``): :func:`process_valid` of the question."""
    return process_valid(question_from_id(question_id), text)


def problem_by_id(question_id: str) -> str:
    """The problem statement shown to the judge and to annotators (the expression)."""
    return question_from_id(question_id).expression
