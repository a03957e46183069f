"""The study's probe set: the first probe of a study records which questions and which
probe-set seed it uses (event ``probe.probe_set``); every later probe must use the same
seed, so that checkpoints of one study are compared on the same questions."""

from __future__ import annotations

from sqlmodel import Session

from rcea.study import events
from rcea.study.store import append_event, get_or_create_study, list_events

PROBE_SET_EVENT = events.PROBE_SET


class ProbeSetMismatch(ValueError):
    """A probe asked for another probe-set seed than the one the study is bound to."""


def bind_probe_set(
    session: Session, *, study: str, probe_seed: int, question_source: str, actor: str
) -> bool:
    """Bind ``study`` to this probe set on first use (returns True), or check that it is
    already bound to the same seed (returns False). Raises :class:`ProbeSetMismatch`
    naming both seeds when another seed was bound."""
    st = get_or_create_study(session, name=study)
    events = list_events(session, kind=PROBE_SET_EVENT, study_id=st.id)
    if events:
        bound = events[0].payload
        if bound.get("probe_seed") != probe_seed:
            raise ProbeSetMismatch(
                f"study {study!r} was probed with probe-set seed {bound.get('probe_seed')}; "
                f"refusing to mix in records of seed {probe_seed}"
            )
        return False
    append_event(
        session,
        actor=actor,
        kind=PROBE_SET_EVENT,
        study_id=st.id,
        payload={"probe_seed": probe_seed, "question_source": question_source},
    )
    return True
