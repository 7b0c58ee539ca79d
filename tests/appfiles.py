"""What `packager pull` leaves by default, made from a bundle without a Hub: the draft's app files and the
manifest's lines of them."""

from __future__ import annotations

import shutil
from pathlib import Path

from packager.bundle.checksum import MANIFEST, render
from packager.bundle.kinds import APP_FILES
from packager.infra.hashing import xxh3_128_file


def app_copy(bundle: Path, into: Path) -> Path:
    into.mkdir()
    for name in APP_FILES:
        shutil.copy(bundle / name, into / name)
    (into / MANIFEST).write_bytes(render({name: xxh3_128_file(into / name) for name in APP_FILES}))
    return into
