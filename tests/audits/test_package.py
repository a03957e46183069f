"""``audits`` loads each public name from its module on first use (rcea/audits/__init__.py):
every name of ``__all__`` is its module's object, and a name it does not export is an
AttributeError, as for any module."""

from __future__ import annotations

import importlib

import pytest

from rcea import audits


@pytest.mark.parametrize("name", audits.__all__)
def test_every_exported_name_is_its_modules_object(name: str) -> None:
    module = importlib.import_module(audits.EXPORTS[name])
    assert getattr(audits, name) is getattr(module, name)
    assert name in dir(audits)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no_such_estimator"):
        audits.no_such_estimator  # noqa: B018
