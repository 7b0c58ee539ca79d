"""The local Hub's content on disk, per repo: LFS objects by sha256 and regular blobs by git blob id.

An upload is written to a temporary file and moves into place only when it is complete and hashes to its
oid; temporaries a crash left behind are removed when the store opens. Stored objects are checked (size
always, sha256 when a client is told "already present"), so a damaged one is reported and can be replaced.
Protocol hashes come from huggingface_hub's helpers (`sha_fileobj`, `git_hash`).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from huggingface_hub.utils.sha import sha_fileobj

from .rules import HubError

CHUNK = 1024 * 1024
PARTIAL = ".upload-"


class Objects:
    def __init__(self, root: Path) -> None:
        self.root = root / "objects"
        self.root.mkdir(parents=True, exist_ok=True)
        self._verified: dict[Path, tuple[int, int, int]] = {}  # path -> (inode, size, mtime_ns) hashed ok
        self._lock = threading.Lock()
        self.removed_partials = self._remove_partials()

    def _remove_partials(self) -> int:
        partials = [p for p in self.root.rglob(f"{PARTIAL}*") if p.is_file()]
        for path in partials:
            path.unlink(missing_ok=True)
        return len(partials)

    def _repo_dir(self, repo: str) -> Path:
        return self.root / repo.replace("/", "--")

    def lfs_path(self, repo: str, oid: str) -> Path:
        return self._repo_dir(repo) / "lfs" / oid[:2] / oid

    def blob_path(self, repo: str, key: str) -> Path:
        return self._repo_dir(repo) / "blobs" / key[:2] / key

    def sound(self, path: Path, size: int) -> bool:
        """The file exists with the size its entry says (cheap; done before every read)."""
        try:
            return path.stat().st_size == size
        except OSError:
            return False

    def intact(self, repo: str, oid: str, size: int) -> bool:
        """The LFS object exists, has `size` bytes and hashes to `oid` (hashed once per file version)."""
        path = self.lfs_path(repo, oid)
        try:
            st = path.stat()
        except OSError:
            return False
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        if st.st_size != size:
            return False
        with self._lock:
            if self._verified.get(path) == stamp:
                return True
        with open(path, "rb") as handle:
            ok = sha_fileobj(handle).hex() == oid
        if ok:
            with self._lock:
                self._verified[path] = stamp
        return ok

    async def receive_lfs(
        self,
        repo: str,
        oid: str,
        size: int,
        read: Callable[[], Awaitable[bytes]],
        offload: Callable[..., Awaitable[Any]],
    ) -> None:
        """Stream an upload to a temporary file; keep it only if complete, not too long, and hashing to `oid`."""
        target = self.lfs_path(repo, oid)
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=PARTIAL)
        try:
            with os.fdopen(fd, "w+b") as handle:
                received = 0
                while chunk := await read():
                    received += len(chunk)
                    if received > size:
                        raise HubError(400, "UploadTooLong", f"the upload of {oid} is longer than {size} bytes")
                    handle.write(chunk)
                if received != size:
                    raise HubError(400, "IncompleteUpload", f"the upload of {oid} ended after {received} bytes")
                handle.flush()
                handle.seek(0)
                if (await offload(sha_fileobj, handle)).hex() != oid:
                    raise HubError(400, "ShaMismatch", f"the uploaded bytes do not hash to {oid}")
            os.replace(tmp, target)
        finally:
            Path(tmp).unlink(missing_ok=True)
        self._remember(target)

    def _remember(self, path: Path) -> None:
        """`path` was hashed and matched just now: no need to hash it again while it stays as it is."""
        st = path.stat()
        with self._lock:
            self._verified[path] = (st.st_ino, st.st_size, st.st_mtime_ns)

    def write_blob(self, repo: str, key: str, data: bytes) -> None:
        path = self.blob_path(repo, key)
        if self.sound(path, len(data)):
            return
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=PARTIAL)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.replace(tmp, path)

    def delete_repo(self, repo: str) -> None:
        import shutil

        shutil.rmtree(self._repo_dir(repo), ignore_errors=True)
