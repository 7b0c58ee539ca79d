"""Each MNN engine from PyPI in its own virtual environment under packager's cache, never the user's.

The root is $PACKAGER_ENGINES_DIR, else $XDG_CACHE_HOME/packager/engines, else ~/.cache/packager/engines.
An environment is built in a temporary folder beside its final place (venv, then `pip install mnn==X`,
then a marker file written last) and renamed into place, so a killed install or a concurrent check never
leaves or sees half of one; one whose marker or interpreter is missing or whose MNN is not the named
version is removed and built again.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from ...errors import EngineInstallFailed, shorten
from ...infra.progress import Progress as Report

MARKER = "packager-engine.json"


@dataclass(frozen=True)
class Engine:
    version: str
    path: Path

    @property
    def python(self) -> Path:
        return self.path / "bin" / "python"


def root() -> Path:
    if os.environ.get("PACKAGER_ENGINES_DIR"):
        return Path(os.environ["PACKAGER_ENGINES_DIR"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "packager" / "engines"


def _folder(version: str) -> Path:
    return root() / f"mnn-{version}"


def _intact(folder: Path, version: str) -> bool:
    try:
        marker = json.loads((folder / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(marker, dict) or marker.get("mnn") != version or not (folder / "bin" / "python").exists():
        return False
    site = list(folder.glob("lib/python*/site-packages"))
    return (
        bool(site)
        and any((s / "MNN" / "__init__.py").is_file() for s in site)
        and any(d.name.lower() == f"mnn-{version}.dist-info" for s in site for d in s.glob("*.dist-info"))
    )


def _runs(folder: Path) -> bool:
    """The environment's interpreter starts and imports MNN's engine (a removed base Python, a truncated
    library or a broken numpy show here, not as a verdict on the bundle)."""
    try:
        done = subprocess.run(
            [str(folder / "bin" / "python"), "-I", "-c", "import numpy, _mnncengine"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            cwd=folder,
        )
    except OSError:
        return False
    return done.returncode == 0


def ensure(version: str, report: Report = lambda _: None) -> Engine:
    """The environment of MNN `version`, installed from PyPI on first use (one installer at a time per version:
    a concurrent check waits for it, then finds the environment made)."""
    folder = _folder(version)
    if _intact(folder, version) and _runs(folder):
        return Engine(version, folder)
    base = root()
    base.mkdir(parents=True, exist_ok=True)
    with open(base / f".mnn-{version}.lock", "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (_intact(folder, version) and _runs(folder)):
            if folder.exists() or folder.is_symlink():
                report(f"MNN {version}'s environment in {folder} is damaged; removing it and installing again")
                _remove(folder)
            _install(version, base, folder, report)
    return Engine(version, folder)


def _install(version: str, base: Path, folder: Path, report: Report) -> None:
    temp = Path(tempfile.mkdtemp(prefix=f".incoming-mnn-{version}-", dir=base))
    try:
        report(f"installing MNN {version} from PyPI into {folder} (once)")
        _run([sys.executable, "-m", "venv", str(temp)], version)
        _run(
            [
                str(temp / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-input",
                f"mnn=={version}",
            ],
            version,
        )
        (temp / MARKER).write_text(json.dumps({"mnn": version, "python": sys.version.split()[0]}), encoding="utf-8")
        if not (_intact(temp, version) and _runs(temp)):
            raise EngineInstallFailed(f"pip installed MNN {version} into {temp}, but it does not import")
        os.rename(temp, folder)
    finally:
        shutil.rmtree(temp, ignore_errors=True)


def _remove(folder: Path) -> None:
    if folder.is_symlink() or folder.is_file():
        folder.unlink()
    else:
        shutil.rmtree(folder)


def _run(command: list[str], version: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    try:
        done = subprocess.run(
            command, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace"
        )
    except OSError as exc:
        raise EngineInstallFailed(f"could not install MNN {version}: {exc.strerror or exc}") from None
    if done.returncode != 0:
        lines = [
            line
            for line in (done.stderr + done.stdout).splitlines()
            if line.strip() and not line.startswith("WARNING: Location")
        ]
        last = lines[-1] if lines else f"exit code {done.returncode}"
        raise EngineInstallFailed(f"could not install MNN {version} ({shorten(last)})", details="\n".join(lines[-40:]))


def installed() -> list[Engine]:
    base = root()
    found = []
    for folder in sorted(base.glob("mnn-*")) if base.is_dir() else []:
        version = folder.name[len("mnn-") :]
        if _intact(folder, version):
            found.append(Engine(version, folder))
    return found
