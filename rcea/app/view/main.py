"""Entry script of the Streamlit view (``rcea view``): the login (``rcea/app/view/auth.py``;
nothing is read from the store before it), page navigation and the sidebar (study,
interactive report settings, who is logged in). Each page is its own script in this
folder, served at ``/<url_path>`` (the Overview also at ``/``).

Script arguments (after ``--``, as ``rcea view`` passes them): ``--n-boot N`` sets the
default bootstrap size of the interactive report pages.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import streamlit as st

from rcea.app.view import auth
from rcea.app.view.data import overview as data
from rcea.app.view.state import DEFAULT_N_BOOT

HERE = Path(__file__).resolve().parent
PAGES = (
    ("overview.py", "Overview", "overview"),
    ("entropy.py", "Entropy", "entropy"),
    ("modes.py", "Modes", "modes"),
    ("covariance.py", "Covariance", "covariance"),
    ("seeds.py", "Seeds", "seeds"),
    ("training.py", "Training", "training"),
    ("audit.py", "Audit", "audit"),
)


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rcea view", add_help=False)
    n_boot = os.environ.get("RCEA_VIEW_N_BOOT", "")
    default = int(n_boot) if n_boot.isdigit() else DEFAULT_N_BOOT
    parser.add_argument("--n-boot", type=int, default=default)
    args, _ = parser.parse_known_args(sys.argv[1:])
    return args


st.set_page_config(page_title="RCEA Audit", layout="wide")
researcher = auth.require_researcher()  # stops the run here until someone logs in
nav = st.navigation(
    [
        st.Page(HERE / file, title=title, url_path=path, default=i == 0)
        for i, (file, title, path) in enumerate(PAGES)
    ]
)
studies = data.studies_frame()["study"].tolist()
# Widget defaults go through Session State (a test or a link may preset them).
for key, default in (("n_boot", _args().n_boot), ("seed", 0), ("k_min", 8)):
    st.session_state.setdefault(key, default)
with st.sidebar:
    if studies:
        st.selectbox("Study", studies, key="study")
    with st.expander("Report settings"):
        st.number_input(
            "bootstrap resamples",
            min_value=100,
            max_value=10_000,
            step=100,
            key="n_boot",
            help="B for the CIs on the Entropy and Modes pages (the published report "
            "uses 10,000; smaller is faster)",
        )
        st.number_input("seed", min_value=0, step=1, key="seed")
        st.number_input("K_min", min_value=1, step=1, key="k_min")
    auth.logout_button(researcher)
nav.run()
