"""Label Studio's Django settings as rcea launches it (``DJANGO_SETTINGS_MODULE``; this
directory is on the server's ``PYTHONPATH``; it runs inside ``.venv-labelstudio``, never
imported by rcea).

Label Studio's own SSRF protection stays **on**, so an annotator cannot make the server
fetch a URL for them (``POST /api/projects/{id}/import`` with ``url=…``, cloud storages,
ML backends, exports): loopback and private addresses are refused. The one exception is
the webhook to rcea's receiver (:mod:`rcea_labelstudio_apps`): a webhook whose URL path
starts with :data:`WEBHOOK_PATH` is created and delivered even on loopback.

Behind rcea's front door (``rcea/annotation/frontdoor.py``, docs/team.md) the browser's
origin is ``https://<public name>:<port>``; the door sends ``Host: <name>:<port>`` and
``X-Forwarded-Proto: https``, which :data:`SECURE_PROXY_SSL_HEADER` trusts, so Django's CSRF
origin check accepts the login form under any public name without a list of trusted
origins. The server listens on loopback only: nobody but a local process can send that
header, and one that does gains nothing it could not do over plain HTTP.
"""

import os

# base first: Label Studio's settings read django.conf.settings while they load, which
# then sees this partly loaded module (as it would see Label Studio's own)
from label_studio.core.settings.base import *  # noqa: F403, I001
from label_studio.core.settings.label_studio import *  # noqa: F403

SSRF_PROTECTION_ENABLED = True
SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
USE_DEFAULT_BANNED_SUBNETS = True
ML_BLOCK_LOCAL_IP = True
WEBHOOK_PATH = os.environ.get("RCEA_WEBHOOK_PATH", "/webhooks/label-studio/")
INSTALLED_APPS = [*INSTALLED_APPS, "rcea_labelstudio_apps.RceaConfig"]  # noqa: F405
