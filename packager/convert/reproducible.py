"""Replace the random graph uuid MNN writes on every export with one derived from the bundle's content."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from ..errors import ConversionFailed
from ..infra.hashing import xxh3_128_bytes

_UUID_IN_JSON = re.compile(rb'"mnn_uuid"\s*:\s*"([0-9a-fA-F-]{36})"')


def stamp_uuid(graph: Path, graph_json: Path, weight_digest: str) -> str:
    """Rewrite mnn_uuid in llm.mnn and llm.mnn.json to a uuid made from the graph and weight content."""
    text = graph_json.read_bytes()
    found = _UUID_IN_JSON.findall(text)
    if len(found) != 1:
        raise ConversionFailed(f"llm.mnn.json holds {len(found)} mnn_uuid values, expected 1")
    old = found[0]
    data = graph.read_bytes()
    if data.count(old) != 1:
        raise ConversionFailed("llm.mnn does not hold its mnn_uuid exactly once; cannot make it reproducible")
    new = _derived(data, old, weight_digest)
    graph.write_bytes(data.replace(old, new))
    graph_json.write_bytes(text.replace(old, new))
    return new.decode("ascii")


def _derived(graph: bytes, old: bytes, weight_digest: str) -> bytes:
    """The uuid made from the graph (its drawn uuid zeroed) and the weights' digest."""
    neutral = graph.replace(old, b"0" * len(old))
    return str(uuid.UUID(hex=xxh3_128_bytes(neutral + weight_digest.encode("ascii")))).encode("ascii")


_UUID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")


def stamp_graph_uuid(graph: Path, weight_digest: str) -> str:
    """The same for a graph llmexport writes without a JSON copy (the EAGLE-3 head's): its one uuid-shaped
    string is the uuid MNN drew."""
    data = graph.read_bytes()
    named = _net_uuid(data)
    found = {named} if named is not None else set(_UUID.findall(data))
    if len(found) != 1 or data.count(next(iter(found))) != 1:
        raise ConversionFailed(f"{graph.name} does not hold exactly one uuid; cannot make it reproducible")
    old = found.pop()
    new = _derived(data, old, weight_digest)
    graph.write_bytes(data.replace(old, new))
    return new.decode("ascii")


# MNN's schema (schema/default/MNN.fbs): the root table Net's 12th field, `mnn_uuid: string`.
_NET_UUID_FIELD = 11


def _net_uuid(data: bytes) -> bytes | None:
    """The graph's mnn_uuid read where the flatbuffer says it is (a search through a 200 MB graph's weights for a
    uuid-shaped string took 3.4 s); None when it is not there or not uuid-shaped (the caller searches instead)."""
    import struct

    try:
        root = struct.unpack_from("<I", data, 0)[0]
        vtable = root - struct.unpack_from("<i", data, root)[0]
        slot = 4 + 2 * _NET_UUID_FIELD
        if slot + 2 > struct.unpack_from("<H", data, vtable)[0]:
            return None
        field = struct.unpack_from("<H", data, vtable + slot)[0]
        if field == 0:
            return None
        at = root + field
        text = at + struct.unpack_from("<I", data, at)[0]
        length = struct.unpack_from("<I", data, text)[0]
        value = data[text + 4 : text + 4 + length]
    except struct.error:
        return None
    return value if _UUID.fullmatch(value) else None
