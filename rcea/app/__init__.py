"""RCEA Audit's shell: the CLI, the REST API, the Streamlit view and the demo, each a thin
layer over the domain in ``study``."""
