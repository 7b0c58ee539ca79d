"""packager: build, check and publish MNN draft-model bundles."""

__version__ = "0.1.0"
