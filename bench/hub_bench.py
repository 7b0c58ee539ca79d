"""Benchmark: publishing the 0.6B-shaped bundle to the local Hub.

- `packager upload --tag` (validation, plan, one commit, post-commit verification, tag) against a plain
  `HfApi.upload_folder` of the same folder, each into a fresh repo, alternating, as whole processes;
- an unchanged re-release (`packager release --bundle`): bytes sent and wall time.

Usage: python bench/hub_bench.py [--runs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.request

from common import REPO, WORK, bundle_06b

sys.path.insert(0, str(REPO))
from packager import spec as spec_module  # noqa: E402
from packager.card import render  # noqa: E402
from packager.checksum import write_manifest  # noqa: E402

TOKEN = "bench-token"
PLAIN = """
import sys
from huggingface_hub import HfApi
api = HfApi(endpoint=sys.argv[1], token=sys.argv[2])
api.create_repo(sys.argv[4], exist_ok=True)
api.upload_folder(folder_path=sys.argv[3], repo_id=sys.argv[4], commit_message="plain upload")
"""


def timed(cmd: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if result.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed: {result.stderr[-2000:]}")
    return elapsed


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/_stats") as response:
        return json.loads(response.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    bundle = bundle_06b()
    spec = spec_module.load(REPO / "examples" / "release.toml")
    (bundle / "README.md").write_text(render(bundle, spec).text)
    write_manifest(bundle)
    root = WORK / "hub-bench"
    shutil.rmtree(root, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(HF_HUB_DISABLE_TELEMETRY="1", HF_HUB_DISABLE_XET="1", HF_HUB_DISABLE_PROGRESS_BARS="1",
               HF_HOME=str(root / "hf-home"), HF_TOKEN=TOKEN, PYTHONPATH=str(REPO))
    server = subprocess.Popen([sys.executable, "-m", "packager.cli", "hub", "serve", "--root", str(root / "data"),
                               "--port", "0", "--token", TOKEN, "--test-hooks"], stdout=subprocess.PIPE, text=True,
                              env=env)
    try:
        url = server.stdout.readline().split("serving ")[1].split(" ")[0]  # type: ignore[union-attr]
        env["HF_ENDPOINT"] = url
        ours, plain = [], []
        for run in range(args.runs):
            jobs = [("plain", [sys.executable, "-c", PLAIN, url, TOKEN, str(bundle), f"bench/plain-{run}"]),
                    ("ours", [sys.executable, "-m", "packager.cli", "upload", str(bundle), f"bench/ours-{run}",
                              "--tag", "v1", "--quiet"])]
            for name, cmd in jobs if run % 2 == 0 else reversed(jobs):
                (ours if name == "ours" else plain).append(timed(cmd, env))
                print(name, run, round((ours if name == "ours" else plain)[-1], 3), flush=True)
        release = [sys.executable, "-m", "packager.cli", "release", str(REPO / "examples" / "release.toml"),
                   "--bundle", str(bundle), "--quiet"]
        first = timed(release, env)
        before = stats(url)
        again = [timed(release, env) for _ in range(3)]
        after = stats(url)
    finally:
        server.terminate()
        server.wait()
    result = {
        "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir()),
        "plain_upload_folder_s": plain, "packager_upload_s": ours,
        "ratio_best": min(ours) / min(plain), "ratio_mean": (sum(ours) / len(ours)) / (sum(plain) / len(plain)),
        "release_first_s": first, "release_unchanged_s": again,
        "unchanged_lfs_bytes_sent": after["lfs_bytes_received"] - before["lfs_bytes_received"],
        "unchanged_commits": after["commits_received"] - before["commits_received"],
    }
    (WORK / "hub_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
