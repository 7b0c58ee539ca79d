"""Downloads for `pull` into a hidden staging folder beside DIR, which only a complete, checked pull turns
into DIR (one rename). An interrupted download stays there for the next run to resume; the partial file is
never trusted: every file is checked whole, and a resumed file that fails is fetched again from its start.

The staging folder is written only through file descriptors: the folder itself, `files` and every file in them
are opened relative to their parent's descriptor without following a link (O_NOFOLLOW), so a link put in their
place, before or during a run, is never written through. A staging folder packager did not make (another user's,
a link, a file, one holding anything but `lock`, `files` and `out`), or one whose entries are not what a pull
leaves (a link, a FIFO or a folder where a file belongs, a file with a second hard link, another user's file), is
refused and left as it is; the folders a pull uses are made readable and writable by their owner only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

from ..errors import (
    HubVerificationFailed,
    shorten,
)
from .client import WHOLE_ATTEMPTS, Hub, status_of, with_retries
from .staging import Staging, write_all

BAR_FROM = 1 << 20  # files from this size get a byte progress bar (when there is a terminal to draw it on)

# (file name, total bytes, bytes already there) -> a context giving the function told of each chunk's size.
Meter = Callable[[str, int, int], AbstractContextManager[Callable[[int], object]]]


def download(
    hub: Hub,
    stage: Staging,
    repo_id: str,
    commit: str,
    name: str,
    size: int,
    fresh: bool = False,
    timeout: float = 30.0,
    progress: Callable[[str], None] = lambda _: None,
    meter: Meter | None = None,
) -> Path:
    """`name` at `commit` into the staging folder through huggingface_hub's HTTP session, resuming what an
    interrupted run (or a dropped connection) left in NAME.part unless `fresh`. The caller checks it whole."""
    part = f"{name}.part"
    if fresh:
        stage.unlink(name)
        stage.unlink(part)
    elif (done := stage.stat(name)) is not None and done.st_size != size:
        stage.unlink(name)  # finished against another commit: not even the right size
    if stage.stat(name) is not None:
        return stage.path(name)  # finished by an interrupted earlier run: checked whole like any other
    bar = meter if meter is not None and size >= BAR_FROM else None
    if bar is None:
        have = stage.stat(part)
        progress(f"downloading {name}" + (f" (resuming after {have.st_size:,} bytes)" if have else ""))

    def retrying(failure: BaseException, attempt: int, attempts: int, wait: float) -> None:
        progress(f"{name}: {_failure(failure)}; retrying in {wait:g} s (attempt {attempt} of {attempts})")

    with_retries(
        hub,
        f"downloading {name} of {repo_id}@{commit[:12]}",
        lambda: _get(hub, stage, repo_id, commit, name, size, timeout, bar),
        attempts=WHOLE_ATTEMPTS,
        on_retry=retrying,
    )
    stage.rename(part, name)
    return stage.path(name)


def _failure(exc: BaseException) -> str:
    """What went wrong with one attempt, in a few words."""
    if isinstance(exc, (Stalled, CutShort)):
        return str(exc)
    status = status_of(exc)
    return f"the Hub answered {status}" if status is not None else shorten(f"{type(exc).__name__}: {exc}", 120)


class Stalled(ConnectionError):
    """No data for the timeout: a transient failure, retried from where it stopped."""


class CutShort(ConnectionError):
    """The connection ended before the whole file came: a transient failure, retried from where it stopped."""


def _get(
    hub: Hub, stage: Staging, repo_id: str, commit: str, name: str, size: int, timeout: float, meter: Meter | None
) -> None:
    import httpx2
    from huggingface_hub import hf_hub_url
    from huggingface_hub.utils import build_hf_headers, get_session, hf_raise_for_status

    part = f"{name}.part"
    found = stage.stat(part)
    have = found.st_size if found is not None else 0
    if have > size:
        stage.unlink(part)
        have = 0
    if have == size:
        return
    headers = build_hf_headers(token=hub.token)
    if have:
        headers["Range"] = f"bytes={have}-"
    url = hf_hub_url(repo_id, name, revision=commit, endpoint=hub.endpoint)
    with get_session().stream("GET", url, headers=headers, timeout=timeout, follow_redirects=True) as response:
        if response.status_code >= 400:
            response.read()
            hf_raise_for_status(response)
        resumed = response.status_code == 206  # a 200 is the whole file: start over
        written = have if resumed else 0
        sink = stage.open_part(part, append=resumed, have=have)
        try:
            with meter(name, size, written) if meter is not None else nullcontext(None) as tick:
                for chunk in response.iter_bytes():
                    written += len(chunk)
                    if written > size:
                        raise HubVerificationFailed(f"{name}: the Hub sends more than the {size:,} bytes it lists")
                    write_all(sink, chunk, stage, name)
                    if tick is not None:
                        tick(len(chunk))
        except httpx2.TimeoutException:
            raise Stalled(f"no data for {timeout:g} s after {written:,} of {size:,} bytes") from None
        finally:
            os.close(sink)
    if written < size:
        raise CutShort(f"the connection ended after {written:,} of {size:,} bytes")


@contextmanager
def terminal_bar(name: str, total: int, initial: int) -> Iterator[Callable[[int], object]]:
    """A tqdm byte progress bar on stderr (a terminal), as huggingface_hub draws its own."""
    from tqdm import tqdm

    try:
        sized = min(os.get_terminal_size(sys.stderr.fileno())) > 0
    except OSError:
        sized = False
    # A terminal that reports no size (0 x 0: some containers' ptys) would get no bar at all: 80 x 24 then.
    shape = {"dynamic_ncols": True} if sized else {"ncols": 80, "nrows": 24}
    with tqdm(
        total=total,
        initial=initial,
        desc=name,
        unit="B",
        unit_scale=True,
        unit_divisor=1024,
        file=sys.stderr,
        leave=True,
        **shape,
    ) as bar:
        yield bar.update
