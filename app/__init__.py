"""RCEA Audit application shell: settings, store, CLI, service, view."""

__version__ = "0.1.0"
