"""The Streamlit view (``rcea view``): a researcher-facing multipage app over the store.

``main.py`` is the entry script (login, navigation, sidebar); ``auth.py`` is the login
(nothing is read before it) and ``logins.py`` the researcher accounts (scrypt hashes);
``overview.py``, ``entropy.py``, ``modes.py``, ``covariance.py`` and ``audit.py`` are the
pages; ``data/`` holds each page's reads (one module per page, asking ``rcea.study``),
``report_frames.py`` cuts ``build_report`` into frames, ``charts.py`` builds the Altair
charts and ``state.py`` holds the shared Streamlit state and cached reads."""
