"""The wheel is the library: the package, its kernels and the suite `portkern bench` runs, nothing of bench/'s
results or scripts (pyproject.toml names the suite's files one by one; CI builds the wheel and checks its size)."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib


def _force_include() -> dict[str, str]:
    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    return conf["tool"]["hatch"]["build"]["targets"]["wheel"]["force-include"]


def test_every_file_of_the_bench_suite_ships_and_nothing_else_of_bench() -> None:
    suite = {f"bench/{p.name}" for p in (ROOT / "bench").iterdir()
             if p.is_file() and (p.suffix == ".py" or p.name == "pytest.ini")}  # fmt: skip
    shipped = {src: dst for src, dst in _force_include().items() if src.startswith("bench")}
    assert set(shipped) == suite
    assert all(dst == "portkern/_bench/" + src.removeprefix("bench/") for src, dst in shipped.items())


def test_the_kernels_ship_inside_the_package() -> None:
    assert _force_include()["kernels"] == "portkern/kernels"
