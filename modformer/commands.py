"""The table of `modformer` commands.

A command is a name, one line of help, and a function that gives its parser its arguments
and its handler (`parser.set_defaults(func=...)`). The library's commands are the table in
`modformer/cli.py` (`LIBRARY`); a paper plugin adds its own (`Paper.command`,
modformer/plugins.py), so `modformer --help` lists both and the library names no paper.

One argument style for all: a YAML config, dotted `key=value` overrides, and flags only where
a config does not fit (an output folder, a run to read, `--print`). A command that was
renamed keeps its old name as an alias, which works and says the new name.

Every experiment is a sweep: `modformer report DIR` writes a sweep's report, each kind of
run's its own (`sweep.kinds.RunKind.report`).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Command:
    """One `modformer` command.

    Args:
        name: what follows `modformer` on the command line.
        help: one line, shown by `modformer --help`; empty: a command kept only for old
            command lines, not listed.
        build: build(parser) adds the command's arguments, description and epilog to its
            parser and sets `func`, the handler called with the parsed arguments (returning
            the exit status).
        aliases: older names of the command; each still works and says the new name.
    """

    name: str
    help: str
    build: Callable[[argparse.ArgumentParser], None]
    aliases: tuple[str, ...] = field(default=())


COMMANDS: dict[str, Command] = {}  # name -> command, the paper plugins' (the library's are cli.LIBRARY)


def register(command: Command) -> Command:
    """Add a paper plugin's command to the table (`Paper.command` calls it).

    Args:
        command: the command; its name and aliases must be new.

    Returns:
        The command.
    """
    taken = {name for c in COMMANDS.values() for name in (c.name, *c.aliases)}
    clash = [n for n in (command.name, *command.aliases) if n in taken]
    if clash:
        raise ValueError(f"command '{clash[0]}' is registered twice")
    COMMANDS[command.name] = command
    return command


def describe_parser(parser: argparse.ArgumentParser, description: str, epilog: str | None = None) -> None:
    """Give a command's parser its description and (kept as written) epilog.

    Args:
        parser: the command's parser.
        description: a paragraph on what the command does.
        epilog: text printed after the arguments, line breaks kept (config keys); None: none.
    """
    parser.description = description
    if epilog is not None:
        parser.epilog = epilog
        parser.formatter_class = argparse.RawDescriptionHelpFormatter
