"""Counts what a test session converts, in every Python process of it (the test processes, and through
sitecustomize.py on PYTHONPATH each process they start): one line per event in $PACKAGER_TEST_COUNTS.

- `conversion`: a bundle moved from its stage onto --out (packager.bundle.staging's commit), in the library or in
  a `packager convert` process;
- `graph build`: a job of packager's fenced llmexport worker (a graph cache miss, or a reference conversion),
  in a fresh worker or a warm converter's copy;
- `llmexport`: plain llmexport run by a test (tests.models.llmexport_raw), to compare packager with it.

Audit hooks see these: os.rename and subprocess.Popen raise audit events, and packager's launch its own
(`packager.convert.worker`). Each line also
names the test it happened in and whether that test is marked to convert ($PACKAGER_TEST_NODEID and
$PACKAGER_TEST_MAY_CONVERT, set by tests/conftest.py around each test and inherited by what it starts), so the
session can fail a test that converts without its mark: the fast layer's promise is checked, not assumed."""

import os
import sys

VARIABLE = "PACKAGER_TEST_COUNTS"
NODEID = "PACKAGER_TEST_NODEID"
MAY_CONVERT = "PACKAGER_TEST_MAY_CONVERT"
KINDS = ("conversion", "graph build", "llmexport")
_PARTIAL = ".packager-partial-"


def _record(kind: str) -> None:
    log = os.environ.get(VARIABLE)  # read when it happens: the session sets it after this process started
    if log:
        with open(log, "a", encoding="utf-8") as out:
            out.write(f"{kind}\t{os.environ.get(MAY_CONVERT, '1')}\t{os.environ.get(NODEID, '')}\n")


def _count(event, args):  # type: ignore[no-untyped-def]
    if event == "os.rename":
        source, target = str(args[0]), str(args[1])
        if _PARTIAL in source and _PARTIAL not in target and os.path.basename(source) != "replaced":
            _record("conversion")
    elif event == "packager.convert.worker":  # raised by packager's launch for each job, fresh worker or warm
        _record("graph build")
    elif event == "subprocess.Popen":
        command = " ".join(str(a) for a in (args[1] or ()))
        if "import llmexport" in command:
            _record("llmexport")


if not getattr(sys, "_packager_test_counts", False):
    sys._packager_test_counts = True  # type: ignore[attr-defined]
    sys.addaudithook(_count)


def read(log: str) -> tuple[dict[str, int], list[str]]:
    """How many of each kind the log holds, and the tests that converted while not marked to (sorted, once each)."""
    text = ""
    if os.path.isfile(log):
        with open(log, encoding="utf-8") as handle:
            text = handle.read()
    lines = [line.split("\t") for line in text.splitlines()]
    made = {kind: sum(1 for line in lines if line[0] == kind) for kind in KINDS}
    unmarked = sorted({f"{line[2]} ({line[0]})" for line in lines if len(line) == 3 and line[1] == "0"})
    return made, unmarked


def _record_process() -> None:
    """With $PACKAGER_TEST_PROCESSES (a file), each Python process of the session adds a line at its exit: the test
    it ran for, its command and its CPU seconds (its own, and its waited-for children's)."""
    log = os.environ.get("PACKAGER_TEST_PROCESSES")
    if not log:
        return
    import atexit

    def write() -> None:
        times = os.times()
        command = " ".join(sys.argv[:4])[:200].replace("\t", " ")
        with open(log, "a", encoding="utf-8") as out:
            out.write(
                f"{os.environ.get(NODEID, '')}\t{command}\t{times.user + times.system:.2f}\t"
                f"{times.children_user + times.children_system:.2f}\n"
            )

    atexit.register(write)


_record_process()
