"""The click tree of `packager`, walked: every command and group, for the tests that check each one."""

from __future__ import annotations

from collections.abc import Iterator

import click


def command_tree() -> list[tuple[tuple[str, ...], click.Command]]:
    """Every command of the click tree, groups included (the root is ()), found by walking it: never a list."""
    from packager.cli import cli

    def walk(command: click.Command, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], click.Command]]:
        yield path, command
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None, (*path, name)
                yield from walk(sub, (*path, name))

    return list(walk(cli, ()))
