"""The report's parameters, one typed object: what ``rcea report build`` / ``publish``,
the API's report route and the view pass to :func:`rcea.study.report.build.build_report`,
:func:`~rcea.study.report.inputs.gather_inputs` and
:func:`rcea.study.report.publish.publish_report`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from rcea.study.report.estimates import BASE_RUN


@dataclass(frozen=True)
class ReportParameters:
    """Estimator settings left ``None`` come from the ``[estimators]`` of the rubric bound
    to the pair audit the mode numbers rest on (predeclared), else from the defaults (seed
    0, n_boot 10,000, k_min 8, n_min 8, n_draws 20, confidence 0.95). ``partition`` picks
    the partition mode numbers rest on (a content-hash prefix, or ``latest``; default: the
    partition of the latest passing final gate). Retention compares each checkpoint with
    the base of the same model (``base_run`` names a model's shared base run, at
    ``base_step``). The association is computed per model on one benchmark
    (``association_benchmark``, default MATH500 when present) at ``association_k``
    (default 64 when present); ``association_pooled`` adds a labelled pooled fit."""

    seed: int | None = None
    n_boot: int | None = None
    k_min: int | None = None
    n_min: int | None = None
    n_draws: int | None = None
    confidence: float | None = None
    base_step: int = 0
    base_run: str = BASE_RUN
    partition: str | None = None
    association_k: int | None = None
    association_benchmark: str | None = None
    association_pooled: bool = False

    @classmethod
    def of(cls, params: ReportParameters | None = None, **given: Any) -> ReportParameters:
        """``params`` with the keyword values given (``None`` values of the estimator
        settings mean "from the rubric"); unknown names raise ``TypeError``."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(given) - names)
        if unknown:
            raise TypeError(f"unknown report parameter(s): {', '.join(unknown)}")
        base = asdict(params) if params is not None else {}
        return cls(**{**base, **given})

    def estimator_settings(self) -> dict[str, Any]:
        """The six estimator settings as given (``None`` = from the rubric)."""
        keys = ("seed", "n_boot", "k_min", "n_min", "n_draws", "confidence")
        return {k: getattr(self, k) for k in keys}
