"""The whole release pipeline, its signing and summary; init for a release repository."""
