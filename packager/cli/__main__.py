"""`python -m packager.cli`."""

from . import main

main()
