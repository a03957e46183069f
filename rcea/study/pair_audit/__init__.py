"""The pair-audit workflow on the store: rubric and partition freezes, sampling, labels
and gates. Label Studio I/O lives in ``annotation``; statistics in ``audits``."""
