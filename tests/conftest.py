"""Session fixtures: tiny real Qwen3 checkpoints and the bundles the real converter makes from them."""

from __future__ import annotations

import importlib
import importlib.util
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from packager.convert.fence import launch
from packager.convert.pipeline import ConvertRequest, ConvertResult, convert
from tests import durations, leftovers, shared, warmcli
from tests.localhub import GUARD_CONVERTER, GUARD_PYTHONPATH
from tests.models import build_eagle_head, build_lora, build_qwen3

# Nothing in the tests may reach a host other than 127.0.0.1 (the same guard is injected into the
# processes the hub tests start), nothing may reach a hub, and no real token may travel.
os.environ.setdefault("PACKAGER_NETGUARD_LOG", os.devnull)
# Loaded by its path: a worker process started with tests/counting on PYTHONPATH has a `sitecustomize` already.
_guard_spec = importlib.util.spec_from_file_location(
    "packager_netguard", Path(__file__).parent / "netguard" / "sitecustomize.py"
)
assert _guard_spec is not None and _guard_spec.loader is not None
_netguard = importlib.util.module_from_spec(_guard_spec)
_guard_spec.loader.exec_module(_netguard)
_counts = importlib.import_module("packager_test_counts")  # on sys.path now (the guard put it there)

os.environ.setdefault("HF_HUB_OFFLINE", "1")
# MNN engines from PyPI for `engines check` tests: one folder reused by every test session of this user (an
# install is atomic and safe to share), never the user's own engine cache; set it to reuse another.
os.environ.setdefault("PACKAGER_ENGINES_DIR", str(Path(tempfile.gettempdir()) / f"packager-test-engines-{os.getuid()}"))
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.pop("HF_TOKEN", None)
_warm: tuple[subprocess.Popen[bytes], Path] | None = None
_warm_cli: tuple[list[subprocess.Popen[bytes]], Path] | None = None
_warm_guarded: list[tuple[subprocess.Popen[bytes], Path]] = []


def _selects(config: pytest.Config, *marks: str) -> bool:
    """Whether the session's -m expression lets through a test marked with one of `marks` alone."""
    from _pytest.mark.expression import Expression

    expression = config.getoption("markexpr", "")
    if not expression:
        return True
    compiled = Expression.compile(expression)
    return any(compiled.evaluate(lambda name, *_, mark=mark, **__: name == mark) for mark in marks)


def pytest_configure(config: pytest.Config) -> None:
    """The streaming converter's graph cache: never the user's own during tests. Made here, not at import, so a
    helper process that imports from tests/ leaves no folder behind. Each test process adopts the orphans of what
    it starts (tests/leftovers.py); the controller of an xdist run collects what its workers found."""
    if not hasattr(config, "workerinput"):  # the controller (or the only process): the workers inherit these
        os.environ["PACKAGER_CACHE_DIR"] = tempfile.mkdtemp(prefix="packager-test-graph-cache-")
        os.environ["PACKAGER_TEST_LEFTOVERS"] = tempfile.mkdtemp(prefix="packager-test-leftovers-")
        os.environ[shared.ROOT_VARIABLE] = tempfile.mkdtemp(prefix="packager-test-shared-")
        # Every Python process the session starts counts its conversions (tests/counting) into the shared folder.
        os.environ[_counts.VARIABLE] = str(Path(os.environ[shared.ROOT_VARIABLE]) / "conversions.log")
        path = [str(Path(__file__).parent / "counting"), os.environ.get("PYTHONPATH", "")]
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in path if p)
        # Two test workers, each with torch's and MNN's two threads, share two cores: OpenMP threads that spin
        # while they wait burn the cycles the other worker needs. Sleeping instead changes no result (the same
        # thread counts) and cut test_verify.py's CPU time by 29% on a busy machine (bench/RESULTS.md, issue 40).
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        # A Hub request that fails without saying when to come back is retried after 0.01 s, then 0.02, ..., not
        # 0.5, 1, ... 8 s: the tests of what happens once retries run out (no Hub at an address, the network guard)
        # sat through 15.5 s each. The retries themselves are the same; tests/test_hub_client.py pins the default.
        os.environ.setdefault("PACKAGER_HUB_RETRY_WAIT", "0.01")  # packager.hub.client.FIRST_WAIT_VARIABLE
        # One warm converter for the session (packager.convert.fence.warm): each graph build or reference conversion
        # a test asks for, in this process or a `packager` it starts, is a fork of it with torch, transformers and
        # llmexport imported (about 3 s of CPU each otherwise). Started last: it keeps the environment above.
        # Only for a session that selects such tests (`make test-fast` selects none: they would cost it seconds).
        global _warm
        heavy = _selects(config, "converter", "trained", "engines", "hub")
        if os.environ.get(launch.WARM_VARIABLE) is None and heavy:
            _warm = launch.start_warm(Path(tempfile.mkdtemp(prefix="packager-test-warm-converter-")))
            os.environ[launch.WARM_VARIABLE] = str(_warm[1])
            # and one for the local Hub's processes and jobs, whose PYTHONPATH puts the network guard first
            # (tests/localhub.py gives them this one)
            guarded = launch.start_warm(
                Path(tempfile.mkdtemp(prefix="packager-test-warm-converter-")), GUARD_PYTHONPATH
            )
            _warm_guarded.append(guarded)
            os.environ[GUARD_CONVERTER] = str(guarded[1])
        # The `packager` commands of the tests (run_cli, the local Hub's cli) forked from warm interpreters, one for
        # the session's PYTHONPATH and one for the network guard's (tests/warmcli.py): each fresh command spent
        # 0.3-1.5 s of CPU importing, about 1,300 a session. Set $PACKAGER_TEST_WARM_CLI empty to start each fresh.
        global _warm_cli
        if os.environ.get(warmcli.VARIABLE) is None and heavy:
            folder = Path(tempfile.mkdtemp(prefix="packager-test-warm-cli-"))
            _warm_cli = (warmcli.start(folder, [os.environ["PYTHONPATH"], GUARD_PYTHONPATH]), folder)
            os.environ[warmcli.VARIABLE] = str(folder)
    leftovers.become_subreaper()


# The slow kinds, marked from what a test uses (its fixtures, or what its module imports), so that no test can
# forget its mark: `make test-fast` runs the rest (-m "not (converter or trained or hub or engines or slow)";
# `slow` is set by hand on the few tests of seconds of torch). Building a tiny checkpoint with transformers takes a
# second and is not a mark of its own; converting is, and the session checks it: a test that converts (a graph
# build, a bundle committed, llmexport) without a converter, trained or engines mark fails the session
# (tests/counting), so the fast layer holds what it says.
_KINDS = {
    "converter": {"eagle_bundle", "bundle4", "bundle8", "lora_bundle8", "llama_bundle8"},
    "hub": {"hub", "online", "ready"},
}
_MODULE_KINDS = {"tests.trained": "trained", "tests.trained_eagle": "trained"}


_MAY_CONVERT = {"converter", "trained", "engines"}


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Each test's setup, call and teardown run with its id and whether it may convert in the environment (and so in
    every process it starts): tests/counting records a conversion against them."""
    os.environ[_counts.NODEID] = item.nodeid
    os.environ[_counts.MAY_CONVERT] = "1" if {m.name for m in item.iter_markers()} & _MAY_CONVERT else "0"
    profile = os.environ.get("PACKAGER_TEST_PROFILE")  # a file: each test's wall and CPU time (its own, its children's)
    before = (time.time(), resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN))
    try:
        return (yield)
    finally:
        os.environ.pop(_counts.NODEID, None)
        os.environ.pop(_counts.MAY_CONVERT, None)
        if profile:
            own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
            cpu = [
                (now.ru_utime + now.ru_stime) - (then.ru_utime + then.ru_stime)
                for now, then in ((own, before[1]), (kids, before[2]))
            ]
            marks = ",".join(sorted({m.name for m in item.iter_markers()} & {*_MAY_CONVERT, "hub", "slow"}))
            with open(profile, "a", encoding="utf-8") as out:
                out.write(
                    f"{item.nodeid}\t{os.getpid()}\t{before[0]:.2f}\t{time.time():.2f}\t{cpu[0]:.2f}\t{cpu[1]:.2f}\t{marks}\n"
                )


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

    # Heaviest modules first (xdist's loadfile hands modules out in this order when run with
    # --no-loadscope-reorder, as `make test` runs it; xdist's own order is by number of tests): the two workers
    # finish together instead of one running the last heavy module alone. A module's weight: its measured time
    # (tests/durations.py), else an estimate from its tests' marks; a stable sort keeps each module whole.
    def module(item: pytest.Item) -> str:
        return item.nodeid.split("::")[0]

    measured = durations.load()
    weight: dict[str, float] = {}
    for item in items:
        name = module(item)
        if name in measured:
            weight[name] = measured[name]
        else:
            weight[name] = weight.get(name, 0.0) + durations.estimate({m.name for m in item.iter_markers()})
    items.sort(key=lambda item: -weight[module(item)])


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _warm is not None:  # the session's own warm converters are no leftovers: stopped (their copies die with them)
        said = []
        for process, socket in [_warm, *_warm_guarded]:
            process.kill()
            process.wait()
            said += (socket.parent / "warm.log").read_text(encoding="utf-8", errors="replace").splitlines()
            shutil.rmtree(socket.parent, ignore_errors=True)
        refused = sorted({line for line in said if line.startswith("refused: ")})
        served = sum(1 for line in said if line.startswith("served: "))
        print(f"\nthe warm converters ran {served} converter jobs; refused: {refused or 'none'}", file=sys.stderr)
    found = []
    if _warm_cli is not None:  # the warm CLIs are no leftovers; a command of theirs still running is
        found += warmcli.still_running(_warm_cli[0], _warm_cli[1])
        for process in _warm_cli[0]:
            process.kill()
            process.wait()
        served, refused = warmcli.said(_warm_cli[1])
        print(f"\nthe warm CLIs ran {served} commands; refused: {refused or 'none'}", file=sys.stderr)
        shutil.rmtree(_warm_cli[1], ignore_errors=True)
    found += leftovers.kill_leftovers()  # every test and session fixture is done: nothing it started may live on
    record = Path(os.environ["PACKAGER_TEST_LEFTOVERS"])
    if found:
        (record / f"{os.getpid()}.txt").write_text("\n".join(found) + "\n", encoding="utf-8")
    if hasattr(session.config, "workerinput"):
        return
    built = shared.count()
    if built:
        print("\nbuilt once for the session:", ", ".join(f"{n} {kind}" for kind, n in built.items()), file=sys.stderr)
    made, unmarked = _counts.read(os.environ[_counts.VARIABLE])
    print("\nconverted in this session:", ", ".join(f"{n} {kind}" for kind, n in made.items()), file=sys.stderr)
    if unmarked:
        print(
            "\ntests that converted without a converter, trained or engines mark:",
            *unmarked,
            sep="\n  ",
            file=sys.stderr,
        )
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    for folder in (os.environ["PACKAGER_CACHE_DIR"], os.environ[shared.ROOT_VARIABLE]):
        shutil.rmtree(folder, ignore_errors=True)  # the graph cache (~100 MB) and the shared builds, never reused
    lines = [line for f in sorted(record.glob("*.txt")) for line in f.read_text(encoding="utf-8").splitlines()]
    shutil.rmtree(record, ignore_errors=True)
    if lines:
        print("\nprocesses the suite started outlived their tests (killed now):", *lines, sep="\n  ", file=sys.stderr)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


# Session inputs are built once per session, whichever worker asks first (tests/shared.py): tests copy them
# before changing anything.
@pytest.fixture(scope="session")
def tiny_checkpoint() -> Path:
    return shared.once("checkpoint", ["build_qwen3"], lambda d: build_qwen3(d / "tiny-qwen3"))


@pytest.fixture(scope="session")
def lora_adapter(tiny_checkpoint: Path) -> Path:
    return shared.once(
        "checkpoint", ["build_lora", tiny_checkpoint], lambda d: build_lora(tiny_checkpoint, d / "adapter")
    )


def _convert(checkpoint: Path, **options: object) -> ConvertResult:
    """A conversion of the session's, made once (keyed by the checkpoint's files and the options)."""
    result: ConvertResult = shared.converted(checkpoint, **options)
    return result


@pytest.fixture(scope="session")
def target8() -> Path:
    """An untied 8-layer tiny Qwen3: deep enough for an EAGLE-3 head (layers 2, 4, 5)."""
    return shared.once(
        "checkpoint", ["build_qwen3", 8, 11], lambda d: build_qwen3(d / "qwen3-8l", layers=8, seed=11, tie=False)
    )


@pytest.fixture(scope="session")
def head(target8: Path) -> Path:
    """A random EAGLE-3 head for target8 (SpecForge layout, draft vocabulary 2048)."""
    return shared.once(
        "checkpoint",
        ["build_eagle_head", target8],
        lambda d: build_eagle_head(target8, d / "head", seed=12, draft_vocab=2048),
    )


@pytest.fixture(scope="session")
def eagle_bundle(target8: Path, head: Path) -> ConvertResult:
    """target8 with its head: a target+eagle bundle (tests copy it before changing anything)."""
    return _convert(target8, eagle=head)


@pytest.fixture(scope="session")
def bundle4(tiny_checkpoint: Path) -> ConvertResult:
    return _convert(tiny_checkpoint)


@pytest.fixture(scope="session")
def bundle8(tiny_checkpoint: Path) -> ConvertResult:
    return _convert(tiny_checkpoint, quant_bits=8)


@pytest.fixture(scope="session")
def lora_bundle8(tiny_checkpoint: Path, lora_adapter: Path) -> ConvertResult:
    return _convert(tiny_checkpoint, adapter=lora_adapter, quant_bits=8)


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """The real `packager` command in its own process: forked from the session's warm CLI where one serves this
    environment (tests/warmcli.py), else started fresh; `prefix` (a wrapper command) always starts it fresh."""
    if not prefix:
        return warmcli.packager(list(args), cwd, env, 600)
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
def llama_checkpoint() -> Path:
    """A tiny Llama-3.2-shaped checkpoint with Meta's tokenizer and its LICENSE (tests/families.py)."""
    from tests.families import build_llama32

    return shared.once("checkpoint", ["build_llama32"], lambda d: build_llama32(d / "tiny-llama32"))


@pytest.fixture(scope="session")
def qwen25_checkpoint() -> Path:
    """A tiny Qwen2.5-shaped checkpoint (q/k/v biases) with the real Qwen tokenizer (tests/families.py)."""
    from tests.families import build_qwen25

    return shared.once("checkpoint", ["build_qwen25"], lambda d: build_qwen25(d / "tiny-qwen25"))


@pytest.fixture(scope="session")
def llama_bundle8(llama_checkpoint: Path) -> ConvertResult:
    """llama_checkpoint converted at 8 bits (tests copy it before changing anything)."""
    return _convert(llama_checkpoint, quant_bits=8)
