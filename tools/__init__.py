"""Development tools that are not part of the installed package: the generated reference
pages of the documentation (``python -m tools.reference_docs``) and the screenshots
(``python -m tools.screenshots``)."""
