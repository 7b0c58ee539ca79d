"""The broken-bundle corpus's mutations (tests/broken_bundles/*.json): each one edit of a bundle's files."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

from packager.bundle.checksum import write_manifest


def _parts(pointer: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in pointer.split("/")[1:]]


def _edit_json(path: Path, pointer: str, action: str, value: Any = None) -> None:
    data = json.loads(path.read_text())
    *parents, last = _parts(pointer)
    node = data
    for part in parents:
        node = node[int(part)] if isinstance(node, list) else node[part]
    key: Any = int(last) if isinstance(node, list) else last
    if action == "set":
        node[key] = value
    elif action == "remove":
        del node[key]
    else:  # "add": increment a number
        node[key] += value
    path.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")


def _rewrite_header(path: Path, line: int, content: str) -> None:
    data = path.read_bytes()
    lines = data.split(b"\n", 3)
    lines[line] = content.encode()
    path.write_bytes(b"\n".join(lines))


def _mutate_tensor(bundle: Path, path: Path, mutation: dict[str, Any]) -> None:
    """Overwrite one part of one op's bytes in llm.mnn.weight, found through the graph's `external` field."""
    import numpy as np

    op = next(
        o for o in json.loads((bundle / "llm.mnn.json").read_text())["oplists"] if o.get("name") == mutation["tensor"]
    )
    offset, weight_len, alpha_len = op["main"]["external"][:3]
    data = bytearray(path.read_bytes())
    value, part = mutation["value"], mutation["part"]
    if part in ("header", "packed"):
        quant = op["main"]["quanParameter"]
        header = 1 + (8 if quant["shapeInt32"] else 4) + (1 << quant["aMaxOrBits"]) + 1
        start, end = (offset, offset + header) if part == "header" else (offset + header, offset + weight_len)
        data[start:end] = bytes([value]) * (end - start)
    else:  # float32 runs: alpha (zero point, scale) pairs, or a norm's weights
        start = offset + (weight_len if part in ("scales", "zero_points") else 0)
        floats = np.frombuffer(bytes(data[start : start + (alpha_len or weight_len)]), "<f4").copy()
        chosen = {"scales": floats[1::2], "zero_points": floats[0::2], "floats": floats}[part]
        chosen[:] = float(value)
        data[start : start + floats.nbytes] = floats.tobytes()
    path.write_bytes(bytes(data))


def mutate(bundle: Path, mutation: dict[str, Any]) -> None:
    op, path = mutation["op"], bundle / mutation.get("file", "")
    if op in ("set", "remove", "add"):
        _edit_json(path, mutation["pointer"], op, mutation.get("value"))
    elif op == "text" or op == "write":
        path.write_text(mutation["content"])
    elif op == "replace":
        text = path.read_text()
        new = (
            re.sub(mutation["old_regex"], mutation["new"], text, count=1)
            if "old_regex" in mutation
            else text.replace(mutation["old"], mutation["new"], mutation.get("count", -1))
        )
        assert new != text
        path.write_text(new)
    elif op == "truncate":
        path.write_bytes(path.read_bytes()[: -mutation["bytes"]])
    elif op == "append":
        path.write_bytes(path.read_bytes() + bytes(mutation["bytes"]))
    elif op == "delete":
        path.unlink()
    elif op == "mkdir":
        path.mkdir()
    elif op == "symlink":
        path.unlink()
        os.symlink(mutation["target"], path)
    elif op == "header":
        _rewrite_header(path, mutation["line"], mutation["content"])
    elif op == "stop_ids":
        lines = path.read_bytes().split(b"\n", 3)
        special, _, prefix = (int(x) for x in lines[1].split())
        ids = lines[2].split()
        stops = [str(i).encode() for i in mutation["ids"]]
        lines[1] = f"{special} {len(stops)} {prefix}".encode()
        lines[2] = b" ".join(ids[:special] + stops + ids[len(ids) - prefix :] if prefix else ids[:special] + stops)
        path.write_bytes(b"\n".join(lines))
    elif op == "manifest":
        write_manifest(bundle)
    elif op == "flip":
        data = bytearray(path.read_bytes())
        data[mutation["offset"]] ^= 0xFF
        path.write_bytes(bytes(data))
    elif op == "fill_file":
        path.write_bytes(bytes([mutation["byte"]]) * path.stat().st_size)
    elif op == "tensor":
        _mutate_tensor(bundle, path, mutation)
    elif op == "deep":  # written as text: json.dumps itself cannot nest 10,000 deep
        path.write_text('{"backend_type": "cpu", "x": ' + "[" * mutation["depth"] + "]" * mutation["depth"] + "}")
    else:
        raise AssertionError(f"unknown mutation {op}")
