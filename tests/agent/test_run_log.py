"""A run's log (``log.txt``): the agent's lines of that run only, bounded, the newest kept."""

from __future__ import annotations

import asyncio
import logging

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent.run_log import MAX_LINE_CHARS, RunLog

HEADER = "tether agent log of task t-1 attempt 1 on device d (lease l)"


_LINE = st.text(st.characters(blacklist_characters="\n", blacklist_categories=("Cs",)), max_size=300)


@given(st.lists(_LINE, max_size=200), st.integers(min_value=64, max_value=4096))
def test_the_log_keeps_the_newest_lines_within_its_bound(lines: list[str], max_bytes: int) -> None:
    log = RunLog(HEADER, max_bytes=max_bytes)
    for line in lines:
        log.add(line)
    # The model: the longest run of newest lines that fits (each costs its bytes and a newline),
    # but never fewer than the newest one.
    kept: list[str] = []
    size = 0
    for line in reversed(lines):
        cost = len(line.encode()) + 1
        if kept and size + cost > max_bytes:
            break
        kept.insert(0, line)
        size += cost
    dropped = len(lines) - len(kept)
    marker = [f"[{dropped} earlier line(s) dropped: this log keeps its last {max_bytes} bytes]"] if dropped else []
    assert log.text().decode("utf-8") == "\n".join([HEADER, *marker, *kept]) + "\n"


def test_a_long_line_is_cut() -> None:
    log = RunLog(HEADER)
    log.add("x" * (MAX_LINE_CHARS * 3))
    assert len(log.text()) < MAX_LINE_CHARS * 2


async def test_only_the_lines_of_its_own_run_and_of_tasks_it_starts() -> None:
    logger = logging.getLogger("agent.test_run_log")
    logger.setLevel(logging.INFO)
    first, second = RunLog("first"), RunLog("second")
    both_ran = asyncio.Event()

    async def run(log: RunLog, word: str) -> None:
        with log.capturing():
            logger.info("%s starts", word)
            await asyncio.create_task(_child(logger, word))  # a task it starts inherits its log
            if word == "one":
                await both_ran.wait()
            else:
                both_ran.set()
            logger.warning("%s ends", word)

    logger.info("nobody's line")
    await asyncio.gather(run(first, "one"), run(second, "two"))
    assert [line.split(": ", 1)[1] for line in first.text().decode().splitlines()[1:]] == [
        "one starts", "one child", "one ends"]
    assert [line.split(": ", 1)[1] for line in second.text().decode().splitlines()[1:]] == [
        "two starts", "two child", "two ends"]
    assert " WARNING agent.test_run_log: one ends" in first.text().decode()


async def _child(logger: logging.Logger, word: str) -> None:
    logger.info("%s child", word)


pytestmark = pytest.mark.anyio
