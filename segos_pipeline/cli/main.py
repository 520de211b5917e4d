"""The `segos` command line. Interfaces here (commands, flags, JSON shapes) are relied on by other tools:
add to them freely, never change what exists."""

from __future__ import annotations

import click

from .compare import compare_cmd
from .evaluate import eval_cmd
from .evolution import COMMANDS as EVOLUTION_COMMANDS
from .repair import repair_cmd
from .retrieval import COMMANDS as RETRIEVAL_COMMANDS
from .service import COMMANDS as SERVICE_COMMANDS
from .skills import COMMANDS as SKILL_COMMANDS
from .versions import COMMANDS as VERSION_COMMANDS

# The library modules a command needs are imported in the command, so that every `segos ...` pays only for
# what it runs (an incremental `segos update` on a big library is bounded by start-up time otherwise).


@click.group()
@click.version_option(package_name="segos", prog_name="segos")
def main() -> None:
    """segos: a self-evolving Graph-of-Skills retrieval layer."""


# build versions promote rollback report verify | retrieve replay | ingest trace-schema evolve diff simulate
# generate-library
for _cmd in (*VERSION_COMMANDS, *RETRIEVAL_COMMANDS, *EVOLUTION_COMMANDS):
    main.add_command(_cmd)
main.add_command(eval_cmd)
main.add_command(compare_cmd)
main.add_command(repair_cmd)
for _cmd in (*SERVICE_COMMANDS, *SKILL_COMMANDS):  # mcp add update remove | skills show explain export
    main.add_command(_cmd)
