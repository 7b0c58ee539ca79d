"""`packager init`: a release repository for a new draft (spec, Makefile, pre-commit, GitHub and GitLab CI)."""
