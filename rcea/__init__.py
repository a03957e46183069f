"""RCEA Audit: reward-conditioned entropy allocation studies with blinded human audits.

One namespace for the whole product: ``rcea.audits`` (pure statistics), ``rcea.annotation``
(Label Studio), ``rcea.pipeline`` (producers), ``rcea.study`` (every rule on the store) and
``rcea.app`` (the shell: CLI, API, view, demo), layered in that order
(docs/development.md)."""
