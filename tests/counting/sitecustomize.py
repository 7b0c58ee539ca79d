"""Loaded by every Python process a test session starts (tests/conftest.py puts this folder on PYTHONPATH)."""

import packager_test_counts
