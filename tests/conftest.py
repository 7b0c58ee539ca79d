"""Session fixtures: tiny real Qwen3 checkpoints and the bundles the real converter makes from them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from tests import leftovers
from tests.models import build_eagle_head, build_lora, build_qwen3

# Nothing in the tests may reach a host other than 127.0.0.1 (the same guard is injected into the
# processes the hub tests start), nothing may reach a hub, and no real token may travel.
os.environ.setdefault("PACKAGER_NETGUARD_LOG", os.devnull)
sys.path.insert(0, str(Path(__file__).parent / "netguard"))
import sitecustomize as _netguard

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# MNN engines from PyPI for `engines check` tests: one folder reused by every test session of this user (an
# install is atomic and safe to share), never the user's own engine cache; set it to reuse another.
os.environ.setdefault("PACKAGER_ENGINES_DIR", str(Path(tempfile.gettempdir()) / f"packager-test-engines-{os.getuid()}"))
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("HF_TOKEN", None)


def pytest_configure(config: pytest.Config) -> None:
    """The streaming converter's graph cache: never the user's own during tests. Made here, not at import, so a
    helper process that imports from tests/ leaves no folder behind. Each test process adopts the orphans of what
    it starts (tests/leftovers.py); the controller of an xdist run collects what its workers found."""
    os.environ["PACKAGER_CACHE_DIR"] = tempfile.mkdtemp(prefix="packager-test-graph-cache-")
    if not hasattr(config, "workerinput"):
        os.environ["PACKAGER_TEST_LEFTOVERS"] = tempfile.mkdtemp(prefix="packager-test-leftovers-")
    leftovers.become_subreaper()


# The slow kinds, marked from what a test uses (its fixtures, or what its module imports), so that no test can
# forget its mark: `make test-fast` runs the rest (-m "not (converter or trained or hub or engines)").
_KINDS = {
    "converter": {
        "tiny_checkpoint",
        "lora_adapter",
        "target8",
        "head",
        "eagle_bundle",
        "bundle4",
        "bundle8",
        "lora_bundle8",
        "llama_checkpoint",
        "qwen25_checkpoint",
        "llama_bundle8",
    },
    "hub": {"hub", "online", "ready"},
}
_MODULE_KINDS = {
    "tests.trained": "trained",
    "tests.trained_eagle": "trained",
    "tests.models": "converter",
    "tests.families": "converter",
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        kinds = {kind for kind, names in _KINDS.items() if used & names}
        module = getattr(item, "module", None)
        imported = {getattr(value, "__module__", None) for value in vars(module).values()} if module else set()
        imported |= {getattr(value, "__name__", None) for value in vars(module).values()} if module else set()
        kinds |= {kind for name, kind in _MODULE_KINDS.items() if name in imported}
        if module is not None and module.__name__.endswith("test_engines"):
            kinds.add("engines")
        for kind in sorted(kinds):
            item.add_marker(kind)


def pytest_sessionfinish(session: pytest.Session) -> None:
    shutil.rmtree(os.environ["PACKAGER_CACHE_DIR"], ignore_errors=True)  # ~100 MB a session, never reused
    found = leftovers.kill_leftovers()  # every test and session fixture is done: nothing it started may live on
    record = Path(os.environ["PACKAGER_TEST_LEFTOVERS"])
    if found:
        (record / f"{os.getpid()}.txt").write_text("\n".join(found) + "\n", encoding="utf-8")
    if hasattr(session.config, "workerinput"):
        return
    lines = [line for f in sorted(record.glob("*.txt")) for line in f.read_text(encoding="utf-8").splitlines()]
    shutil.rmtree(record, ignore_errors=True)
    if lines:
        print("\nprocesses the suite started outlived their tests (killed now):", *lines, sep="\n  ", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_qwen3(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3")


@pytest.fixture(scope="session")
def lora_adapter(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_lora(tiny_checkpoint, tmp_path_factory.mktemp("lora") / "adapter")


def _convert(tmp_path_factory: pytest.TempPathFactory, name: str, checkpoint: Path, **options: object) -> ConvertResult:
    out = tmp_path_factory.mktemp(name) / "bundle"
    return convert(ConvertRequest(checkpoint=checkpoint, out=out, **options))  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def target8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An untied 8-layer tiny Qwen3: deep enough for an EAGLE-3 head (layers 2, 4, 5)."""
    return build_qwen3(tmp_path_factory.mktemp("target8") / "qwen3-8l", layers=8, seed=11, tie=False)


@pytest.fixture(scope="session")
def head(target8: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random EAGLE-3 head for target8 (SpecForge layout, draft vocabulary 2048)."""
    return build_eagle_head(target8, tmp_path_factory.mktemp("head") / "head", seed=12, draft_vocab=2048)


@pytest.fixture(scope="session")
def eagle_bundle(target8: Path, head: Path, tmp_path_factory: pytest.TempPathFactory) -> ConvertResult:
    """target8 with its head: a target+eagle bundle (tests copy it before changing anything)."""
    return _convert(tmp_path_factory, "eagle", target8, eagle=head)


@pytest.fixture(scope="session")
def bundle4(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ConvertResult:
    return _convert(tmp_path_factory, "b4", tiny_checkpoint)


@pytest.fixture(scope="session")
def bundle8(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ConvertResult:
    return _convert(tmp_path_factory, "b8", tiny_checkpoint, quant_bits=8)


@pytest.fixture(scope="session")
def lora_bundle8(tiny_checkpoint: Path, lora_adapter: Path, tmp_path_factory: pytest.TempPathFactory) -> ConvertResult:
    return _convert(tmp_path_factory, "bl8", tiny_checkpoint, adapter=lora_adapter, quant_bits=8)


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """The real `packager` command in its own process."""
    return subprocess.run(
        [*prefix, sys.executable, "-m", "packager.cli", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )


def start_cli(*args: str) -> subprocess.Popen[str]:
    """The real `packager` command started for a test that signals it, its stderr (progress) piped.

    SIGINT goes back to its default in the child: a shell starts a background job (a suite run from a script
    with `&`) with SIGINT ignored, the child inherits that, and Python then leaves it ignored, so the test's
    Ctrl-C would be lost for a reason that is not packager's."""
    import signal

    return subprocess.Popen(
        [sys.executable, "-m", "packager.cli", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 6 MB file system (tmpfs) that fills up: for the full-disk tests. Skipped where mounting needs a root
    this run does not have."""
    mount = tmp_path / "disk"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "tmpfs", str(mount)], capture_output=True)
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {made.stderr.decode().strip()}")
    yield mount
    subprocess.run(["umount", "-l", str(mount)], check=True)


@pytest.fixture(scope="session")
def llama_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Llama-3.2-shaped checkpoint with Meta's tokenizer and its LICENSE (tests/families.py)."""
    from tests.families import build_llama32

    return build_llama32(tmp_path_factory.mktemp("llama") / "tiny-llama32")


@pytest.fixture(scope="session")
def qwen25_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny Qwen2.5-shaped checkpoint (q/k/v biases) with the real Qwen tokenizer (tests/families.py)."""
    from tests.families import build_qwen25

    return build_qwen25(tmp_path_factory.mktemp("qwen25") / "tiny-qwen25")


@pytest.fixture(scope="session")
def llama_bundle8(llama_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> ConvertResult:
    """llama_checkpoint converted at 8 bits (tests copy it before changing anything)."""
    return _convert(tmp_path_factory, "llama8", llama_checkpoint, quant_bits=8)
