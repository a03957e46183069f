"""``python -m rcea.app.cli``: the ``rcea`` command (how ``rcea labelstudio start --public``
runs the team's API and view, with this interpreter, whatever ``PATH`` holds)."""

from rcea.app.cli import main

main()
