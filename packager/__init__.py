"""packager: build, check and publish MNN bundles (drafts, targets, EAGLE-3 heads) to a Hugging Face Hub."""

__version__ = "0.1.0"
# The distribution's name on package indexes; the import package and the command are both `packager`. PyPI's
# `packager` is an unrelated project, so nothing may ever install that name for us.
DISTRIBUTION = "mnn-packager"
