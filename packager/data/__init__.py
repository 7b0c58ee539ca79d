"""Package data: corpora and prompt sets."""
