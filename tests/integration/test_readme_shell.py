"""Every shell command in the README runs as written, in a scratch copy of the checkout, so the README
cannot drift from the code again.

A few commands cannot run literally inside a test; each is adapted in one place below, and the reason is
given there:
- `.venv/bin/python -m pytest -q` is the command running this test (CI runs it; running it here recurses);
- `./quickstart.sh` runs with `SEGOS_SKIP_INSTALL=1`: the scratch copy's `.venv` is this test's venv, which
  it must not reinstall;
- `dagster dev` / `dg dev` serve until stopped: they run until the webserver answers, then are stopped;
- `claude` (Claude Code) is not installed here: a stand-in on PATH takes the same arguments and starts the
  configured server command with the official MCP client, as Claude Code would;
- the block of `pip install ./segos` runs in a fresh venv in tests/integration/test_install.py;
- placeholders (`/path/to/segos`, `/tmp/segos-store`, ports) become the scratch copy's paths.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import sys
import textwrap
from pathlib import Path

import pytest

from ..conftest import copy_checkout, readme_bash_blocks, run_bash

VENV = Path(sys.prefix) if sys.prefix != sys.base_prefix else None
SKIPPED = ("python -m pytest",)  # this very command
ELSEWHERE = ("pip install ./segos",)  # tests/integration/test_install.py

# A stand-in for Claude Code's `claude mcp add NAME -- CMD ...` and `claude mcp add-json NAME JSON`: it
# starts the configured server exactly as given (absolute command, its args and env) and lists its tools.
CLAUDE = textwrap.dedent(
    """\
    #!{python}
    import asyncio, json, os, sys
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    args = sys.argv[1:]
    assert args[:1] == ["mcp"], args
    if args[1] == "add-json":
        spec = json.loads(args[3])
        command, cmd_args, env = spec["command"], spec.get("args", []), spec.get("env", {{}})
    else:
        assert args[1] == "add" and "--" in args, args
        rest = args[args.index("--") + 1 :]
        command, cmd_args, env = rest[0], rest[1:], {{}}
    # a client starts servers with a minimal PATH, from its own working directory
    assert os.path.isabs(command) and os.access(command, os.X_OK), f"not an absolute executable: {{command}}"
    params = StdioServerParameters(
        command=command, args=cmd_args, env={{"PATH": "/usr/bin:/bin", **env}}, cwd="/"
    )

    async def main():
        async with Client(params) as client:
            tools = [t.name for t in (await client.list_tools()).tools]
            print("claude-stand-in: tools", " ".join(sorted(tools)))

    asyncio.run(main())
    """
)

SERVE_BRIEFLY = textwrap.dedent(
    """\
    stop_group() {  # Ctrl-C to the server's process group (what `dagster dev` handles), then SIGKILL
      kill -INT -- -"$1" 2>/dev/null || true
      for _ in $(seq 60); do kill -0 "$1" 2>/dev/null || return 0; sleep 1; done
      kill -KILL -- -"$1" 2>/dev/null || true
    }
    serve_briefly() {  # start a server, wait until its web UI answers, stop it
      setsid "$@" --port {port} >serve.log 2>&1 &
      local pid=$!
      for _ in $(seq 240); do
        if {python} -c "import urllib.request as u; u.urlopen('http://127.0.0.1:{port}/server_info')" \\
            2>/dev/null; then
          stop_group "$pid"; echo "served on {port}"; return 0
        fi
        kill -0 "$pid" 2>/dev/null || { cat serve.log >&2; return 1; }
        sleep 1
      done
      stop_group "$pid"; cat serve.log >&2; return 1
    }
    """
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _adapt(block: str, scratch: Path) -> str:
    lines = []
    for line in (
        block.replace("/path/to/segos", str(scratch)).replace("/tmp/segos-store", f"{scratch}/st").split("\n")
    ):
        if any(s in line for s in SKIPPED):
            continue
        if line.startswith("./quickstart.sh"):
            line = "SEGOS_SKIP_INSTALL=1 " + line
        line = re.sub(r"^(\S*\b(?:dagster|dg)) dev\b[^#]*", r"serve_briefly \1 dev ", line)
        lines.append(line)
    return "\n".join(lines)


def _block_id(block: str) -> str:
    first = next(x for x in block.splitlines() if x.strip() and not x.startswith("#"))
    return re.sub(r"\s+#.*", "", first)[:40]


BLOCKS = readme_bash_blocks()


def test_the_readme_has_its_shell_examples():
    text = "\n".join(BLOCKS)
    for command in ("./quickstart.sh", "segos build", "segos retrieve", "segos mcp", "dagster"):
        assert command in text, f"the README no longer shows {command!r}"


@pytest.mark.slow
@pytest.mark.skipif(VENV is None, reason="needs the project's virtual environment (the README's .venv)")
@pytest.mark.parametrize("block", BLOCKS, ids=[_block_id(b) for b in BLOCKS])
def test_readme_shell_block_runs(block: str, tmp_path: Path):
    if any(s in block for s in ELSEWHERE):
        pytest.skip(
            "run in a fresh venv by "
            "tests/integration/test_install.py::test_core_install_runs_the_readme_install_block"
        )
    scratch = copy_checkout(tmp_path / "segos")
    (scratch / ".venv").symlink_to(VENV)  # the README's `.venv`: this environment, editable on the checkout
    shims = tmp_path / "bin"
    shims.mkdir()
    claude = shims / "claude"
    claude.write_text(CLAUDE.format(python=sys.executable))
    claude.chmod(0o755)
    prelude = SERVE_BRIEFLY.replace("{port}", str(_free_port())).replace("{python}", sys.executable)
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("SEGOS_STORE", "SEGOS_LANDING", "DAGSTER_HOME", "VIRTUAL_ENV", "PYTHONPATH")
    }
    env["PATH"] = f"{shims}:{env['PATH']}"
    script = prelude + _adapt(block, scratch)
    proc = run_bash(script, scratch, env, timeout=1200)
    assert proc.returncode == 0, (
        f"{script}\n--- stdout\n{proc.stdout[-2000:]}\n--- stderr\n{proc.stderr[-4000:]}"
    )
    if "claude " in block:
        assert "claude-stand-in: tools" in proc.stdout and "retrieve_skill_bundle" in proc.stdout
    if "quickstart.sh" in block:
        assert "held-out" in proc.stdout or "recall" in proc.stdout
        # it ends with the before/after of one task's bundle, then where to go next
        assert "== before / after" in proc.stdout and "== next steps" in proc.stdout
        assert proc.stdout.index("== before / after") < proc.stdout.index("== next steps")
        assert "dagster dev" in proc.stdout and "mcp --print-config" in proc.stdout
    shutil.rmtree(scratch / "data", ignore_errors=True)
