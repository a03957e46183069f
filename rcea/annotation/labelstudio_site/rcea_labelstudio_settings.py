"""Label Studio's Django settings as rcea launches it (``DJANGO_SETTINGS_MODULE``; this
directory is on the server's ``PYTHONPATH``; it runs inside ``.venv-labelstudio``, never
imported by rcea).

Label Studio's own SSRF protection stays **on**, so an annotator cannot make the server
fetch a URL for them (``POST /api/projects/{id}/import`` with ``url=…``, cloud storages,
ML backends, exports): loopback and private addresses are refused. The one exception is
the webhook to rcea's receiver (:mod:`rcea_labelstudio_apps`): a webhook whose URL path
starts with :data:`WEBHOOK_PATH` is created and delivered even on loopback.
"""

import os

# base first: Label Studio's settings read django.conf.settings while they load, which
# then sees this partly loaded module (as it would see Label Studio's own)
from label_studio.core.settings.base import *  # noqa: F403, I001
from label_studio.core.settings.label_studio import *  # noqa: F403

SSRF_PROTECTION_ENABLED = True
USE_DEFAULT_BANNED_SUBNETS = True
ML_BLOCK_LOCAL_IP = True
WEBHOOK_PATH = os.environ.get("RCEA_WEBHOOK_PATH", "/webhooks/label-studio/")
INSTALLED_APPS = [*INSTALLED_APPS, "rcea_labelstudio_apps.RceaConfig"]  # noqa: F405
