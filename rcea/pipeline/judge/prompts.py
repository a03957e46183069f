"""The validity-judge prompt template: versioned, content-hashed, frozen with the judge.

A template has a ``name``, an integer ``version`` (bump it whenever the text changes), a
system text and a user text. The user text must contain ``$problem`` and ``$solution``
(``string.Template`` fields); nothing else is substituted. The system text starts with
``Task: judge.validity`` (the line OpenAI-compatible test servers route on).

``content_hash()`` = SHA-256 of the canonical JSON of ``{name, version, system, user}``:
any change of the text changes the hash, so a frozen judge (model + template + decoding)
can never silently run another prompt.

Rendered prompts hold only the problem statement and the solution text — never run,
model, step, seed, trajectory or question ids, or an automatic verdict; the caller scans
every rendered prompt before it is sent (``rcea.study.validity_audit``).

Template files are TOML::

    [template]
    name = "validity"
    version = 2
    system = "Task: judge.validity\\n..."
    user = "Problem:\\n$problem\\n\\nSolution:\\n$solution\\n..."
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from string import Template
from typing import Any

from rcea.audits.inputs import load_toml
from rcea.pipeline.llm import Messages

__all__ = ["DEFAULT_TEMPLATE", "JudgeTemplate", "load_template", "template_from_dict"]

_FIELDS = ("problem", "solution")


@dataclass(frozen=True)
class JudgeTemplate:
    name: str
    version: int
    system: str
    user: str

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError("[template] name must be a non-empty string")
        if isinstance(self.version, bool) or not isinstance(self.version, int) or self.version < 1:
            raise ValueError(f"[template] version must be an integer >= 1, got {self.version!r}")
        for key in ("system", "user"):
            if not isinstance(getattr(self, key), str) or not getattr(self, key).strip():
                raise ValueError(f"[template] {key} must be a non-empty string")
        matches = list(Template.pattern.finditer(self.user))
        for m in matches:
            if m.group("invalid") is not None:  # substitute() would fail at judge time
                at = m.start()  # the `$` itself (the group is the empty text after it)
                line = self.user.count("\n", 0, at) + 1
                column = at - (self.user.rfind("\n", 0, at) + 1) + 1
                raise ValueError(
                    f"[template] user: a bare `$` at line {line}, column {column} is not a "
                    "placeholder; write `$$` for a dollar sign, or $problem / $solution"
                )
        names = {
            m.group("named") or m.group("braced")
            for m in matches
            if m.group("named") or m.group("braced")
        }
        missing = [f for f in _FIELDS if f not in names]
        unknown = sorted(names - set(_FIELDS))
        if missing or unknown:
            raise ValueError(
                "[template] user must use exactly $problem and $solution"
                + (f"; missing: {', '.join('$' + m for m in missing)}" if missing else "")
                + (f"; unknown: {', '.join('$' + u for u in unknown)}" if unknown else "")
            )

    @property
    def id(self) -> str:
        return f"{self.name}/v{self.version}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def content_hash(self) -> str:
        text = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def render(self, *, problem: str, solution: str) -> Messages:
        return [
            {"role": "system", "content": self.system},
            {
                "role": "user",
                "content": Template(self.user).substitute(problem=problem, solution=solution),
            },
        ]


DEFAULT_TEMPLATE = JudgeTemplate(
    name="validity",
    version=1,
    system="""Task: judge.validity
You check the reasoning of ONE solution to a math problem. Its final answer is already
known to be correct. Decide whether the solution is process-valid: every step follows
from the problem and the earlier steps, and nothing in it is false. A solution is
INVALID when it contains a fatal reasoning error: a false step or calculation (even one
whose result is not used later), a number that comes from nowhere, or a final answer
that does not follow from the steps shown. Style, brevity and notation never matter.
Reply with one JSON object only:
{"verdict": "valid" | "invalid", "rationale": "<one short sentence>",
 "error_location": "<the first wrong step, or empty>"}""",
    user="""<problem>
$problem
</problem>
<solution>
$solution
</solution>""",
)


def template_from_dict(data: dict[str, Any], *, source: str = "<template>") -> JudgeTemplate:
    body = data.get("template") if isinstance(data, dict) else None
    if not isinstance(body, dict):
        raise ValueError(f"{source}: missing table [template] (name, version, system, user)")
    extra = sorted(set(data) - {"template"}) + sorted(
        set(body) - {"name", "version", "system", "user"}
    )
    if extra:
        raise ValueError(f"{source}: unknown key(s) {', '.join(extra)}")
    try:
        return JudgeTemplate(
            name=body.get("name"),  # type: ignore[arg-type]  # a missing key is refused by JudgeTemplate's own checks (the except below names it)
            version=body.get("version"),  # type: ignore[arg-type]  # a missing key is refused by JudgeTemplate's own checks (the except below names it)
            system=body.get("system"),  # type: ignore[arg-type]  # a missing key is refused by JudgeTemplate's own checks (the except below names it)
            user=body.get("user"),  # type: ignore[arg-type]  # a missing key is refused by JudgeTemplate's own checks (the except below names it)
        )
    except ValueError as exc:
        raise ValueError(f"{source}: {exc}") from exc


def load_template(path: str | Path) -> JudgeTemplate:
    """Read and validate a template TOML file (errors name the file)."""
    p = Path(path)
    try:
        data = load_toml(p)  # a regular UTF-8 file, bounded depth (InputError names it)
    except OSError as exc:
        raise ValueError(f"cannot read template {p}: {exc}") from exc
    return template_from_dict(data, source=str(p))
