"""A run file (``tether run submit FILE``): the body of ``POST /api/v1/runs``, as JSON, or as YAML
when its name ends ``.yaml`` or ``.yml``, read into what JSON can hold and nothing else.

A run file comes from anywhere a CI job's checkout does, so it is read as hostile input:

- YAML aliases are counted as the document is composed: more than ``MAX_ALIASES`` is refused
  before anything is built from them (a 438-byte "billion laughs" file names a billion strings
  through 90 aliases);
- what was built is walked once, stopping at ``MAX_VALUES`` values, so aliases within the bound
  still cannot make the body that is sent grow past it;
- a value JSON cannot hold is refused, with where it is: YAML's dates and timestamps, ``!!binary``,
  ``!!set``, ``!!omap``, ``.nan`` and ``.inf`` (JSON's ``NaN`` and ``Infinity`` too, which Python's
  reader takes), and a mapping key that is not a string;
- a document nested deeper than the interpreter recurses is refused like any malformed one.

Every refusal is one ``RunFileError`` whose text is one line.
"""

from __future__ import annotations

import json
import math
from typing import Any

import yaml

# More aliases than any hand-written run file uses (an anchor reused for each work item's
# params), far fewer than a bomb needs.
MAX_ALIASES = 64
# A run is at most wire.MAX_RUN_TASKS tasks of a few values each: a body of more values than this
# is no run the coordinator would take.
MAX_VALUES = 1_000_000


class RunFileError(ValueError):
    """A run file that is no run's body; its text is one line, saying why."""


def _one_line(text: str) -> str:
    return " ".join(text.split())


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a document of more than MAX_ALIASES aliases as it composes
    it (before any node is built from them)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_ALIASES:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]  # untyped in PyYAML's stubs
                raise RunFileError(f"more than {MAX_ALIASES} YAML aliases (line {mark.line + 1})")
        return super().compose_node(parent, index)


def _refuse_constant(name: str) -> Any:
    raise RunFileError(f"{name} is no JSON number")


def _check(document: Any) -> None:
    """Refuse a value JSON cannot hold, or more than MAX_VALUES values, walking without recursion
    (a shared node is walked each time it is named: that is the size the body would have)."""
    pending: list[tuple[Any, str]] = [(document, "$")]
    seen = 0
    while pending:
        value, where = pending.pop()
        seen += 1
        if seen > MAX_VALUES:
            raise RunFileError(f"more than {MAX_VALUES:,} values (aliases expand to more than a run holds)")
        if isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise RunFileError(f"{where} has a key that is not a string ({key!r})")
                pending.append((item, f"{where}.{key}"))
        elif isinstance(value, list):
            pending.extend((item, f"{where}[{index}]") for index, item in enumerate(value))
        elif isinstance(value, float):
            if not math.isfinite(value):
                raise RunFileError(f"{where} is {value}, which JSON cannot hold")
        elif value is not None and not isinstance(value, (str, int, bool)):
            raise RunFileError(f"{where} is a {type(value).__name__}, which JSON cannot hold; quote it if "
                               f"it is text")


def parse_run_file(text: str, *, as_yaml: bool) -> Any:
    """The document in ``text`` (YAML or JSON), as JSON values only; ``RunFileError`` otherwise."""
    try:
        # _Loader is yaml.SafeLoader's subclass: no tag builds anything but plain values.
        document = (yaml.load(text, Loader=_Loader) if as_yaml
                    else json.loads(text, parse_constant=_refuse_constant))
    except RunFileError:
        raise
    except json.JSONDecodeError as exc:
        raise RunFileError(f"line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
    except yaml.MarkedYAMLError as exc:  # where it went wrong, in one line (PyYAML's own text has three)
        mark = exc.problem_mark or exc.context_mark
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        raise RunFileError(_one_line(where + (exc.problem or exc.context or "not YAML"))) from None
    except (ValueError, yaml.YAMLError) as exc:
        raise RunFileError(_one_line(str(exc))) from None
    except RecursionError:
        raise RunFileError("nested too deeply") from None
    _check(document)
    return document
