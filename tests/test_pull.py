"""`packager pull` with the real huggingface_hub client against the local Hub: a signed release pulls, and
every tampered, foreign, unsigned or too-new release is refused naming the file, leaving nothing in DIR."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from packager.bundle.checksum import write_manifest
from packager.bundle.kinds import APP_FILES, MANIFEST
from tests.localhub import WRITE_TOKEN, LocalHub, hub, online, ready
from tests.localhub import upload as _upload
from tests.signkeys import Keys, keys

REPO = "me/draft"


def _sign(hub: LocalHub, bundle: Path, key: Path) -> None:
    result = hub.cli("sign", str(bundle), "--key", str(key))
    assert result.returncode == 0, result.stderr


@pytest.fixture()
def signed(hub: LocalHub, ready: Path, keys: Keys) -> Path:
    """`ready`, signed with the publisher's key and released as v1."""
    _sign(hub, ready, keys.private)
    result = _upload(hub, ready, REPO, "--tag", "v1")
    assert result.returncode == 0, result.stderr
    return ready


def pull(hub: LocalHub, target: str, dest: Path, *args: str):  # type: ignore[no-untyped-def]
    return hub.cli("pull", target, str(dest), "--quiet", *args, token=None)


# Under a 4 GB address-space cap: a link or device in the staging folder must not make a pull read or write forever.
CAP = ("bash", "-c", 'ulimit -v 4000000; exec "$0" "$@"')


def capped(hub: LocalHub, *args: str, timeout: int = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CAP, sys.executable, "-m", "packager.cli", *args],
        capture_output=True,
        text=True,
        env=hub.env(token=None),
        timeout=timeout,
    )


def refused(result, code: int, dest: Path, *words: str) -> None:  # type: ignore[no-untyped-def]
    assert result.returncode == code, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for word in words:
        assert word in lines[0], lines[0]
    assert not dest.exists(), sorted(dest.iterdir())
    assert not (dest.parent / f".{dest.name}.pull").exists()  # no staging left either


def commit_files(hub: LocalHub, files: dict[str, bytes], revision: str = "main") -> None:
    """Someone with write access commits these files straight to the Hub (no packager involved; needs `online`)."""
    from huggingface_hub import CommitOperationAdd, HfApi

    HfApi(endpoint=hub.url, token=WRITE_TOKEN).create_commit(
        REPO,
        operations=[CommitOperationAdd(path_in_repo=n, path_or_fileobj=d) for n, d in files.items()],
        commit_message="tamper",
        revision=revision,
    )


def flipped(path: Path, at: int = 4000) -> bytes:
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    return bytes(data)


def test_a_signed_release_pulls_the_app_files_verified(hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path) -> None:
    dest = tmp_path / "app" / "draft"
    dest.parent.mkdir()
    result = pull(hub, f"{REPO}@v1", dest, "--public-key", str(keys.public), "--require-signature", "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert sorted(data["files"]) == sorted([*APP_FILES, MANIFEST]) and data["signer"] and data["signed"]
    assert sorted(p.name for p in dest.iterdir()) == sorted([*APP_FILES, MANIFEST])
    for name in APP_FILES:
        assert (dest / name).read_bytes() == (signed / name).read_bytes(), name
    assert sorted(p.name for p in dest.parent.iterdir()) == ["draft"]  # the staging folder is gone


def test_a_full_pull_is_the_whole_release_and_verifies_again_offline(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path
) -> None:
    dest = tmp_path / "all"
    result = pull(hub, f"{REPO}@v1", dest, "--files", "all", "--public-key", str(keys.public))
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in dest.iterdir()) == sorted(p.name for p in signed.iterdir())
    again = hub.cli("verify-signature", str(dest), "--public-key", str(keys.public))
    assert again.returncode == 0, again.stderr
    assert subprocess.run(["xxhsum", "-c", MANIFEST], cwd=dest, capture_output=True).returncode == 0


def test_a_default_pull_validates_and_checks_with_xxhsum_as_the_card_says(
    hub: LocalHub, signed: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "app"
    assert pull(hub, f"{REPO}@v1", dest).returncode == 0
    lines = (dest / MANIFEST).read_text().splitlines()
    assert lines == [
        line
        for line in (signed / MANIFEST).read_text().splitlines()
        if line[line.index("(") + 1 : line.index(")")] in APP_FILES
    ]
    checked = subprocess.run(["xxhsum", "-c", MANIFEST], cwd=dest, capture_output=True, text=True)
    assert checked.returncode == 0 and checked.stdout.count(": OK") == len(APP_FILES), checked.stdout + checked.stderr
    result = hub.cli("validate", str(dest), "--strict")
    assert result.returncode == 0 and "the app files of a draft bundle" in result.stdout, result.stdout


def test_a_file_and_its_manifest_line_replaced_together_is_refused_naming_the_file(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path, online: None
) -> None:
    (signed / "llm.mnn.weight").write_bytes(flipped(signed / "llm.mnn.weight"))
    write_manifest(signed)  # the manifest now agrees with the replaced weights: only the signature can tell
    commit_files(hub, {n: (signed / n).read_bytes() for n in ("llm.mnn.weight", "checksums.xxh128")})
    dest = tmp_path / "draft"
    refused(
        pull(hub, REPO, dest, "--public-key", str(keys.public)),
        78,
        dest,
        "llm.mnn.weight",
        "differs from what model.sig signed",
    )


def test_a_file_replaced_behind_the_manifest_is_refused_even_unsigned(
    hub: LocalHub, ready: Path, tmp_path: Path, online: None
) -> None:
    assert _upload(hub, ready, REPO).returncode == 0
    commit_files(hub, {"tokenizer.txt": flipped(ready / "tokenizer.txt", 10)})
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest), 78, dest, "tokenizer.txt", "does not match its checksums.xxh128 line")


def test_another_publishers_key_is_refused(hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path) -> None:
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--public-key", str(keys.other_public)), 77, dest, "is not signed by the key")


def test_an_unsigned_release_is_refused_with_require_signature(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path
) -> None:
    assert _upload(hub, ready, REPO).returncode == 0
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--public-key", str(keys.public), "--require-signature"), 77, dest, "is not signed")


def test_an_unsigned_release_pulls_without_trust_options_saying_so(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    assert _upload(hub, ready, REPO).returncode == 0
    result = pull(hub, REPO, tmp_path / "draft")
    assert result.returncode == 0, result.stderr
    assert "unsigned: only the manifest was checked" in result.stdout


def test_a_signature_over_another_revision_is_refused(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path, online: None
) -> None:
    old_signature = (signed / "model.sig").read_bytes()
    (signed / "model.sig").unlink()
    (signed / "llm.mnn.weight").write_bytes(flipped(signed / "llm.mnn.weight"))
    write_manifest(signed)
    assert _upload(hub, signed, REPO, "--tag", "v2").returncode == 0  # v2, unsigned: upload sends no stale model.sig
    commit_files(hub, {"model.sig": old_signature})  # v1's signature carried over to v2's files
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--public-key", str(keys.public)), 78, dest, "llm.mnn.weight")
    assert pull(hub, f"{REPO}@v1", dest, "--public-key", str(keys.public)).returncode == 0


def test_a_bundle_needing_a_newer_engine_is_refused(hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path) -> None:
    declared = json.loads((signed / "runtime_config.json").read_text())["min_mnn_engine"]["version"]
    dest = tmp_path / "draft"
    refused(
        pull(hub, REPO, dest, "--engine", "0.0.1", "--public-key", str(keys.public)),
        79,
        dest,
        f"needs MNN >= {declared}",
        "--engine 0.0.1",
    )
    ok = pull(hub, REPO, dest, "--engine", declared, "--public-key", str(keys.public), "--json")
    assert ok.returncode == 0, ok.stderr
    assert json.loads(ok.stdout)["min_engine"] == declared
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [*APP_FILES, MANIFEST]
    )  # runtime_config.json checked, not kept


def test_a_resumed_partial_file_is_not_trusted(hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path) -> None:
    dest = tmp_path / "draft"
    staging = tmp_path / ".draft.pull" / "files"
    staging.mkdir(parents=True)
    size = (signed / "llm.mnn.weight").stat().st_size
    (staging / "llm.mnn.weight.part").write_bytes(b"\x00" * (size // 2))  # an interrupted download gone wrong
    result = hub.cli("pull", REPO, str(dest), "--public-key", str(keys.public), token=None)
    assert result.returncode == 0, result.stderr
    assert f"llm.mnn.weight (resuming after {size // 2:,} bytes)" in result.stderr
    assert "llm.mnn.weight: the file resumed from an earlier run is not right" in result.stderr
    assert (dest / "llm.mnn.weight").read_bytes() == (signed / "llm.mnn.weight").read_bytes()
    assert not staging.parent.exists()


def test_an_interrupted_download_resumes_where_it_stopped(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path
) -> None:
    dest = tmp_path / "draft"
    staging = tmp_path / ".draft.pull" / "files"
    staging.mkdir(parents=True)
    weights = (signed / "llm.mnn.weight").read_bytes()
    (staging / "llm.mnn.weight.part").write_bytes(weights[: len(weights) // 3])  # the right first third
    result = hub.cli("pull", REPO, str(dest), "--public-key", str(keys.public), token=None)
    assert result.returncode == 0, result.stderr
    assert f"resuming after {len(weights) // 3:,} bytes" in result.stderr and "not right" not in result.stderr
    assert (dest / "llm.mnn.weight").read_bytes() == weights


@pytest.mark.parametrize(
    "args, code, words",
    [
        (("--engine", "3.x"), 19, ("--engine",)),
        (("--require-signature",), 19, ("needs whom to trust",)),
        (("--identity", "someone"), 19, ("go together",)),
    ],
)
def test_bad_options_are_refused_before_the_hub_is_asked(
    hub: LocalHub, tmp_path: Path, args: tuple[str, ...], code: int, words: tuple[str, ...]
) -> None:
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, *args), code, dest, *words)


def test_a_folder_that_is_not_empty_is_refused_and_kept(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    dest = tmp_path / "draft"
    dest.mkdir()
    (dest / "mine.txt").write_text("keep me")
    result = pull(hub, REPO, dest)
    assert result.returncode == 18 and "is not empty" in result.stderr
    assert [p.name for p in dest.iterdir()] == ["mine.txt"]


def test_a_hidden_folder_of_the_staging_name_that_pull_did_not_make_is_refused_and_kept(
    hub: LocalHub, signed: Path, tmp_path: Path
) -> None:
    dest = tmp_path / "draft"
    mine = tmp_path / ".draft.pull"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    result = pull(hub, REPO, dest)
    assert result.returncode == 18 and "is not packager's staging folder" in result.stderr
    assert (mine / "notes.txt").read_text() == "keep me" and not dest.exists()


def test_an_empty_folder_is_filled(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    dest = tmp_path / "draft"
    dest.mkdir()
    assert pull(hub, REPO, dest).returncode == 0
    assert sorted(p.name for p in dest.iterdir()) == sorted([*APP_FILES, MANIFEST])


def test_a_huge_remote_signature_is_refused_without_downloading_it(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path, online: None
) -> None:
    commit_files(hub, {"model.sig": b" " * (1024 * 1024 + 10)})
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--public-key", str(keys.public)), 73, dest, "more than any signature")


def test_a_refused_pull_removes_the_folders_it_made_above_dir(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path
) -> None:
    dest = tmp_path / "new" / "deeper" / "draft"
    result = pull(hub, REPO, dest, "--public-key", str(keys.other_public))
    assert result.returncode == 77
    assert not (tmp_path / "new").exists()


def test_a_second_pull_into_the_same_dir_is_refused_while_the_first_runs(
    hub: LocalHub, signed: Path, tmp_path: Path
) -> None:
    import fcntl
    import os

    dest = tmp_path / "draft"
    staging = tmp_path / ".draft.pull"
    staging.mkdir()
    lock = os.open(staging / "lock", os.O_CREAT | os.O_RDWR)
    fcntl.flock(lock, fcntl.LOCK_EX)  # as the first pull holds it
    try:
        result = pull(hub, REPO, dest)
    finally:
        os.close(lock)
    assert result.returncode == 44 and "another packager pull" in result.stderr
    assert staging.is_dir() and not dest.exists()  # the first pull's staging is left to it


def test_a_full_pull_refuses_a_file_the_manifest_does_not_list(
    hub: LocalHub, signed: Path, tmp_path: Path, online: None
) -> None:
    commit_files(hub, {"notes.txt": b"not part of the release"})
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--files", "all"), 78, dest, "notes.txt", "does not list")


def test_a_full_pull_refuses_a_path_outside_the_flat_bundle(
    hub: LocalHub, signed: Path, tmp_path: Path, online: None
) -> None:
    commit_files(hub, {"sub/llm.mnn": b"elsewhere"})
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--files", "all"), 78, dest, "sub/llm.mnn", "no file of a flat bundle")


def test_a_gated_release_refuses_a_pull_without_access_and_leaves_nothing(
    hub: LocalHub, ready: Path, keys: Keys, tmp_path: Path
) -> None:
    _sign(hub, ready, keys.private)
    assert _upload(hub, ready, REPO, "--gated", "manual").returncode == 0
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest, "--public-key", str(keys.public)), 68, dest, "gated")
    owner = hub.cli("pull", REPO, str(dest), "--public-key", str(keys.public), "--quiet")  # the owner's token
    assert owner.returncode == 0, owner.stderr


def test_files_left_by_a_run_against_another_commit_are_not_trusted(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path
) -> None:
    dest = tmp_path / "draft"
    staging = tmp_path / ".draft.pull" / "files"
    staging.mkdir(parents=True)
    for name in ("model.sig", "checksums.xxh128", "tokenizer.txt", "llm.mnn"):
        (staging / name).write_bytes(b"from an older release")  # finished files of an interrupted earlier run
    weights = (signed / "llm.mnn.weight").read_bytes()
    (staging / "llm.mnn.weight").write_bytes(bytes(len(weights)))  # the right size, the wrong bytes
    result = hub.cli("pull", REPO, str(dest), "--public-key", str(keys.public), token=None)
    assert result.returncode == 0, result.stderr
    for name in ("tokenizer.txt", "llm.mnn", "llm.mnn.weight"):
        assert (dest / name).read_bytes() == (signed / name).read_bytes(), name


# -- issue 30: a staging folder pull did not make is refused untouched, never written through --------------------------
def _plant(case: str, staging: Path, victim: Path, victims: Path) -> None:
    """What someone (or something) left at the staging folder's name before the pull."""
    files = staging / "files"
    if case == "the staging folder a link":
        staging.symlink_to(victims, target_is_directory=True)
        return
    if case == "files a link":
        staging.mkdir()
        (staging / "files").symlink_to(victims, target_is_directory=True)
        return
    if case == "the lock a link":
        staging.mkdir()
        (staging / "lock").symlink_to(victims.parent / "made-by-pull")  # dangling: O_CREAT would make it
        return
    if case == "out a link":
        staging.mkdir()
        (staging / "out").symlink_to(victims, target_is_directory=True)
        return
    if case == "another user's":
        files.mkdir(parents=True)
        os.chown(files, 4321, 4321)
        os.chown(staging, 4321, 4321)
        return
    files.mkdir(parents=True)
    (staging / "lock").touch()
    target = {
        "weights .part a link": "llm.mnn.weight.part",
        "tokenizer .part a link": "tokenizer.txt.part",
        "a finished file a link": "llm.mnn",
        "a hard link": "llm.mnn.weight.part",
        "a FIFO": "llm.mnn.weight.part",
        "a folder": "llm.mnn.weight.part",
        "a link to /dev/zero": "llm.mnn.weight.part",
    }[case]
    if case == "a link to /dev/zero":
        (files / target).symlink_to("/dev/zero")
    elif case == "a hard link":
        os.link(victim, files / target)
    elif case == "a FIFO":
        os.mkfifo(files / target)
    elif case == "a folder":
        (files / target).mkdir()
        (files / target / "keep.txt").write_text("keep me")
    else:
        (files / target).symlink_to(victim)


def _tree(path: Path) -> dict[str, tuple[int, int]]:
    """Every entry at and under `path`, links not followed: its mode and size (to see that nothing changed)."""

    def fact(entry: Path) -> tuple[int, int]:
        info = os.lstat(entry)
        return info.st_mode, 0 if stat.S_ISDIR(info.st_mode) else info.st_size

    found = {".": fact(path)}
    if path.is_dir() and not path.is_symlink():
        for folder, dirs, names in os.walk(path):
            for name in dirs + names:
                found[str(Path(folder, name).relative_to(path))] = fact(Path(folder, name))
    return found


@pytest.mark.parametrize(
    "case",
    [
        "weights .part a link",
        "tokenizer .part a link",
        "a finished file a link",
        "a link to /dev/zero",
        "a hard link",
        "a FIFO",
        "a folder",
        "files a link",
        "the lock a link",
        "out a link",
        "the staging folder a link",
        "another user's",
    ],
)
def test_a_staging_folder_pull_did_not_make_is_refused_untouched_never_written_through(
    hub: LocalHub, signed: Path, tmp_path: Path, case: str
) -> None:
    if case == "another user's" and os.geteuid() != 0:
        pytest.skip("giving a folder to another user needs root")
    dest, staging = tmp_path / "z", tmp_path / ".z.pull"
    victim, victims = tmp_path / "victim.txt", tmp_path / "victims"
    victim.write_bytes(b"data\n")
    victims.mkdir()
    (victims / "keep.txt").write_text("keep me")
    _plant(case, staging, victim, victims)
    before = _tree(staging), _tree(victims)
    result = capped(hub, "pull", f"{REPO}@v1", str(dest), "--quiet")
    assert result.returncode == 18, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not packager's staging folder" in lines[0], result.stderr
    assert "move it aside" in lines[0]
    assert victim.read_bytes() == b"data\n" and (_tree(staging), _tree(victims)) == before  # left as it was
    assert not (tmp_path / "made-by-pull").exists() and not dest.exists()


@pytest.mark.parametrize("name", ["llm.mnn", "llm.mnn.weight.part", "lock"])
def test_a_staged_file_of_another_user_is_refused_untouched(tmp_path: Path, name: str) -> None:
    """Its owner could rewrite it between the check and the rename that publishes it: the files' owners are
    checked, not only the folders'."""
    from packager.errors import OutputExists
    from packager.hub.fetch import Staging

    if os.geteuid() != 0:
        pytest.skip("giving a file to another user needs root")
    staging = tmp_path / ".z.pull"
    (staging / "files").mkdir(parents=True, mode=0o700)
    staged = staging / ("lock" if name == "lock" else f"files/{name}")
    staged.write_bytes(b"planted\n")
    os.chown(staged, 4242, 4242)
    before = _tree(staging)
    shown = "lock" if name == "lock" else f"files/{name}"
    with (
        pytest.raises(OutputExists, match=rf"{re.escape(shown)} belongs to another user \(uid 4242\)"),
        Staging(tmp_path / "z"),
    ):
        pass
    assert _tree(staging) == before and os.stat(staged).st_uid == 4242 and not (tmp_path / "z").exists()


def test_a_staging_folder_a_pull_made_is_private_to_its_user(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    hub.faults({"method": "GET", "path": "llm.mnn.weight", "status": 503, "times": 10})  # exit 40: kept to resume
    dest = tmp_path / "z"
    result = pull(hub, REPO, dest)
    assert result.returncode == 40, result.stderr
    assert "rerun the same pull: it resumes from" in result.stderr and "not sent again" not in result.stderr
    for folder in (tmp_path / ".z.pull", tmp_path / ".z.pull" / "files"):
        assert stat.S_IMODE(folder.stat().st_mode) == 0o700, folder
    hub.faults()
    assert pull(hub, REPO, dest).returncode == 0 and oct(stat.S_IMODE(dest.stat().st_mode)) != "0o700"


# -- issue 30: the other pull rows ------------------------------------------------------------------------------------
def test_a_full_disk_is_a_file_system_error_with_a_pull_hint_and_leaves_nothing(
    hub: LocalHub, signed: Path, small_disk: Path
) -> None:
    dest = small_disk / "draft"
    result = pull(hub, REPO, dest)
    refused(result, 25, dest, "No space left on device", "llm.mnn.weight", "pull again")
    assert "rerun the same command" not in result.stderr and list(small_disk.iterdir()) == []


def test_an_interrupted_pull_says_it_keeps_what_it_downloaded_to_resume(
    hub: LocalHub, signed: Path, tmp_path: Path
) -> None:
    hub.faults({"method": "GET", "path": "llm.mnn.weight", "stall_after_bytes": 1000, "times": 1})
    dest = tmp_path / "draft"
    process = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", "pull", REPO, str(dest)],
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=hub.env(token=None),
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    assert process.stderr is not None
    for line in process.stderr:
        if "downloading llm.mnn.weight" in line:
            break  # inside the staging folder, its weights stalled by the Hub
    process.send_signal(signal.SIGINT)
    _, rest = process.communicate(timeout=60)
    assert process.returncode == 130, rest
    last = rest.strip().splitlines()[-1]
    assert last.startswith("packager: interrupted; nothing was written to") and "nothing was left" not in last
    assert f"kept in {tmp_path / '.draft.pull'}" in last and "the same pull resumes it" in last
    assert (tmp_path / ".draft.pull" / "files").is_dir() and not dest.exists()


def test_a_bare_at_is_refused_and_a_long_revision_is_shown_cut(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    dest = tmp_path / "draft"
    refused(pull(hub, f"{REPO}@", dest), 48, dest, f"{REPO}@: the revision after @ is empty")
    bare = hub.cli("verify-remote", f"{REPO}@")
    assert bare.returncode == 48 and "the revision after @ is empty" in bare.stderr, bare.stdout + bare.stderr
    long = "a" * 300
    for result in (pull(hub, f"{REPO}@{long}", dest), hub.cli("verify-remote", f"{REPO}@{long}")):
        assert result.returncode == 43 and result.stderr.count("\n") == 1, result.stderr
        assert "a" * 201 not in result.stderr and "(100 more characters)" in result.stderr
        assert "creates the repo on upload" not in result.stderr  # upload's hint, not a reader's
    assert not dest.exists()


def test_a_dir_through_a_folder_that_does_not_exist_leaves_no_folder_behind(
    hub: LocalHub, signed: Path, keys: Keys, tmp_path: Path
) -> None:
    through = tmp_path / "new" / ".." / "draft"
    assert pull(hub, REPO, through, "--public-key", str(keys.other_public)).returncode == 77
    assert not (tmp_path / "new").exists() and not (tmp_path / "draft").exists()
    result = pull(hub, REPO, through, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["dir"] == str(tmp_path.resolve() / "draft")
    assert not (tmp_path / "new").exists() and sorted(p.name for p in (tmp_path / "draft").iterdir()) == sorted(
        [*APP_FILES, MANIFEST]
    )


def test_pull_errors_hint_at_what_to_do_for_a_pull(hub: LocalHub, ready: Path, tmp_path: Path) -> None:
    assert _upload(hub, ready, "me/secret", "--private").returncode == 0
    dest = tmp_path / "draft"
    wrong = hub.cli("pull", "me/secret", str(dest), "--quiet", token="hf_wrong_token_SECRET")
    refused(wrong, 41, dest, "rejected the credentials (401)", "log in again")
    assert "write access" not in wrong.stderr
    missing = pull(hub, "me/nothing-here", dest)
    refused(missing, 43, dest, "(404)", "check the repo id and the revision")
    assert "upload" not in missing.stderr


def test_a_manifest_larger_than_any_bundle_s_is_refused_alike_by_pull_and_verify_remote(
    hub: LocalHub, signed: Path, tmp_path: Path, online: None
) -> None:
    lines = "".join(f"XXH128 (file-{i:07d}.bin) = {'0' * 32}\n" for i in range(40_000))  # 2 MB, 40,000 files
    commit_files(hub, {"checksums.xxh128": lines.encode()})
    dest = tmp_path / "draft"
    refused(pull(hub, REPO, dest), 26, dest, "checksums.xxh128", "more than any bundle's manifest")
    check = hub.cli("verify-remote", REPO)
    assert check.returncode == 26 and check.stdout == "", check.stdout[-300:] + check.stderr
    assert check.stderr.count("\n") == 1 and "more than any bundle's manifest" in check.stderr


def test_a_stalled_download_is_retried_saying_so_in_one_line(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    hub.faults({"method": "GET", "path": "llm.mnn.weight", "stall_after_bytes": 100_000, "times": 1})
    dest = tmp_path / "draft"
    result = hub.cli("pull", REPO, str(dest), "--timeout", "1", token=None)
    assert result.returncode == 0, result.stderr
    said = [line for line in result.stderr.splitlines() if "retrying" in line]
    assert len(said) == 1 and "llm.mnn.weight: no data for 1 s after 100,000 of" in said[0], result.stderr
    assert "(attempt 2 of 4)" in said[0]
    assert (dest / "llm.mnn.weight").read_bytes() == (signed / "llm.mnn.weight").read_bytes()


def _on_a_terminal(hub: LocalHub, *args: str) -> tuple[int, str]:
    """The real command with its stderr on a pseudo-terminal (as in a shell): exit code and what it drew."""
    import pty
    import threading

    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "packager.cli", *args],
        stdout=subprocess.DEVNULL,
        stderr=follower,
        env=hub.env(token=None),
    )
    os.close(follower)
    drawn: list[bytes] = []

    def drain() -> None:
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the command ended and closed the terminal
                return
            if not chunk:
                return
            drawn.append(chunk)

    reader = threading.Thread(target=drain)
    reader.start()
    process.wait(timeout=120)
    reader.join(timeout=30)
    os.close(leader)
    return process.returncode, b"".join(drawn).decode("utf-8", errors="replace")


def test_a_terminal_gets_a_byte_progress_bar_for_each_large_file(hub: LocalHub, signed: Path, tmp_path: Path) -> None:
    code, drawn = _on_a_terminal(hub, "pull", REPO, str(tmp_path / "draft"))
    assert code == 0, drawn
    weights = [line for line in drawn.replace("\r", "\n").splitlines() if line.startswith("llm.mnn.weight:")]
    assert weights and "100%" in weights[-1] and "21.5M/21.5M" in weights[-1], drawn
    assert any(line.startswith("tokenizer.txt:") for line in drawn.replace("\r", "\n").splitlines()), drawn
    assert "downloading llm_config.json" in drawn  # a small file: its stage line
    quiet, nothing = _on_a_terminal(hub, "pull", REPO, str(tmp_path / "again"), "--quiet")
    assert quiet == 0 and nothing == ""
