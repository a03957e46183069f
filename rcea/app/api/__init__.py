"""The FastAPI service (``rcea serve``)."""

from rcea.app.api.main import create_app

__all__ = ["create_app"]
