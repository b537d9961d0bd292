"""Shared test settings: property tests are derandomized so CI runs are reproducible, and the
examples' embedding cache (:mod:`rejoinder.adapters._embedcache`) of the whole session, its
subprocesses included, lives in a temporary directory instead of the user's cache."""

import os
import tempfile

from hypothesis import settings

settings.register_profile("rejoinder", derandomize=True, deadline=None)
settings.load_profile("rejoinder")


def pytest_configure(config):
    os.environ.setdefault("REJOINDER_EMBED_CACHE", tempfile.mkdtemp(prefix="rejoinder-embed-"))
