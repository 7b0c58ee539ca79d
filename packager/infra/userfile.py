"""Every file a user names is read through here: at most its limit plus one byte, whatever size it claims.

A device (/dev/zero) and a pipe report a size of 0 and a sparse file a size it does not hold in memory, so a
check of `st_size` before reading proves nothing: the read itself stops one byte past the limit.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputTooLarge, shorten

KIB = 1 << 10
MIB = 1 << 20

# The limits, by what the file is. Each is far above any real file of its kind.
SPEC_BYTES = 1 * MIB  # a release spec (release.toml) is a few KB
TOKEN_BYTES = 64 * KIB  # a Hub token is under 100 bytes
PASSPHRASE_BYTES = 64 * KIB  # the first line of --passphrase-file
PROMPTS_BYTES = 16 * MIB  # --prompts: the built-in workloads are a few KB
REPORT_BYTES = 64 * MIB  # a pair, verify or speculate report (--json) given to card or release
JSON_BYTES = 256 * MIB  # any other JSON packager reads (tokenizer.json is about 11 MB)
TEMPLATE_BYTES = 1 * MIB  # a card template (card --template): packager's own are under 20 KB
COSTS_BYTES = 1 * MIB  # pair --costs: a few figures, a few hundred bytes
LICENSE_BYTES = 1 * MIB  # a checkpoint's LICENSE the release ships (Llama 3.2's is 8 KB, Apache-2.0's 11 KB)

_CHUNK = 1 * MIB


def say_size(limit: int) -> str:
    """1 MiB, 64 KiB, 300 bytes."""
    for unit, size in (("GiB", 1 << 30), ("MiB", MIB), ("KiB", KIB)):
        if limit >= size and limit % size == 0:
            return f"{limit // size} {unit}"
    return f"{limit:,} bytes"


def read_at_most(path: Path, limit: int, first_line: bool = False) -> bytes:
    """At most `limit` + 1 bytes of the file (with `first_line`, those before its first newline); OSError as raised.

    More than `limit` bytes back means the file is too large; the caller says so in its own words."""
    data = bytearray()
    with open(path, "rb", buffering=0) as handle:
        while len(data) <= limit:
            chunk = handle.read(min(_CHUNK, limit + 1 - len(data)))
            if not chunk:
                break
            if first_line and b"\n" in chunk:
                data += chunk[: chunk.index(b"\n")]
                break
            data += chunk
    return bytes(data)


def read_bytes(
    path: Path,
    limit: int,
    *,
    what: str,
    unreadable: type[Exception],
    too_large: type[Exception] = InputTooLarge,
    first_line: bool = False,
) -> bytes:
    """The file's bytes (with `first_line`, those before its first newline), never more than `limit`.

    `what` names the file in the one line an error makes ("release spec", "--token-file"); `unreadable` is the
    error of a file that cannot be opened or read, `too_large` of one longer than `limit`."""
    shown = f"{what} {shorten(str(path), 120)}"
    try:
        data = read_at_most(path, limit, first_line)
    except FileNotFoundError:
        raise unreadable(f"{shown} does not exist") from None
    except IsADirectoryError:
        raise unreadable(f"{shown} is a folder, not a file") from None
    except OSError as exc:
        raise unreadable(f"{shown} cannot be read ({exc.strerror or type(exc).__name__})") from None
    if len(data) > limit:
        raise too_large(
            f"{shown} is over {say_size(limit)}{' in its first line' if first_line else ''}: too large for a {what}"
        )
    return data


def read_text(
    path: Path, limit: int, *, what: str, unreadable: type[Exception], too_large: type[Exception] = InputTooLarge
) -> str:
    """The file as UTF-8 text (strict), at most `limit` bytes."""
    data = read_bytes(path, limit, what=what, unreadable=unreadable, too_large=too_large)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise unreadable(
            f"{what} {shorten(str(path), 120)} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
