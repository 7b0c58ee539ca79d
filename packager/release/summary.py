"""The summary of a release run (`release --json`, `--summary FILE`): stable keys, schemas/release_summary.schema.json.

Every key is always present (null when a stage that would fill it did not run), so a CI can read the artifact
of a failed run as it reads a good one."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from .. import __version__
from ..errors import PackagerError
from .stages import ReleaseResult

SUMMARY_VERSION = 1


def summary(
    result: ReleaseResult | None,
    spec_path: Path,
    *,
    dry_run: bool,
    endpoint: str | None,
    error: PackagerError | None = None,
    spec: Any = None,
) -> dict[str, Any]:
    """The summary of a finished run (`result`), or of one refused before its first stage (`error`)."""
    error = result.error if result is not None else error
    release = spec.release if spec is not None else None
    upload = result.upload if result is not None else None
    return {
        "summary_version": SUMMARY_VERSION,
        "packager_version": __version__,
        "ok": error is None,
        "exit_code": 0 if error is None else error.exit_code,
        "error": error.one_line() if error is not None else None,
        "dry_run": dry_run,
        "spec": str(spec_path),
        "repo_id": release.repo_id if release else None,
        "version": release.version if release else None,
        "endpoint": upload.endpoint if upload is not None else endpoint,
        "bundle": str(result.bundle) if result is not None and result.bundle else None,
        "commit": result.commit if result is not None else None,
        "tag": result.tag if result is not None else None,
        "stages": [
            {
                "name": s.name,
                "ok": s.ok,
                "seconds": round(s.seconds, 3),
                "detail": s.detail,
                "warnings": list(s.warnings),
            }
            for s in (result.stages if result is not None else ())
        ],
        "plan": [{"path": r.path, "action": r.action, "size": r.size} for r in (upload.plan if upload else ())],
        "bytes_to_send": upload.bytes_to_send if upload is not None else None,
        "gated": upload.gated if upload is not None else None,
        "collection": asdict(upload.collection) if upload is not None and upload.collection else None,
    }


def as_text(data: dict[str, Any]) -> str:
    lines = [
        f"{'ok  ' if s['ok'] else 'FAIL'} {s['name']:21} {s['seconds']:7.2f}s  {s['detail']}" for s in data["stages"]
    ]
    if data["dry_run"]:
        lines += [f"{r['action']:9} {r['path']} ({r['size']:,} B)" for r in data["plan"]]
    if data["ok"]:
        lines.append(
            f"dry run of {data['repo_id']}@{data['version']}: nothing changed on {data['endpoint']}"
            if data["dry_run"]
            else f"released {data['repo_id']}@{data['tag']} ({data['commit']})"
        )
    elif data["commit"] and data["stages"][-1]["name"] == "collection":
        lines.append(
            f"released {data['repo_id']}@{data['tag']} ({data['commit']}), committed and tagged, but its "
            "collection is NOT updated; rerun the same command to finish"
        )
    else:
        lines.append(f"release stopped at {data['stages'][-1]['name'] if data['stages'] else 'start'}")
    return "\n".join(lines)
