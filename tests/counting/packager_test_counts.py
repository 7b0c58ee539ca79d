"""Counts what a test session converts, in every Python process of it (the test processes, and through
sitecustomize.py on PYTHONPATH each process they start): one line per event in $PACKAGER_TEST_COUNTS.

- `conversion`: a bundle moved from its stage onto --out (packager.bundle.staging's commit), in the library or in
  a `packager convert` process;
- `graph build`: packager's fenced llmexport worker started (a graph cache miss, or a reference conversion);
- `llmexport`: plain llmexport run by a test (tests.models.llmexport_raw), to compare packager with it.

Audit hooks see these without touching packager: os.rename and subprocess.Popen raise audit events."""

import os
import sys

VARIABLE = "PACKAGER_TEST_COUNTS"
_PARTIAL = ".packager-partial-"


def _record(kind: str) -> None:
    log = os.environ.get(VARIABLE)  # read when it happens: the session sets it after this process started
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(kind + "\n")


def _count(event, args):  # type: ignore[no-untyped-def]
    if event == "os.rename":
        source, target = str(args[0]), str(args[1])
        if _PARTIAL in source and _PARTIAL not in target and os.path.basename(source) != "replaced":
            _record("conversion")
    elif event == "subprocess.Popen":
        command = " ".join(str(a) for a in (args[1] or ()))
        if "packager.convert.fence.worker" in command:
            _record("graph build")
        elif "import llmexport" in command:
            _record("llmexport")


if not getattr(sys, "_packager_test_counts", False):
    sys._packager_test_counts = True  # type: ignore[attr-defined]
    sys.addaudithook(_count)
