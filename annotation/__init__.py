"""Blinded human annotation in a Label Studio server that the project starts and owns.

``server``: start/stop/status of the local server; ``accounts``: annotator accounts people
can log in with; ``client``: the label-studio-sdk 2.x client.
"""

from annotation.accounts import (
    AccountError,
    Annotator,
    LoginFailed,
    create_annotator,
    find_user,
    login_session,
    set_password,
)
from annotation.client import (
    LabelStudioUnavailable,
    client_from_settings,
    is_healthy,
    make_client,
    wait_healthy,
)
from annotation.server import (
    Credentials,
    LabelStudioError,
    LabelStudioServer,
    ServerStatus,
    admin_credentials,
    server_from_settings,
)

__all__ = [
    "AccountError",
    "Annotator",
    "Credentials",
    "LabelStudioError",
    "LabelStudioServer",
    "LabelStudioUnavailable",
    "LoginFailed",
    "ServerStatus",
    "admin_credentials",
    "client_from_settings",
    "create_annotator",
    "find_user",
    "is_healthy",
    "login_session",
    "make_client",
    "server_from_settings",
    "set_password",
    "wait_healthy",
]
