"""Render the release repository's files from templates/init/ and write them without overwriting anything."""

from __future__ import annotations

import json
import os
import re
import secrets
import unicodedata
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from ... import DISTRIBUTION, __version__, resources
from ...card.render import BASE_TAGS, DEVICE_TAGS
from ...errors import InitFileExists, InitTargetRefused, InvalidOption, from_os_error, printable, shorten
from ...spec import model as spec
from .facts import Facts, gather

# Template (under templates/init/) -> the file it becomes, relative to DIR.
FILES = {
    "release.toml.j2": "release.toml",
    "Makefile.j2": "Makefile",
    "pre-commit-config.yaml.j2": ".pre-commit-config.yaml",
    "github-release.yml.j2": ".github/workflows/release.yml",
    "gitlab-ci.yml.j2": ".gitlab-ci.yml",
}
# Written only where the folder has none: a repository's own .gitignore is the user's, never replaced.
OPTIONAL_FILES = {"gitignore.j2": ".gitignore"}
TODO_REPO = "TODO: namespace/name of the Hub repo, e.g. your-name/{model}-draft-MNN"
TODO_BASE = "TODO: the Hub id of the model the draft was trained from, e.g. ORG/MODEL"
TODO_SOURCE = (
    "TODO: where CI installs packager from: mnn-packager[convert] @ git+https://HOST/OWNER/packager@COMMIT "
    "(packager init --packager-source)"
)
# A commit id: the only git reference nobody can move (a tag or branch can be pointed at other code).
_COMMIT = re.compile(r"^(?:[0-9a-f]{40}|[0-9a-f]{64})$")


@dataclass(frozen=True)
class InitRequest:
    folder: Path
    checkpoint: Path | None = None
    adapter: Path | None = None
    repo_id: str | None = None
    hook_repo: str | None = None  # else where packager was installed from (pip's direct_url.json), if a git URL
    hook_rev: str | None = None
    packager_source: str | None = None  # git+URL@COMMIT or a wheel inside the folder: what CI installs
    matrix: bool = False  # the GitHub workflow for a [matrix] spec (plan, chunked job matrices, gather)


@dataclass(frozen=True)
class InitResult:
    folder: Path
    written: tuple[str, ...]
    facts: Facts | None
    todos: tuple[str, ...]  # the fields of release.toml left for a person to fill in
    kept: tuple[str, ...] = ()  # optional files the folder already had (left as they were)
    ci_source: str | None = None  # what the CI files install packager from; None: a TODO the CI jobs stop on


def init(request: InitRequest) -> InitResult:
    folder = request.folder
    _check_folder(folder, [p for p in (request.checkpoint, request.adapter) if p is not None])
    requirement, hook = _ci_sources(request)  # checked before the checkpoint is read
    _check_spec_paths(request)
    facts = gather(request.checkpoint, request.adapter) if request.checkpoint is not None else None
    context = _context(request, facts, requirement, hook)
    rendered = {target: render(name, context) for name, target in FILES.items()}
    if request.matrix:
        rendered[FILES["github-release.yml.j2"]] = render("github-matrix.yml.j2", context)
    existing = [target for target in rendered if os.path.lexists(folder / target)]
    if existing:
        raise InitFileExists(f"{shorten(str(folder), 120)} already has {', '.join(existing)}; nothing was written")
    kept = tuple(target for target in OPTIONAL_FILES.values() if os.path.lexists(folder / target))
    rendered |= {target: render(name, context) for name, target in OPTIONAL_FILES.items() if target not in kept}
    todos = placeholders(rendered["release.toml"])
    _write_all(folder, rendered)
    return InitResult(folder, tuple(rendered), facts, todos, kept, requirement)


def placeholders(text: str) -> tuple[str, ...]:
    """The fields of a spec still holding a TODO (the spec must otherwise pass: a test fills them in)."""
    return tuple(p.dotted for p in spec.problems(spec.parse(text)) if p.placeholder)


def _check_folder(folder: Path, inputs: list[Path]) -> None:
    real = Path(os.path.realpath(folder))
    if real.exists() and not real.is_dir():
        raise InitTargetRefused(
            f"{shorten(str(folder), 120)} is a file, not a folder",
            "name a new or existing folder for the release repository; init makes it if missing",
        )
    for path in inputs:
        source = Path(os.path.realpath(path))
        if real.is_relative_to(source):
            raise InitTargetRefused(
                f"{shorten(str(folder), 120)} {'is' if real == source else 'lies inside'} "
                f"{shorten(str(path), 120)}, an input of the release"
            )


def _check_spec_paths(request: InitRequest) -> None:
    """The checkpoint and the adapter as release.toml names them (relative to DIR) must be text TOML can hold: a
    name with bytes that are not UTF-8 cannot be written into the spec."""
    folder = Path(os.path.realpath(request.folder))
    for option, path in (("--checkpoint", request.checkpoint), ("--lora", request.adapter)):
        if path is not None and not _utf8(_relative(path, folder)):
            raise InvalidOption(
                f"{option} {shorten(str(path), 120)} is not UTF-8 text, which release.toml (TOML) cannot hold",
                "rename the folder (or a folder above it) to a UTF-8 name, then init again",
            )


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # surrogateescape's stand-ins of undecodable bytes
        return False
    return True


def _ci_sources(request: InitRequest) -> tuple[str | None, tuple[str | None, str | None]]:
    """The pip requirement CI installs packager by (None: unknown, a TODO) and the pre-commit hooks' repo and rev.
    --hook-repo and --hook-rev come together, by the rules of --packager-source (pinned_git); where pip installed
    packager from serves only when it passes them too (a file:// or localhost install is no source for CI)."""
    if (request.hook_repo is None) != (request.hook_rev is None):
        given, needed = (
            ("--hook-repo", "--hook-rev") if request.hook_repo is not None else ("--hook-rev", "--hook-repo")
        )
        raise InvalidOption(f"{given} needs {needed}", _HOOK_HINT)
    origin = _pinnable(installed_from())
    if request.hook_repo is not None and request.hook_rev is not None:
        hook: tuple[str | None, str | None] = pinned_git(
            request.hook_repo, request.hook_rev, "--hook-repo", "--hook-rev", _HOOK_HINT
        )
    else:
        hook = origin or (None, None)
    if request.packager_source is not None:
        return install_requirement(request.packager_source, Path(os.path.realpath(request.folder))), hook
    return (f"{DISTRIBUTION}[convert] @ git+{origin[0]}@{origin[1]}" if origin else None), hook


def _pinnable(origin: tuple[str, str] | None) -> tuple[str, str] | None:
    """The git URL and commit pip installed packager from, when CI could install from them too."""
    if origin is None:
        return None
    try:
        return pinned_git(*origin, "the git URL packager was installed from", "its commit", _SOURCE_HINT)
    except InvalidOption:
        return None


# A git source CI may install from: https, a real host name (or a routable address), an optional port, a path of
# plain segments. No credentials, query or fragment, no character a shell, YAML or pip would read otherwise.
_HOST_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_PATH_SEGMENT = re.compile(r"^[A-Za-z0-9._~+-]+$")


def pinned_git(url: str, commit: str, what: str, commit_what: str, hint: str) -> tuple[str, str]:
    """(url, commit) of a git repository at a full commit id (40 or 64 hex digits, said in lower case): the one
    rule for --packager-source git+URL@COMMIT and for --hook-repo with --hook-rev. InvalidOption names what (the
    URL's option) or commit_what (the commit's) is wrong, ending with `hint`."""
    shown = shorten(url, 120)
    if any(unicodedata.category(char)[0] in "CZ" for char in url + commit):
        raise InvalidOption(f"{what} {shown!r} holds spaces or control characters", hint)
    if not _COMMIT.match(commit.lower()):
        said = (
            f"{what} {shown} is not pinned to"
            if commit_what == what
            else f"{commit_what} {shorten(commit, 70)!r} is not"
        )
        raise InvalidOption(f"{said} a full commit id (40 hex digits; a branch or tag can be moved)", hint)
    scheme, sep, rest = url.partition("://")
    if not sep or scheme.lower() != "https":
        raise InvalidOption(f"{what} {shown} is not an https:// URL", hint)
    authority, slash, path = rest.partition("/")
    if "@" in authority or any(char in url for char in "#?%$`"):
        # pip drops what follows '#', CI systems expand $ and ${{ }}, and credentials would be committed
        raise InvalidOption(f"{what} {shown} holds #, ?, %, $, ` or credentials", hint)
    problem = _host_problem(authority)
    if problem is None and (not slash or not all(_path_segment(part) for part in path.split("/"))):
        problem = "has a path that is not plain /OWNER/NAME segments (letters, digits, . _ ~ + -)"
    if problem is not None:
        raise InvalidOption(f"{what} {shown} {problem}", hint)
    return url, commit.lower()


def _path_segment(part: str) -> bool:
    return bool(_PATH_SEGMENT.match(part)) and part not in (".", "..")


def _host_problem(authority: str) -> str | None:
    """Why HOST[:PORT] is no host CI can reach (None: it is one)."""
    import ipaddress

    host, colon, port = authority.rpartition(":") if ":" in authority else (authority, "", "")
    if colon and not (port.isascii() and port.isdigit() and 0 < int(port) < 65536):
        return f"names port {shorten(port, 20)!r}, not one from 1 to 65535"
    host = host.lower()
    if not host:
        return "names no host"
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        address = None
    if address is not None:
        unreachable = address.is_loopback or address.is_unspecified or address.is_link_local or address.is_multicast
        return "names an address CI cannot reach" if unreachable else None
    labels = host.removesuffix(".").split(".")
    if len(labels) < 2 or not all(_HOST_LABEL.match(label) for label in labels) or labels[-1].isdigit():
        return f"names {shorten(host, 60)!r}, not a host name such as github.com"
    if labels[-1] == "localhost":
        return "names this machine (localhost), which CI cannot reach"
    return None


def _context(
    request: InitRequest, facts: Facts | None, requirement: str | None, hook: tuple[str | None, str | None]
) -> dict[str, Any]:
    folder = Path(os.path.realpath(request.folder))
    return {
        "name": folder.name or str(folder),
        "packager_version": __version__,
        "facts": facts,
        "repo_id": request.repo_id or _todo_repo(facts),
        "base_model": facts.base_model if facts and facts.base_model else _todo_base(facts),
        "family": facts.family if facts else None,
        "tags": (*BASE_TAGS, *facts.family.tags, *DEVICE_TAGS) if facts else None,
        "base_named_by": facts.base_named_by if facts else None,
        "checkpoint": _relative(request.checkpoint, folder) if request.checkpoint else "TODO: the checkpoint folder",
        "lora": _relative(request.adapter, folder) if request.adapter else None,
        "hook_repo": hook[0],
        "hook_rev": hook[1],
        "pip_requirement": requirement or TODO_SOURCE,
    }


def _todo_repo(facts: Facts | None) -> str:
    """The repo_id placeholder, its example named after the checkpoint's base model (else its family's first)."""
    base = None if facts is None else facts.base_model or next(iter(facts.family.base_models), None)
    return TODO_REPO.format(model=base.rsplit("/", 1)[-1] if base else "MODEL")


def _todo_base(facts: Facts | None) -> str:
    """The base_model placeholder, its example one of the checkpoint's family's released models."""
    if facts is None or not facts.family.base_models:
        return TODO_BASE
    return f"TODO: the Hub id of the model the draft was trained from, e.g. {facts.family.base_models[0]}"


def install_requirement(source: str, folder: Path) -> str:
    """The pip requirement CI installs packager by: a git URL pinned to a commit, or a wheel inside `folder` (the
    checkout). Never a bare name: an index may serve anyone's package under it, into a job holding a write token."""
    shown = shorten(source, 120)
    if any(unicodedata.category(char)[0] in "CZ" for char in source):
        raise InvalidOption(f"--packager-source {shown!r} holds spaces or control characters", _SOURCE_HINT)
    if source.startswith("git+"):
        url, at, ref = source.removeprefix("git+").rpartition("@")
        if not at:
            url, ref = source, ""
        url, ref = pinned_git(url, ref, "--packager-source", "--packager-source", _SOURCE_HINT)
        return f"{DISTRIBUTION}[convert] @ git+{url}@{ref}"
    wheel = Path(os.path.realpath(source))
    if source.endswith(".whl") and any(char in source for char in "$`\"'\\[]"):
        raise InvalidOption(
            f"--packager-source {shown} holds $, `, a quote, a backslash or a bracket, which CI or pip would read "
            "otherwise",
            _SOURCE_HINT,
        )
    if source.endswith(".whl"):
        if not wheel.name.startswith(DISTRIBUTION.replace("-", "_") + "-"):
            raise InvalidOption(f"--packager-source {shown} is not a wheel of {DISTRIBUTION}", _SOURCE_HINT)
        if not wheel.is_relative_to(folder):
            raise InvalidOption(
                f"--packager-source {shown} is not inside {shorten(str(folder), 120)}",
                "CI installs from the checkout: put the wheel in the release repository",
            )
        if not wheel.is_file():
            raise InvalidOption(f"--packager-source {shown} does not exist", _SOURCE_HINT)
        return f"./{wheel.relative_to(folder).as_posix()}[convert]"
    raise InvalidOption(f"--packager-source {shown} is neither git+URL@COMMIT nor a .whl file", _SOURCE_HINT)


_HOOK_HINT = "give packager's https git URL (--hook-repo) and a full commit id of it (--hook-rev), or neither"
_SOURCE_HINT = (
    "give packager's git URL pinned to a commit (git+https://HOST/OWNER/packager@<40-hex commit>) or the "
    f"path of a {DISTRIBUTION.replace('-', '_')}-*.whl inside the release folder"
)


def _relative(path: Path, folder: Path) -> str:
    return os.path.relpath(os.path.realpath(path), folder)


def installed_from() -> tuple[str, str] | None:
    """(git URL, commit) when pip installed packager from git (PEP 610's direct_url.json), else None."""
    try:
        data = json.loads(metadata.distribution(DISTRIBUTION).read_text("direct_url.json") or "{}")
    except (metadata.PackageNotFoundError, ValueError):
        return None
    vcs = data.get("vcs_info") if isinstance(data, dict) else None
    if not isinstance(vcs, dict) or vcs.get("vcs") != "git" or not _COMMIT.match(str(vcs.get("commit_id", ""))):
        return None
    return str(data["url"]).removeprefix("git+"), str(vcs["commit_id"])


def render(name: str, context: dict[str, Any]) -> str:
    import jinja2

    # << >> and <% %>: the files are YAML with GitHub's ${{ }}, TOML with [[ ]], and Makefiles.
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,
        variable_start_string="<<",
        variable_end_string=">>",
        block_start_string="<%",
        block_end_string="%>",
        comment_start_string="<#",
        comment_end_string="#>",
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(toml=toml_string, yaml=yaml_string, comment=comment_text, num=lambda value: f"{value:g}")
    text = env.from_string(resources.template(f"init/{name}")).render(context)
    return text if text.endswith("\n") else text + "\n"


def toml_string(value: str) -> str:
    """A TOML basic string: quotes, backslashes and control characters escaped, the rest as it is."""
    out = []
    for char in str(value):
        if char in '"\\':
            out.append("\\" + char)
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\u{ord(char):04x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def comment_text(value: str) -> str:
    """Text safe inside a one-line comment of TOML, YAML or a Makefile: every control character and line or
    paragraph separator escaped (a newline in a folder name would otherwise start a line of code), a trailing
    backslash too (make continues a comment onto the next line)."""
    out = printable(value)
    return out + " " if out.endswith("\\") else out


def yaml_string(value: str) -> str:
    """A YAML double-quoted scalar (JSON's string syntax is a subset of it)."""
    return json.dumps(str(value))


def _write_all(folder: Path, files: dict[str, str]) -> None:
    """Each file written whole beside its place, then linked in: a file that appeared meanwhile (another init)
    is never replaced, and on any failure the files and folders this run made are removed again."""
    made: list[Path] = []
    try:
        for target, text in files.items():
            path = folder / target
            made += _make_parents(path.parent)
            _publish(path, text)
            made.append(path)
    except BaseException as exc:
        for path in reversed(made):
            try:
                path.rmdir() if path.is_dir() else path.unlink(missing_ok=True)
            except OSError:  # a folder another run has written into meanwhile stays, with its files
                pass
        if isinstance(exc, OSError):
            raise from_os_error(exc, "writing the release repository") from None
        raise


def _make_parents(folder: Path) -> list[Path]:
    missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _publish(path: Path, text: str) -> None:
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # the user's umask applies, as to any file
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.link(tmp, path)  # unlike a rename, fails if the name exists
    except FileExistsError:
        raise InitFileExists(
            f"{shorten(str(path), 120)} appeared while packager init was writing; nothing was written"
        ) from None
    finally:
        os.unlink(tmp)
