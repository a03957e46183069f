"""Measurements: named results that producers record for reports and the view.

A measurement is keyed by (study, kind, run, model, train_seed, step, key). Recording the same key
again replaces its payload, so resumed producers never duplicate rows. ``step = -1``
means "not step-specific" (e.g. a whole training curve); ``train_seed = -1`` means "no
training seed" (a run of one unnamed seed; docs/estimators.md item 17).

Kinds (the contract between producers and readers; payload keys listed):

``training_curve``      run = objective; payload ``points``: list of dicts with at least
                        ``step``, ``progress`` (step / max_steps) and, when logged,
                        ``entropy``, ``reward``, ``loss``, ``completions/mean_length``.
``greedy_accuracy``     run, model, step; key = benchmark; payload ``accuracy``, ``n``.
``accuracy_trace``      run, model; key = benchmark; payload ``points``: list of dicts
                        ``step``, ``progress``, ``accuracy``, ``boxed_rate``,
                        ``mean_length``, ``truncated_share``.
``passk``               run, model, step; key = benchmark; payload ``n`` (samples per
                        question), ``k`` (list), ``pass_at_k`` ({k: value}), ``questions``
                        (list of {question_id, n, c}).
``covariance_transition`` run, model, step = θ′ step; payload ``from_step``, ``to_step``,
                        ``transition`` (label), ``predicted``, ``observed`` (mean ΔH over
                        positions), ``n_positions``, ``positions`` (optional list of
                        {predicted, observed}); from ``rcea probe covariance`` also
                        ``from_run`` (θ's run: the shared base's ``base`` at step 0) and
                        ``trajectories`` (parallel lists ``trajectory_id``,
                        ``question_id``, ``n_positions``, ``predicted_sum``,
                        ``observed_sum`` per trajectory sampled under θ) for item 16's
                        fit by mode group on the study's partition.
``tail``                run, model, step = endpoint; payload: the ``rcea.audits.tail`` report
                        as a JSON dict.
``tail_trajectories``   run, model, step = endpoint; payload ``quantile`` and parallel
                        lists ``trajectory_id``, ``question_id``, ``reward``, ``n_tokens``,
                        ``positive_mass``, ``tail_positive_mass``, ``tail_tokens``
                        (optional: ``failure_tail_positive_mass``): item 7's
                        tokens reduced per trajectory (``rcea.audits.mode_tail.trajectory_sums``)
                        for item 16 on the study's mode partition and item 17's tail shares.
``rarefaction_draws``   run, model, step = checkpoint; key = partition hash; written by
                        ``rcea report publish``: the bundle's ``rarefaction.json`` entry
                        (base, settings, per-question labels and stored draws).
"""

from __future__ import annotations

from typing import Any

from sqlmodel import Session, select

from rcea.study.store.models import Measurement

KINDS: tuple[str, ...] = (
    "training_curve",
    "greedy_accuracy",
    "accuracy_trace",
    "passk",
    "covariance_transition",
    "tail",
    "tail_trajectories",
    "rarefaction_draws",
)


def record_measurement(
    session: Session,
    *,
    study_id: int,
    kind: str,
    payload: dict[str, Any],
    run: str = "",
    model: str = "",
    step: int = -1,
    key: str = "",
    source: str = "",
    train_seed: int | None = None,
) -> Measurement:
    """Insert or replace one measurement (same study/kind/run/model/train seed/step/key);
    ``train_seed`` None is stored as -1 (no training seed)."""
    seed_key = -1 if train_seed is None else train_seed
    if kind not in KINDS:
        raise ValueError(f"unknown measurement kind {kind!r}; expected one of {KINDS}")
    row = session.exec(
        select(Measurement).where(
            Measurement.study_id == study_id,
            Measurement.kind == kind,
            Measurement.run == run,
            Measurement.model == model,
            Measurement.train_seed == seed_key,
            Measurement.step == step,
            Measurement.key == key,
        )
    ).first()
    if row is None:
        row = Measurement(
            study_id=study_id,
            kind=kind,
            run=run,
            model=model,
            train_seed=seed_key,
            step=step,
            key=key,
        )
    row.payload = payload
    row.source = source
    session.add(row)
    session.flush()
    return row


def list_measurements(
    session: Session,
    *,
    study_id: int,
    kind: str | None = None,
    run: str | None = None,
) -> list[Measurement]:
    """Measurements of a study, ordered by kind, run, model, step, key."""
    stmt = select(Measurement).where(Measurement.study_id == study_id)
    if kind is not None:
        stmt = stmt.where(Measurement.kind == kind)
    if run is not None:
        stmt = stmt.where(Measurement.run == run)
    stmt = stmt.order_by(
        Measurement.kind,
        Measurement.run,
        Measurement.model,
        Measurement.train_seed,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        Measurement.step,  # type: ignore[arg-type]  # SQLModel types a column attribute as its Python value, not as the SQL column
        Measurement.key,
    )
    return list(session.exec(stmt).all())
