"""Every command in README.md and docs/*.md works as written.

Each fenced block of those files is one of four kinds, said by an HTML comment on the line just
before it (invisible on GitHub, plain in the source), or, with none, by its language:

- ``sh`` with no comment: **run**. The block runs in ``bash -euo pipefail`` against the processes
  the document's earlier ``background`` blocks started; it must exit 0 and print no error answer
  (``{"error": ...}``): ``curl -s`` exits 0 on a 4xx, so the answer is what tells.
- ``<!-- doc-test: background -->``: a long-running process (the coordinator, an agent), started
  for the blocks after it and stopped at the end; ready when the coordinator's ``/readyz``
  answers, or when an agent has logged that it is ready.
- ``<!-- doc-test: check -->``: needs what a test cannot have (a clean clone's own venv, a
  device, an hour of benchmarks, a live stream, the deployment's Redis keys): each command is
  checked to parse instead. The project's commands (``coordinator``, ``agent``, ``tether``,
  ``bench``) accept ``--help`` with its subcommands, and list every ``--option`` the block uses;
  a test file pytest is given exists; a ``redis-cli`` command is a command this Redis knows;
  anything else is on ``PATH``.
- ``<!-- doc-test: output -->``: an example of what a command prints; nothing to run.

A block without a comment that is not ``sh`` fails the test: no block escapes unseen.

What the documents say and the test changes, and only that: ``.venv/bin/`` is the directory of
the interpreter running the tests (the README's venv in CI), and the documents' address
``127.0.0.1:8000`` (and ``--port 8000``) a free loopback port of the test's own. Everything runs
in a temporary working directory; the coordinator the README starts is on its embedded Redis, as
written, so no Redis key is touched.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.support import REPO, child_env, free_port, wait_until

pytestmark = pytest.mark.e2e

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
KINDS = ("run", "background", "check", "output")
_FENCE = re.compile(r"^(?:<!--\s*doc-test:\s*(?P<kind>[\w-]+)[^\n]*?-->\n)?```(?P<lang>\w*)\n(?P<body>.*?)^```$",
                    re.MULTILINE | re.DOTALL)
PROJECT_MODULES = ("coordinator", "agent", "tether", "bench")
BIN = str(Path(sys.executable).parent)


@dataclass(frozen=True)
class Block:
    document: Path
    line: int
    kind: str
    body: str

    def __str__(self) -> str:
        return f"{self.document.relative_to(REPO)}:{self.line}"


def blocks(document: Path) -> list[Block]:
    text = document.read_text()
    found = []
    for match in _FENCE.finditer(text):
        kind = match["kind"] or ("run" if match["lang"] == "sh" else f"unmarked {match['lang'] or 'plain'} block")
        found.append(Block(document, text.count("\n", 0, match.start("body")), kind, match["body"]))
    return found


ALL = [block for document in DOCUMENTS for block in blocks(document)]


def test_every_block_is_run_or_says_why_not() -> None:
    unmarked = [f"{block}: {block.kind}" for block in ALL if block.kind not in KINDS]
    assert not unmarked, ("a fenced block that is not sh needs <!-- doc-test: check|output|background --> "
                          f"on the line before it: {unmarked}")
    assert any(block.kind == "run" for block in ALL) and any(block.kind == "check" for block in ALL)


# -- tables -------------------------------------------------------------------------------------

_SEPARATOR = re.compile(r"^\|(\s*:?-+:?\s*\|)+$")


def table_runs(document: Path) -> list[tuple[int, list[str]]]:
    """Each run of consecutive lines starting with ``|`` outside fenced blocks, with the number of
    its first line: what GitHub would render as one table, or as text."""
    runs: list[tuple[int, list[str]]] = []
    fenced = False
    current: list[str] = []
    for number, line in enumerate([*document.read_text().splitlines(), ""], start=1):
        if line.startswith("```"):
            fenced = not fenced
        if not fenced and line.lstrip().startswith("|"):
            current.append(line.strip())
            continue
        if current:
            runs.append((number - len(current), current))
            current = []
    return runs


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda d: str(d.relative_to(REPO)))
def test_every_table_renders_as_a_table(document: Path) -> None:
    """A run of ``|`` lines is a table only if its second line is the separator (``|---|``) and
    every line starts and ends with ``|``: a blank line inside a table cut it in two, and its
    second half rendered as text full of ``|`` (docs/operations.md, issue 42)."""
    broken = []
    for first, run in table_runs(document):
        where = f"{document.relative_to(REPO)}:{first}"
        if len(run) < 2 or not _SEPARATOR.match(run[1].replace(" ", "")):
            broken.append(f"{where}: rows without a header and separator above them (a blank line in a table?)")
        broken += [f"{where}: a row that does not end with |: {line[:60]}" for line in run if not line.endswith("|")]
    assert not broken, broken


# -- commands as the test sees them -------------------------------------------------------------


def localized(text: str, port: int) -> str:
    return (text.replace(".venv/bin/", f"{BIN}/").replace("127.0.0.1:8000", f"127.0.0.1:{port}")
            .replace("--port 8000", f"--port {port}"))


def commands(body: str) -> Iterator[list[str]]:
    """Each simple command of a block, as words: continuations joined, comments dropped, split at
    ``&&``, ``||``, ``;`` and ``|``; leading ``VAR=value`` assignments dropped."""
    for line in body.replace("\\\n", " ").splitlines():
        lexer = shlex.shlex(line, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        lexer.commenters = "#"
        command: list[str] = []
        for word in [*lexer, ";"]:
            if word in (";", "&&", "||", "|", "&"):
                while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                    command.pop(0)
                if command:
                    yield command
                command = []
            else:
                command.append(word)


def check_command(words: list[str]) -> None:
    """One command of a ``check`` block: it parses, or its program exists."""
    program, args = words[0], words[1:]
    if program == f"{BIN}/python" and args[:1] == ["-m"]:
        module, args = args[1], args[2:]
        if module.split(".")[0] in PROJECT_MODULES:
            return check_help([sys.executable, "-m", module], args, words)
        if module == "pytest":
            paths = [arg for arg in args if not arg.startswith("-") and arg.startswith("tests")]
            missing = [path for path in paths if not (REPO / path.split("::")[0]).exists()]
            assert not missing, f"{shlex.join(words)}: no such test file {missing}"
            return None
        return None  # another tool's module (venv, pip): the standard library's, or pip's
    if program == f"{BIN}/tether":
        return check_help([f"{BIN}/tether"], args, words)
    if program == "redis-cli":
        return check_redis_command(args, words)
    assert shutil.which(program) or Path(program).exists(), f"{shlex.join(words)}: {program} not found"
    return None


def check_help(program: list[str], args: list[str], words: list[str]) -> None:
    """``program args --help`` exits 0 (so the subcommands exist and the values given before
    ``--help`` parse), and its help names every ``--option`` used."""
    result = subprocess.run([*program, *args, "--help"], capture_output=True, text=True, timeout=60,
                            env=child_env(), cwd="/", check=False)
    assert result.returncode == 0, f"{shlex.join(words)}: --help says\n{result.stdout}{result.stderr}"
    options = {arg.split("=")[0] for arg in args if arg.startswith("--")}
    unknown = sorted(option for option in options if option not in result.stdout)
    assert not unknown, f"{shlex.join(words)}: {unknown} not in its --help"


def check_redis_command(args: list[str], words: list[str]) -> None:
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in ("-h", "-p", "-n", "-a"):
            rest.pop(0)
        if option.startswith("--"):  # --scan, --cluster: redis-cli's own modes
            return
    assert rest, f"{shlex.join(words)}: no command"
    if shutil.which("redis-cli") is None:
        pytest.skip("redis-cli is not installed")
    info = subprocess.run(["redis-cli", "-h", "127.0.0.1", "-p", "6379", "COMMAND", "INFO", rest[0]],
                          capture_output=True, text=True, timeout=10, check=False)
    assert info.returncode == 0 and info.stdout.strip() not in ("", "(nil)"), \
        f"{shlex.join(words)}: Redis knows no command {rest[0]!r}"


# -- the tests ----------------------------------------------------------------------------------


@pytest.mark.parametrize("block", [b for b in ALL if b.kind == "check"], ids=str)
def test_a_check_block_parses(block: Block) -> None:
    for words in commands(localized(block.body, 8000)):
        check_command(words)


_INLINE = re.compile(r"`(\.venv/bin/[^`]+)`")


def inline_commands() -> list[tuple[str, str]]:
    """The commands written inline in the prose (``.venv/bin/...`` in backticks), by where."""
    found = []
    for document in DOCUMENTS:
        text = document.read_text()
        for match in _INLINE.finditer(text):
            where = f"{document.relative_to(REPO)}:{text.count(chr(10), 0, match.start()) + 1}"
            found.append((where, " ".join(match[1].split())))
    return found


@pytest.mark.parametrize(("where", "command"), inline_commands(), ids=[w for w, _ in inline_commands()])
def test_an_inline_command_parses(where: str, command: str) -> None:
    """Prose writes placeholders (``--port P``, ``NAME``, ``S…``): the subcommands before the first
    of them must take ``--help``, and every ``--option`` written must be one of theirs."""
    words = localized(command, 8000).split()
    program, rest = words[0], words[1:]
    if program == f"{BIN}/python":
        if rest[:1] != ["-m"] or rest[1].split(".")[0] not in PROJECT_MODULES:
            return  # the interpreter itself, pytest, pip: not the project's commands
        program_words, rest = [sys.executable, "-m", rest[1]], rest[2:]
    elif program == f"{BIN}/tether":
        program_words = [program]
    else:
        return
    subcommands = []
    for word in rest:
        if not re.fullmatch(r"[a-z][a-z-]*", word):
            break
        subcommands.append(word)
    options = re.findall(r"(?<![\w-])--[a-z][a-z-]*", command)
    help_run = subprocess.run([*program_words, *subcommands, "--help"], capture_output=True, text=True,
                              timeout=60, env=child_env(), cwd="/", check=False)
    assert help_run.returncode == 0, f"{where}: {command}: --help says\n{help_run.stdout}{help_run.stderr}"
    unknown = sorted(option for option in options if option not in help_run.stdout)
    assert not unknown, f"{where}: {command}: {unknown} not in its --help"


class Session:
    """One document's run: its background processes and the exports its blocks made."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.exports: list[str] = []
        self.background: list[tuple[subprocess.Popen[bytes], Path]] = []

    def script(self, block: Block) -> str:
        body = localized(block.body, self.port)
        return "\n".join([*self.exports, body])

    def remember_exports(self, block: Block) -> None:
        self.exports += [line for line in localized(block.body, self.port).splitlines()
                         if line.startswith("export ")]

    def start(self, block: Block) -> None:
        log = self.workdir / f"background-{len(self.background)}.log"
        with open(log, "wb") as out:
            # A session of its own, so that stopping it reaches the process bash started.
            popen = subprocess.Popen(["bash", "-euo", "pipefail", "-c", self.script(block)], cwd=self.workdir,
                                     env=child_env(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        self.background.append((popen, log))

        def ready(probe: httpx.Client) -> bool:
            assert popen.poll() is None, f"{block} exited with {popen.returncode}:\n{log.read_text()}"
            if "coordinator serve" in block.body:
                try:
                    return probe.get(f"http://127.0.0.1:{self.port}/readyz").status_code == 200
                except httpx.TransportError:
                    return False
            return " ready with " in log.read_text()

        # One client for every probe (httpx.get builds one, and a TLS context, per call).
        with httpx.Client(timeout=1) as probe:
            wait_until(lambda: ready(probe), 30, what=f"{block} to be ready")

    def run(self, block: Block) -> None:
        started = time.monotonic()
        result = subprocess.run(["bash", "-euo", "pipefail", "-c", self.script(block)], cwd=self.workdir,
                                env=child_env(), capture_output=True, text=True, timeout=120, check=False)
        shown = f"{block} ({time.monotonic() - started:.1f} s) printed:\n{result.stdout}{result.stderr}"
        assert result.returncode == 0, f"exit {result.returncode}; {shown}"
        compact = result.stdout.replace(" ", "")
        # An error answer is {"error": {"code", ...}}; a session command's answer has "error": null.
        assert '"error":{' not in compact, f"an error answer; {shown}"
        # What a reader sees: one answer a line (curl -w '\n'), and no step that shows nothing.
        assert "}{" not in compact, f"answers printed glued together (curl -w '\\n'); {shown}"
        empty = re.search(r'^\{"\w+":\[\],"next_cursor"', compact, re.MULTILINE)
        assert empty is None, f"a listing that shows nothing: {empty and empty[0]}; {shown}"
        self.remember_exports(block)

    def stop(self) -> None:
        for popen, log in reversed(self.background):  # agents before the coordinator
            if popen.poll() is None:
                os.killpg(popen.pid, signal.SIGTERM)
            try:
                code = popen.wait(20)
            except subprocess.TimeoutExpired:
                os.killpg(popen.pid, signal.SIGKILL)
                code = popen.wait()
            # bash may have exec'ed the command (its exit code) or stayed its parent (killed by the TERM)
            assert code in (0, -signal.SIGTERM, 128 + signal.SIGTERM), \
                f"a background block exited with {code}:\n{log.read_text()}"
            # A newcomer following the document meets no warning (a short admin token, ...).
            warnings = [line for line in log.read_text().splitlines() if " WARNING " in line]
            assert not warnings, f"a background block warned: {warnings}"


@pytest.mark.parametrize("document", [d for d in DOCUMENTS if any(b.kind == "run" for b in blocks(d))],
                         ids=lambda d: str(d.relative_to(REPO)))
def test_a_document_s_commands_run_as_written(document: Path, tmp_path: Path) -> None:
    session = Session(tmp_path)
    try:
        for block in blocks(document):
            if block.kind == "background":
                session.start(block)
            elif block.kind == "run":
                session.run(block)
    finally:
        session.stop()
