"""The allow-list of :mod:`rcea_labelstudio_settings`: with SSRF protection on, Label
Studio refuses webhooks to loopback; this app admits exactly the webhooks whose URL is
``http(s)://<host>[:port]`` + ``WEBHOOK_PATH`` + a person's slug (rcea's receiver), on
creation and on delivery. Every other URL goes through Label Studio's own checks."""

from urllib.parse import urlsplit

from django.apps import AppConfig
from django.conf import settings


def is_receiver(url: object) -> bool:
    """Whether ``url`` is a webhook URL of rcea's receiver (path prefix, no query,
    no credentials, no fragment, no ``..``)."""
    if not isinstance(url, str) or len(url) > 2048:
        return False
    try:
        parts = urlsplit(url)
    except ValueError:
        return False
    prefix = settings.WEBHOOK_PATH
    slug = parts.path[len(prefix) :] if parts.path.startswith(prefix) else ""
    return (
        parts.scheme in ("http", "https")
        and bool(parts.hostname)
        and parts.username is None
        and parts.password is None
        and not parts.query
        and not parts.fragment
        and bool(slug)
        and all(c.isalnum() or c in "-_" for c in slug)
    )


class RceaConfig(AppConfig):
    name = "rcea_labelstudio_apps"
    label = "rcea_labelstudio_apps"

    def ready(self) -> None:
        # Label Studio's own app: importable once Django's app registry is ready (here)
        from webhooks import serializers, utils

        original_post = utils.ssrf_safe_post

        def post(url, *args, **kwargs):
            if is_receiver(url):
                kwargs["block_local_urls"] = False
            return original_post(url, *args, **kwargs)

        utils.ssrf_safe_post = post
        original_validate = serializers.WebhookSerializer.validate_url

        def validate_url(self, value):
            if is_receiver(value):
                return value
            return original_validate(self, value)

        serializers.WebhookSerializer.validate_url = validate_url
