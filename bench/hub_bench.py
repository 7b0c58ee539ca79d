"""Benchmark: publishing the 0.6B-shaped bundle to the local Hub, and the local Hub under hostile load.

- `packager upload --tag` (validation, sha256 facts compared with the Hub's listing, one pinned commit,
  post-commit verification, tag) against a plain `create_repo` + `HfApi.upload_folder` of the same folder,
  each into a fresh repo, alternating, as whole processes;
- an unchanged re-release (`packager release --bundle`): bytes sent, commits and wall time;
- server memory while an unauthenticated client streams a 300 MB body, against the server's own baseline;
- a normal request's latency with 100 idle connections open (half stuck in a request line, half in a body)
  against the same request with none, same server, same run.

Usage: python bench/hub_bench.py [--runs 5]
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

import psutil
from common import REPO, WORK

sys.path.insert(0, str(REPO))
from packager.bundle.checksum import write_manifest
from packager.card.render import render
from packager.spec import model as spec_module

TOKEN = "bench-token"
PLAIN = """
import sys
from huggingface_hub import HfApi
api = HfApi(endpoint=sys.argv[1], token=sys.argv[2])
api.create_repo(sys.argv[4], exist_ok=True)
api.upload_folder(folder_path=sys.argv[3], repo_id=sys.argv[4], commit_message="plain upload")
"""


CPU: dict[str, list[float]] = {"plain": [], "ours": [], "unchanged": []}


def timed(cmd: list[str], env: dict[str, str], cpu: str | None = None) -> float:
    """Wall seconds of `cmd`; its CPU seconds (user + system, the process tree) go to CPU[cpu]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    result = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if result.returncode != 0:
        raise SystemExit(f"{cmd[:4]} failed: {result.stderr[-2000:]}")
    if cpu is not None:
        CPU[cpu].append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return elapsed


def stats(url: str) -> dict[str, int]:
    with urllib.request.urlopen(url + "/_stats") as response:
        return json.loads(response.read())


def hostile_body(url: str, pid: int, size: int = 300_000_000) -> dict[str, float]:
    """Server RSS growth (MB) while an unauthenticated client streams `size` bytes at it, sampled every 10 ms."""
    server = psutil.Process(pid)
    base = server.memory_info().rss
    peak = [base]
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], server.memory_info().rss)
            time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    host, port = url.removeprefix("http://").split(":")
    sent = 0
    with socket.create_connection((host, int(port))) as sock:
        sock.sendall(f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n".encode())
        block = b"x" * (1 << 20)
        try:
            while sent < size:
                sock.sendall(block)
                sent += len(block)
        except OSError:
            pass  # the server answered 401 and closed: it never wanted the body
    stop.set()
    sampler.join()
    return {"body_bytes_sent_before_close": sent, "rss_growth_mb": (peak[0] - base) / 1e6}


def latency_ms(url: str, path: str, samples: int = 60) -> list[float]:
    host, port = url.removeprefix("http://").split(":")
    out = []
    for _ in range(samples):
        connection = http.client.HTTPConnection(host, int(port), timeout=30)
        start = time.perf_counter()
        connection.request("GET", path, headers={"Authorization": f"Bearer {TOKEN}"})
        connection.getresponse().read()
        out.append((time.perf_counter() - start) * 1000)
        connection.close()
    return out


def idle_connections(url: str, path: str, count: int = 100) -> dict[str, float]:
    """Median and p90 latency of `path` with no idle connections, then with `count` of them open."""
    host, port = url.removeprefix("http://").split(":")
    quiet = latency_ms(url, path)
    idle = [socket.create_connection((host, int(port))) for _ in range(count)]
    for n, sock in enumerate(idle):
        sock.sendall(
            b"GET /api/models/bench/ours-0 HT"
            if n % 2
            else f"POST /api/repos/create HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {TOKEN}\r\n"
            "Content-Length: 1000\r\n\r\n".encode()
        )
    busy = latency_ms(url, path)
    for sock in idle:
        sock.close()

    def p90(values: list[float]) -> float:
        return sorted(values)[int(len(values) * 0.9)]

    return {
        "median_ms_without": statistics.median(quiet),
        "median_ms_with": statistics.median(busy),
        "p90_ms_without": p90(quiet),
        "p90_ms_with": p90(busy),
        "median_delta_ms": statistics.median(busy) - statistics.median(quiet),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    # Its own copy of the bundle convert_bench.py makes, so it never races another benchmark's copy.
    bundle = WORK / "hub-bench-bundle"
    shutil.rmtree(bundle, ignore_errors=True)
    shutil.copytree(WORK / "out-packager", bundle)
    spec = spec_module.load(REPO / "examples" / "release.toml")
    (bundle / "README.md").write_text(render(bundle, spec).text)
    write_manifest(bundle)
    root = WORK / "hub-bench"
    shutil.rmtree(root, ignore_errors=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_")}
    env.update(
        HF_HUB_DISABLE_TELEMETRY="1",
        HF_HUB_DISABLE_XET="1",
        HF_HUB_DISABLE_PROGRESS_BARS="1",
        HF_HOME=str(root / "hf-home"),
        HF_TOKEN=TOKEN,
        PYTHONPATH=str(REPO),
    )
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "packager.cli",
            "hub",
            "serve",
            "--root",
            str(root / "data"),
            "--port",
            "0",
            "--test-hooks",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**env, "PACKAGER_HUB_TOKEN": TOKEN},
    )
    try:
        url = server.stdout.readline().split("serving ")[1].split(" ")[0]  # type: ignore[union-attr]
        env["HF_ENDPOINT"] = url
        ours, plain = [], []
        for run in range(args.runs):
            jobs = [
                ("plain", [sys.executable, "-c", PLAIN, url, TOKEN, str(bundle), f"bench/plain-{run}"]),
                (
                    "ours",
                    [
                        sys.executable,
                        "-m",
                        "packager.cli",
                        "upload",
                        str(bundle),
                        f"bench/ours-{run}",
                        "--tag",
                        "v1",
                        "--quiet",
                    ],
                ),
            ]
            for name, cmd in jobs if run % 2 == 0 else reversed(jobs):
                (ours if name == "ours" else plain).append(timed(cmd, env, cpu=name))
                print(name, run, round((ours if name == "ours" else plain)[-1], 3), flush=True)
        release = [
            sys.executable,
            "-m",
            "packager.cli",
            "release",
            str(REPO / "examples" / "release.toml"),
            "--bundle",
            str(bundle),
            "--quiet",
        ]
        first = timed(release, env)
        before = stats(url)
        again = [timed(release, env, cpu="unchanged") for _ in range(args.runs)]
        after = stats(url)
        hostile = [hostile_body(url, server.pid) for _ in range(3)]
        idle = [idle_connections(url, "/api/models/bench/ours-0") for _ in range(3)]
    finally:
        server.terminate()
        server.wait()
    result = {
        "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir()),
        "plain_upload_folder_s": plain,
        "packager_upload_s": ours,
        "ratio_best": min(ours) / min(plain),
        "ratio_mean": (sum(ours) / len(ours)) / (sum(plain) / len(plain)),
        "release_first_s": first,
        "release_unchanged_s": again,
        "unchanged_lfs_bytes_sent": after["lfs_bytes_received"] - before["lfs_bytes_received"],
        "unchanged_commits": after["commits_received"] - before["commits_received"],
        "ratio_per_pair": [o / p for o, p in zip(ours, plain)],
        "ratio_median_of_pairs": statistics.median(o / p for o, p in zip(ours, plain)),
        "load_average_1min_at_end": os.getloadavg()[0],
        # CPU seconds of the client processes: what contention from other work on the machine cannot inflate.
        "cpu_s": CPU,
        "cpu_ratio_per_pair": [o / p for o, p in zip(CPU["ours"], CPU["plain"])],
        "unauthenticated_300mb_body": hostile,
        "idle_100_connections": idle,
    }
    (WORK / "hub_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))
    shutil.rmtree(root, ignore_errors=True)  # the Hub's copies of every upload: GBs nothing reads again


if __name__ == "__main__":
    main()
