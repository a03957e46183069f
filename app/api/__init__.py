"""The FastAPI service (``rcea serve``)."""

from app.api.main import create_app

__all__ = ["create_app"]
