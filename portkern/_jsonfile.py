"""Reading a JSON file that a user names (a run, a training file, a config, an option's file), with errors that
say which file and what is wrong with it. Needs nothing else of portkern: every layer may use it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from importlib.resources.abc import Traversable  # Python >= 3.11; a name for the type checker only


def read_json(file: str | Path | Traversable, fail: Callable[[str], Exception]) -> Any:
    """The JSON value the file holds; raises ``fail(problem)`` when it cannot be read or is not valid JSON.

    ``problem`` is ``cannot read it (...)`` or ``not valid JSON (... at line L, column C); truncated?``;
    ``fail`` adds the file's name and picks the error class (``lambda what: ConfigError(f"{path}: {what}")``).
    """
    try:
        text = (Path(file) if isinstance(file, str) else file).read_text()
    except OSError as exc:
        raise fail(f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:  # a binary or otherwise non-UTF-8 file
        raise fail(f"not UTF-8 text ({exc.reason} at byte {exc.start}); not a JSON file?") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"not valid JSON ({exc.msg} at line {exc.lineno}, column {exc.colno}); truncated?") from None


def read_option_json(option: str, file: str, shape: str) -> Any:
    """The JSON value of the file given to a command-line ``option`` (``--price``, ``--mix``), expected to
    hold ``shape`` (named in the error); ValueError naming the option and the file when it cannot be read
    or parsed."""
    return read_json(file, lambda what: ValueError(f"{option} {file}: not a readable JSON file of {shape}: {what}"))
