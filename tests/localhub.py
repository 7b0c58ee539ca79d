"""A served local Hub for tests: the real `packager hub serve` in its own process, plus its test hooks."""

from __future__ import annotations

import http.client
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from packager.bundle.checksum import write_manifest
from tests import warmcli

TESTS = Path(__file__).resolve().parent
# The local Hub's processes, and the commands run against it: the network guard first (refuses and records any
# connection off 127.0.0.1), then this repository.
GUARD_PYTHONPATH = os.pathsep.join([str(TESTS / "netguard"), str(TESTS.parent)])
# The socket of the session's warm converter for that PYTHONPATH (tests/conftest.py starts it).
GUARD_CONVERTER = "PACKAGER_TEST_GUARD_CONVERTER"
WRITE_TOKEN = "hf_test_write_0123456789abcdefSECRET"
READ_TOKEN = "hf_test_read_0123456789abcdefSECRET"
OTHER_USER = "alice"  # a second user with her own namespace, whose writes and collections are hers alone
OTHER_TOKEN = "hf_test_alice_0123456789abcdefSECRET"


class LocalHub:
    def __init__(self, root: Path, guard_log: Path, *extra: str, fresh: bool = False) -> None:
        """`fresh`: the server is a process started for it, never one forked by the warm CLI (for a test of what
        the process itself shows, such as its command line)."""
        self.root, self.guard_log, self.extra, self.fresh = root, guard_log, extra, fresh
        self.process: subprocess.Popen[str] | warmcli.WarmProcess | None = None
        self.url, self.announce = "", ""

    def start(self) -> LocalHub:
        # Tokens travel in a file and an environment variable, never on the command line (`ps` shows that).
        self.root.mkdir(parents=True, exist_ok=True)
        tokens = self.root.parent / "hub-tokens"
        tokens.write_text(f"# write tokens\n{WRITE_TOKEN}\n{OTHER_USER}:{OTHER_TOKEN}\n")
        env = {**self.env(token=None), "PACKAGER_HUB_READ_TOKEN": READ_TOKEN}
        argv = ["hub", "serve", "--root", str(self.root), "--port", "0", "--token-file", str(tokens), "--test-hooks"]
        argv += self.extra
        warm = None if self.fresh else warmcli.spawn(argv, env)  # forked by the warm CLI where there is one
        self.process = warm or subprocess.Popen(
            [sys.executable, "-m", "packager.cli", *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        assert "serving http://" in line, line + self.process.stderr.read()  # type: ignore[union-attr]
        self.url, self.announce = line.split("serving ")[1].split(" ")[0], line
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:  # a loaded machine; the store needs no clean shutdown (SQLite WAL)
                self.process.kill()
                self.process.wait()
            self.process = None

    def env(self, token: str | None = WRITE_TOKEN) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(
            PYTHONPATH=GUARD_PYTHONPATH,
            PACKAGER_NETGUARD_LOG=str(self.guard_log),
            HF_HOME=str(self.root.parent / "hf-home"),
            HF_HUB_DISABLE_TELEMETRY="1",
        )
        if os.environ.get(GUARD_CONVERTER):
            env["PACKAGER_WARM_CONVERTER"] = os.environ[GUARD_CONVERTER]
        if self.url:
            env["HF_ENDPOINT"] = self.url
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    def cli(self, *args: str, token: str | None = WRITE_TOKEN, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        """`packager ARGS...` against this Hub in a process of its own (forked by the warm CLI where there is one)."""
        return warmcli.packager(list(args), None, self.env(token), timeout)

    def _call(self, method: str, path: str, data: Any = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        request = urllib.request.Request(self.url + path, data=body, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def faults(self, *rules: dict[str, Any]) -> None:
        self._call("POST", "/_faults", {"rules": list(rules)})

    def stats(self) -> dict[str, int]:
        return self._call("GET", "/_stats")

    def raw(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: dict[str, str] | None = None,
        token: str | None = WRITE_TOKEN,
    ) -> tuple[int, dict[str, str], bytes]:
        """One request through http.client (no client library in between): status, headers, body."""
        host, port = self.url.removeprefix("http://").split(":")
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        auth = {"Authorization": f"Bearer {token}"} if token else {}
        try:
            connection.request(method, path, body=body, headers={**auth, **(headers or {})})
            response = connection.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
        finally:
            connection.close()

    def stored_object(self, repo: str, path: str, revision: str = "main") -> Path:
        """The file on the server's disk that holds `path` of `repo` (to damage it, as a disk or a person might)."""
        entry = next(e for e in self.api(f"/api/models/{repo}/tree/{revision}?recursive=true") if e["path"] == path)
        folder = self.root / "objects" / repo.replace("/", "--")
        oid = entry["lfs"]["oid"] if entry.get("lfs") else entry["oid"]
        return folder / ("lfs" if entry.get("lfs") else "blobs") / oid[:2] / oid

    def api(self, path: str, token: str = WRITE_TOKEN) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


@pytest.fixture()
def hub(tmp_path: Path) -> Iterator[LocalHub]:
    server = LocalHub(tmp_path / "hub", tmp_path / "netguard.log").start()
    yield server
    server.stop()
    log = tmp_path / "netguard.log"
    assert not log.exists() or log.read_text() == "", log.read_text()  # nothing left 127.0.0.1


@pytest.fixture()
def online(monkeypatch: pytest.MonkeyPatch) -> None:
    """In-process huggingface_hub calls to the local Hub (the suite runs offline otherwise)."""
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_XET", True)  # the local Hub speaks plain LFS


@pytest.fixture()
def ready(bundle4: Any, tmp_path: Path) -> Path:
    """A release-ready bundle: the ten files, a card and the manifest."""
    bundle = tmp_path / "bundle"
    shutil.copytree(bundle4.out, bundle)
    shutil.copy(bundle4.provenance, tmp_path / "bundle.provenance.json")
    (bundle / "README.md").write_text("---\nlicense: apache-2.0\nlibrary_name: mnn\n---\n# draft\n")
    write_manifest(bundle)
    return bundle


def upload(hub: LocalHub, bundle: Path, repo: str, *extra: str, token: str | None = WRITE_TOKEN):  # type: ignore[no-untyped-def]
    return hub.cli("upload", str(bundle), repo, "--json", "--quiet", *extra, token=token)


def history(hub: LocalHub, repo: str) -> list[dict[str, str]]:
    """The commits on main after the repo's initial commit (every Hub repo starts with one)."""
    try:
        history = hub.api(f"/api/models/{repo}/commits/main")
    except urllib.error.HTTPError as exc:
        assert exc.code == 404
        return []
    assert history[-1]["title"] == "initial commit"
    return history[:-1]


def change_weights(bundle: Path) -> None:
    data = bytearray((bundle / "llm.mnn.weight").read_bytes())
    data[5000] ^= 0xFF
    (bundle / "llm.mnn.weight").write_bytes(bytes(data))
    write_manifest(bundle)


@pytest.fixture()
def jobs_hub(tmp_path: Path) -> Iterator[LocalHub]:
    """A local Hub that answers the Jobs API by running each job's command here (hub serve --run-jobs)."""
    server = LocalHub(tmp_path / "jobs-hub", tmp_path / "jobs-netguard.log", "--run-jobs").start()
    yield server
    server.stop()
    log = tmp_path / "jobs-netguard.log"
    assert not log.exists() or log.read_text() == "", log.read_text()
