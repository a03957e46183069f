"""The validity audit: frozen judge, judge runs, blinded calibration, accepted-set check."""
