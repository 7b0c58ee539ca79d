"""Benchmark: hashing the 0.6B-shaped bundle with packager's xxh3-128 vs hashlib sha256 vs `xxhsum -H2`.

hashlib appears here only as the baseline the issue names; packager's own code never uses it.
Usage: python bench/hash_bench.py
"""

from __future__ import annotations

import hashlib
import json
import subprocess

from common import WORK, best_of, bundle_06b, read_all

from packager.infra.hashing import xxh3_128_file


def sha256_all(folder) -> None:  # type: ignore[no-untyped-def]
    for path in sorted(folder.iterdir()):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            while chunk := handle.read(8 * 1024 * 1024):
                digest.update(chunk)


def main() -> None:
    bundle = bundle_06b()
    files = sorted(str(p) for p in bundle.iterdir())
    read_all(bundle)
    ours = best_of(5, lambda: [xxh3_128_file(p) for p in sorted(bundle.iterdir())])
    sha = best_of(5, lambda: sha256_all(bundle))
    tool = best_of(5, lambda: subprocess.run(["xxhsum", "-H2", *files], check=True, capture_output=True))
    result = {
        "bundle_bytes": sum(p.stat().st_size for p in bundle.iterdir()),
        "packager_xxh3_128_s": ours,
        "hashlib_sha256_s": sha,
        "xxhsum_H2_s": tool,
        "speedup_vs_sha256": sha / ours,
        "speed_vs_xxhsum": tool / ours,
    }
    (WORK / "hash_bench.json").write_text(json.dumps(result, indent=2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
