"""Reports and the publish gate: ``build_report`` assembles every RCEA quantity the store
supports (``rcea.study.report.build``: ``inputs`` reads the store, ``compute`` computes
from what it read); ``publish_report`` refuses while a retention/mode number rests on an
ungated partition or a validity number on an uncalibrated judge, and otherwise writes
a dated, self-contained bundle (``rcea.study.report.publish``)."""
