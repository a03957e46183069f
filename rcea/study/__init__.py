"""RCEA Audit's domain: every rule on the store (settings, store, records, labelling, the
pair and validity audits, the codebook cycle, progress, the report). The shell in ``app``
(CLI, API, view, demo) calls into it; it never imports ``app``."""
