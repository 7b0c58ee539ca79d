"""The checks CI runs, as one Report each: bundle folders (named, or found from changed files) and release specs."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from ..errors import PackagerError
from ..infra.progress import Progress, Step
from ..report import FOLDER, Checked, Report
from ..report.findings import Finding


def check_bundles(
    paths: Sequence[Path], from_files: bool = False, strict: bool = False, progress: Progress = lambda _: None
) -> Report:
    """Validate each bundle folder named; with `from_files`, the folders the files belong to (pre-commit passes
    files), where a folder that cannot be read is a finding rather than an error line."""
    from . import validate
    from .discover import bundle_folders

    skipped: tuple[str, ...] = ()
    if from_files:
        found = bundle_folders(paths)
        paths, skipped = found.bundles, found.skipped
    checked = []
    for number, bundle in enumerate(paths, 1):
        progress(Step(f"validating {bundle} ({number}/{len(paths)})", number - 1, len(paths), "validating"))
        try:
            report = validate(bundle)
        except PackagerError as exc:
            if not from_files:
                raise
            checked.append(Checked("bundle", str(bundle), (Finding(FOLDER, "", "error", exc.message),)))
            continue
        checked.append(
            Checked("bundle", str(bundle), report.findings, report.checked_files, report.kind, report.subset)
        )
    return Report("packager validate", tuple(checked), strict, skipped)


def check_specs(paths: Sequence[Path], strict: bool = False) -> Report:
    from ..spec.check import check_spec

    return Report("packager check-spec", tuple(check_spec(path) for path in paths), strict)
