"""Each test module's measured time, for handing the heaviest modules to the xdist workers first.

`python -m tests.durations PROFILE` writes tests/durations.json from a session's $PACKAGER_TEST_PROFILE file (each
test's wall time, summed per module, to the tenth of a second). A module not in it (new since) is estimated from its
marks. Measured, not guessed: the marks alone put a module of two long end-to-end tests (test_matrix_release.py,
85 s) last, and one worker then ran it alone.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

FILE = Path(__file__).with_name("durations.json")
# Seconds a test is taken to cost when its module has no measurement: by what it uses.
ESTIMATE = {"converter": 6.0, "trained": 6.0, "engines": 6.0, "hub": 1.0}
OTHER = 0.05


def load() -> dict[str, float]:
    try:
        data = json.loads(FILE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def estimate(marks: set[str]) -> float:
    return max((ESTIMATE[m] for m in marks if m in ESTIMATE), default=OTHER)


def main(profile: Path) -> None:
    seconds: dict[str, float] = {}
    for line in profile.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        module = fields[0].split("::")[0]
        seconds[module] = seconds.get(module, 0.0) + float(fields[3]) - float(fields[2])
    ordered = dict(sorted((m, round(s, 1)) for m, s in seconds.items()))
    FILE.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
