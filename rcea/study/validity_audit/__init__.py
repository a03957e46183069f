"""The validity audit: frozen judge, judge runs, blinded calibration, accepted-set check.

Modules: ``versions`` (freeze/get judge versions), ``problems`` (problem statements),
``run`` (``rcea judge run``), ``verify`` (``rcea judge verify``), ``checks`` (calibration
and accepted-set sampling), ``labelling`` (Label Studio push/sync), ``reports``
(calibration and accepted-set reports, completed events), ``simulate`` (SIMULATED
annotators for the demo and tests), ``validity`` (v̂₊ per checkpoint), ``status`` (the
event contract read by reports and publishing). The package imports nothing itself, so
``rcea.study.validity_audit.status`` stays cheap to import.
"""
