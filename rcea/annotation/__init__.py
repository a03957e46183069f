"""Blinded human annotation on Label Studio servers that the project starts and owns,
one per person.

``people``: the person → server registry; ``server``: start/stop/status of one server;
``accounts``: accounts people can log in with; ``client``: the label-studio-sdk 2.x client;
``notifications``: webhook bodies read as notifications only.
"""

from rcea.annotation.accounts import (
    AccountError,
    Annotator,
    LoginFailed,
    create_annotator,
    find_user,
    login_session,
    set_password,
)
from rcea.annotation.client import (
    LabelStudioUnavailable,
    is_healthy,
    make_client,
    wait_healthy,
)
from rcea.annotation.people import People, PeopleError, Person, people_from_settings
from rcea.annotation.server import (
    Credentials,
    LabelStudioError,
    LabelStudioServer,
    ServerStatus,
)

__all__ = [
    "AccountError",
    "Annotator",
    "Credentials",
    "LabelStudioError",
    "LabelStudioServer",
    "LabelStudioUnavailable",
    "LoginFailed",
    "People",
    "PeopleError",
    "Person",
    "ServerStatus",
    "create_annotator",
    "find_user",
    "is_healthy",
    "login_session",
    "make_client",
    "people_from_settings",
    "set_password",
    "wait_healthy",
]
