"""Streamlit state shared by the pages: the study chosen in the sidebar, the interactive
report settings, and cached expensive reads.

Cached reads are keyed on the database URL, the study, ``data.version_stamp`` (changes
with every event, ingest or new measurement) and the report settings, and expire after
``CACHE_TTL_S`` seconds (a measurement replaced in place keeps its id).
"""

from __future__ import annotations

from typing import Any

import streamlit as st

from rcea.app.view import data
from rcea.app.view.data import audit as audit_data
from rcea.app.view.data import modes as modes_data
from rcea.app.view.data import report as report_data
from rcea.study.report.schema import StudyReport

CACHE_TTL_S = 60
DEFAULT_N_BOOT = 1000


def selected_study() -> str:
    """The study chosen in the sidebar; stops the page with a hint when there is none."""
    name = st.session_state.get("study")
    if not name:
        st.info(
            "No studies yet. Ingest records with `rcea ingest FILE --study NAME` or run "
            "`make demo`."
        )
        st.stop()
    return str(name)


def report_settings() -> dict[str, int]:
    """``n_boot``, ``seed`` and ``k_min`` as set in the sidebar."""
    return {
        "n_boot": int(st.session_state.get("n_boot", DEFAULT_N_BOOT)),
        "seed": int(st.session_state.get("seed", 0)),
        "k_min": int(st.session_state.get("k_min", 8)),
    }


@st.cache_data(ttl=CACHE_TTL_S, show_spinner="Computing the report…")
def _report(
    db: str, study: str, stamp: tuple[int, ...], n_boot: int, seed: int, k_min: int
) -> StudyReport:
    return report_data.report(study, n_boot=n_boot, seed=seed, k_min=k_min)


def report(study: str) -> StudyReport:
    """``build_report`` of the study at the sidebar's settings as the validated
    ``StudyReport``, cached. A report the store cannot support stops the page with the
    reason (not a traceback)."""
    stamp = data.version_stamp(study)
    try:
        return _report(data.database_key(), study, stamp, **report_settings())
    except ValueError as exc:
        st.error(f"The report of {study} cannot be built: {exc}")
        st.stop()
        raise  # unreachable: st.stop() ends the script run


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _audit_detail(db: str, audit: str, stamp: tuple[int, ...]) -> dict[str, Any]:
    return audit_data.audit_detail(audit)


def audit_detail(study: str, audit: str) -> dict[str, Any]:
    """``data.audit_detail``, cached on the version stamp."""
    return _audit_detail(data.database_key(), audit, data.version_stamp(study))


@st.cache_data(ttl=CACHE_TTL_S, show_spinner=False)
def _mode_distribution(db: str, study: str, stamp: tuple[int, ...], pair: dict[str, Any]) -> Any:
    return modes_data.mode_distribution(study, pair)


def mode_distribution(study: str, pair: dict[str, Any]) -> Any:
    """``data.mode_distribution``, cached on the version stamp."""
    return _mode_distribution(data.database_key(), study, data.version_stamp(study), pair)
