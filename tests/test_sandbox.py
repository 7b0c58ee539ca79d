"""The converter's fence refuses network, child processes and writes outside its folder, and allows the rest."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path


def _fenced(code: str, root: Path) -> subprocess.CompletedProcess[str]:
    # The audit hook cannot be removed, so each check runs in its own interpreter.
    script = textwrap.dedent(f"""
        from pathlib import Path
        from packager.convert.fence.sandbox import Fence
        fence = Fence(Path({str(root)!r}))
        fence.install()
        def refused(action):
            try:
                action()
            except PermissionError as exc:
                assert "packager sandbox refused" in str(exc)
                return True
            return False
    """) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)


def test_fence_refuses_network_processes_and_outside_writes(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    root = tmp_path / "work"
    root.mkdir()
    result = _fenced(
        f"""
        import os, socket, subprocess
        assert refused(lambda: socket.create_connection(("127.0.0.1", 9), timeout=1))
        assert refused(lambda: socket.getaddrinfo("example.com", 443))
        assert refused(lambda: subprocess.run(["true"]))
        assert refused(lambda: os.system("true"))
        assert refused(lambda: open({str(outside)!r}, "w"))
        assert refused(lambda: os.mkdir({str(tmp_path / "newdir")!r}))
        assert refused(lambda: os.symlink("/etc/passwd", {str(tmp_path / "link")!r}))
        print("blocked", len(fence.blocked))
    """,
        root,
    )
    assert result.returncode == 0, result.stderr
    assert "blocked 7" in result.stdout
    assert not outside.exists() and not (tmp_path / "newdir").exists()


def test_fence_allows_work_inside_its_folder_and_reading_anywhere(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    result = _fenced(
        f"""
        import os, socket
        Path({str(root)!r}, "a.txt").write_text("ok")
        os.mkdir({str(root / "sub")!r})
        os.rename({str(root / "a.txt")!r}, {str(root / "sub" / "b.txt")!r})
        assert open("/etc/hostname").read() is not None
        a, b = socket.socketpair(socket.AF_UNIX)
        a.sendall(b"x"); assert b.recv(1) == b"x"
        assert fence.blocked == []
    """,
        root,
    )
    assert result.returncode == 0, result.stderr
    assert (root / "sub" / "b.txt").read_text() == "ok"


def test_fence_permits_packagers_own_fork_and_refuses_any_other(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    result = _fenced(
        """
        import os
        assert refused(os.fork)
        pid = fence.fork()
        if pid == 0:
            os._exit(7)
        assert os.waitpid(pid, 0)[1] >> 8 == 7
        assert refused(os.fork)
        print("blocked", len(fence.blocked))
    """,
        root,
    )
    assert result.returncode == 0, result.stderr
    assert "blocked 2" in result.stdout
