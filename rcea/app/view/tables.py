"""How the view's pages show a table of numbers: full width, no index, chosen columns in
one number format."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pandas as pd
import streamlit as st


def number_table(frame: pd.DataFrame, fmt: str, columns: Iterable[str], **options: Any) -> None:
    """``frame`` full width without its index, ``columns`` shown in printf format ``fmt``
    (``options``: more of ``st.dataframe``'s, e.g. ``column_order``)."""
    st.dataframe(
        frame,
        hide_index=True,
        width="stretch",
        column_config={c: st.column_config.NumberColumn(format=fmt) for c in columns},
        **options,
    )
