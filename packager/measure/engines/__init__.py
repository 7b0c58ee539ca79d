"""`packager engines check`: a bundle in each real MNN engine from PyPI, against the current one."""
