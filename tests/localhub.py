"""A served local Hub for tests: the real `packager hub serve` in its own process, plus its test hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

TESTS = Path(__file__).resolve().parent
WRITE_TOKEN = "hf_test_write_0123456789abcdefSECRET"
READ_TOKEN = "hf_test_read_0123456789abcdefSECRET"


class LocalHub:
    def __init__(self, root: Path, guard_log: Path, *extra: str) -> None:
        self.root, self.guard_log, self.extra = root, guard_log, extra
        self.process: subprocess.Popen[str] | None = None
        self.url = ""

    def start(self) -> LocalHub:
        # Tokens travel in a file and an environment variable, never on the command line (`ps` shows that).
        self.root.mkdir(parents=True, exist_ok=True)
        tokens = self.root.parent / "hub-tokens"
        tokens.write_text(f"# write tokens\n{WRITE_TOKEN}\n")
        env = {**self.env(token=None), "PACKAGER_HUB_READ_TOKEN": READ_TOKEN}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "packager.cli", "hub", "serve", "--root", str(self.root), "--port", "0",
             "--token-file", str(tokens), "--test-hooks", *self.extra],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        line = self.process.stdout.readline()  # type: ignore[union-attr]
        assert "serving http://" in line, line + self.process.stderr.read()  # type: ignore[union-attr]
        self.url = line.split("serving ")[1].split(" ")[0]
        return self

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def env(self, token: str | None = WRITE_TOKEN) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
        env.update(PYTHONPATH=os.pathsep.join([str(TESTS / "netguard"), str(TESTS.parent)]),
                   PACKAGER_NETGUARD_LOG=str(self.guard_log), HF_HOME=str(self.root.parent / "hf-home"),
                   HF_HUB_DISABLE_TELEMETRY="1")
        if self.url:
            env["HF_ENDPOINT"] = self.url
        if token is not None:
            env["HF_TOKEN"] = token
        return env

    def cli(self, *args: str, token: str | None = WRITE_TOKEN, timeout: int = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "packager.cli", *args], capture_output=True, text=True,
                              env=self.env(token), timeout=timeout)

    def _call(self, method: str, path: str, data: Any = None) -> Any:
        body = json.dumps(data).encode() if data is not None else None
        request = urllib.request.Request(self.url + path, data=body, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read() or b"null")

    def faults(self, *rules: dict[str, Any]) -> None:
        self._call("POST", "/_faults", {"rules": list(rules)})

    def stats(self) -> dict[str, int]:
        return self._call("GET", "/_stats")

    def api(self, path: str, token: str = WRITE_TOKEN) -> Any:
        request = urllib.request.Request(self.url + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())
