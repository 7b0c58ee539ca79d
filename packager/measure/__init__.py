"""Measuring bundles against their sources and targets: verify, pair, speculate, sweep, engines."""
