"""``rcea demo``: the embedded study end to end (orchestrator, sizes, state, SIMULATED
annotators, the records export). See :mod:`rcea.app.demo.steps`."""
