"""Model families: the facts of each family packager converts, one module each (a leaf)."""
