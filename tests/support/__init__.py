"""Shared test support: helpers, factories and fixtures every test package uses; no test
module imports another test module."""
