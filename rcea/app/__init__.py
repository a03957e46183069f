"""RCEA Audit's shell: the CLI, the REST API, the Streamlit view and the demo, each a thin
layer over the domain in ``study``."""

from rcea.study import __version__

__all__ = ["__version__"]
