"""packager's error classes and the exit codes that are no error class's (for the exit-code tests and the docs')."""

from __future__ import annotations

import importlib
import pkgutil

import packager
from packager import errors
from packager.errors import PackagerError

# Exit codes of commands that print a whole report instead of one error line, and of signals.
REPORT_CODES = {errors.VALIDATION_FAILED, errors.CHECKSUM_MISMATCH, errors.ENGINES_CHECK_FAILED, errors.VERIFY_FAILED}
OTHER_CODES = {0, 2, 130, 143}


def every_error() -> list[type[PackagerError]]:
    for module in pkgutil.walk_packages(packager.__path__, "packager."):
        if not module.name.endswith("__main__"):
            importlib.import_module(module.name)  # an error class defined anywhere is found

    def below(cls: type[PackagerError]) -> list[type[PackagerError]]:
        return [c for sub in cls.__subclasses__() for c in (sub, *below(sub))]

    return below(PackagerError)
