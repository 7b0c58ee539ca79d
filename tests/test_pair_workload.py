"""pair's default workload: fewer of the built-in conversations as the target grows, evenly spread; all of them
with --full (the tests that run pair are in test_pair.py: they need checkpoints)."""

from __future__ import annotations

from pathlib import Path

from packager.measure import workload
from tests.conftest import run_cli
from tests.inprocess import run_packager


def test_pair_measures_fewer_builtin_conversations_by_default_as_the_target_grows() -> None:
    """The default finishes in about a minute for a small pair; --full (Options.full) measures all of them."""
    from packager.measure.pair import default_prompts
    from packager.measure.pair.memory import GIB

    assert [default_prompts(int(gib * GIB)) for gib in (0.25, 0.5, 1.0, 2.0, 8.0)] == [24, 24, 16, 16, 12]
    items = workload.builtin()
    chosen = workload.spread(items, 24)
    assert len(set(chosen)) == 24 and list(chosen) == [item for item in items if item in chosen]  # in their order
    assert {p.category for p in chosen} == {p.category for p in items} and len({p.language for p in chosen}) >= 6
    assert workload.spread(items, len(items)) == items == workload.spread(items, 100)


def test_pair_full_is_refused_with_a_prompts_file(tmp_path: Path) -> None:
    """--full measures every built-in conversation: beside --prompts it would be silently ignored."""
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("Hello\n", encoding="utf-8")
    result = run_packager("pair", str(tmp_path), str(tmp_path), "--full", "--prompts", str(prompts))
    assert result.returncode == 19 and "--full" in result.stderr, result.stderr


def test_pair_help_states_the_default_workload_the_library_measures() -> None:
    import click

    from packager.cli import cli
    from packager.measure.pair import DEFAULT_PROMPTS, LARGE_TARGET_PROMPTS

    command = cli.get_command(click.Context(cli), "pair")
    assert command is not None
    option = next(p for p in command.params if p.name == "prompts_file")
    said = str(option.show_default)
    expected = [f"{DEFAULT_PROMPTS[0][1]} of the built-in {len(workload.builtin())} conversations"]
    expected += [f"{count} up to {gib:g} GiB" for gib, count in DEFAULT_PROMPTS[1:]]
    expected += [f"up to {DEFAULT_PROMPTS[0][0]:g} GiB", f"else {LARGE_TARGET_PROMPTS};"]
    assert all(part in said for part in expected), (said, expected)
