"""The data keys every rendered task adds (rcea.annotation.tasks.with_rendered)."""

from __future__ import annotations

from rcea.annotation.tasks import HTML_SUFFIX, SHOWN_KEY

SHOWN_PAIR = frozenset({"left" + HTML_SUFFIX, "right" + HTML_SUFFIX, SHOWN_KEY})
SHOWN_VALIDITY = frozenset({"problem" + HTML_SUFFIX, "solution" + HTML_SUFFIX, SHOWN_KEY})
