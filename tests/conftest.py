"""Shared test settings: property tests are derandomized so CI runs are reproducible."""

from hypothesis import settings

settings.register_profile("rejoinder", derandomize=True, deadline=None)
settings.load_profile("rejoinder")
