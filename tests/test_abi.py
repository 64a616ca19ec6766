"""The kernel ABI is declared once (portkern/_abi.py): every kernel source's entry points, the Numba
env kernels and kernels/README.md's signatures are checked against that declaration here."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from portkern import _abi
from portkern._kernels import kernel_dir
from portkern.envs import ENVS

from .test_env_sources import PENDING_KERNELS

README = Path(__file__).resolve().parent.parent / "kernels" / "README.md"
#: How each language spells the declaration's language-neutral types (see portkern/_abi.py).
_ACC = {"opencl": "REAL", "cuda": "double", "readme": "ACC"}
_KERNEL = re.compile(
    r"(?:__kernel|PK_SCAN_KERNEL|PK_VKERNEL|__global__)\b[^;{}]*?\bvoid\s+(?:__launch_bounds__\(\w+\)\s*)?"
    r"(PK_ENV_ENTRY\(\w+\)|[\w#]+)\s*\(([^)]*)\)\s*\{"
)
_MACRO = re.compile(r"^#define\s+(\w+)\((\w+),\s*(\w+)\)(.*)$", re.MULTILINE)


def _strip(text: str) -> str:
    """Comments out, backslash-continued macro lines joined."""
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.DOTALL)
    text = re.sub(r"//[^\n]*", " ", text)
    return text.replace("\\\n", " ")


def _type(raw: str) -> str:
    words = raw.replace("*", " * ").split()
    words = [w for w in words if w not in ("__global", "__restrict__", "restrict", "__local")]
    const = "const" in words
    stars = words.count("*")
    base = " ".join(w for w in words if w not in ("const", "*"))
    base = {"long long": "long", "unsigned long long": "ulong", "unsigned int": "uint", "unsigned char": "uchar",
            "ENV_PARAMS": "PARAMS"}.get(base, base)  # fmt: skip
    if re.fullmatch(r"pk_(<env>|[\w#]+)_params", base):
        base = "PARAMS"
    if re.fullmatch(r"\w+::Act", base):
        base = "ACT"
    return ("const " if const else "") + base + "*" * stars


def _params(text: str) -> list[tuple[str, str]]:
    out = []
    for part in text.split(","):
        m = re.fullmatch(r"\s*(.*?)\s*(\w+)\s*", part, flags=re.DOTALL)
        assert m, f"cannot read the argument {part!r}"
        out.append((_type(m.group(1)), m.group(2)))
    return out


def _entries(text: str) -> dict[str, list[tuple[str, str]]]:
    """Entry point name -> [(type, name)] of a source, macros that define kernels instantiated."""
    text = _strip(text)
    found = {}
    for macro in _MACRO.finditer(text):
        name, a, b, body = macro.groups()
        if not _KERNEL.search(body):
            continue
        for use in re.finditer(rf"^\s*{name}\((\w+),\s*(\w+)\)", text, flags=re.MULTILINE):
            inst = re.sub(rf"\b{a}\b", use.group(1), body)
            inst = re.sub(rf"\b{b}\b", use.group(2), inst)
            found.update(_entries(inst.replace("##", "")))
    for m in _KERNEL.finditer(_MACRO.sub("", text)):
        found[m.group(1)] = _params(m.group(2))
    return found


def _declared(name: str, api: str) -> list[tuple[str, str]]:
    return [(_type(a.type.replace("ACC", _ACC[api])), a.name) for a in _abi.declaration(name)]


def _source_entries(api: str) -> dict[str, list[tuple[str, str]]]:
    d = kernel_dir(api)
    ext = ".cl" if api == "opencl" else ".cu"
    found: dict[str, list[tuple[str, str]]] = {}
    env_header = _entries((d / "pk_env.h").read_text()) if api == "opencl" else {}
    env_macro = (d / "pk_common.cuh").read_text() if api == "cuda" else ""
    for path in sorted(d.glob(f"*{ext}")):
        text = path.read_text()
        if api == "opencl" and '#include "pk_env.h"' in text:
            stem = re.search(r"^#define\s+ENV_NAME\s+(\w+)", text, flags=re.MULTILINE).group(1)
            for key, args in env_header.items():  # PK_ENV_ENTRY(_step) -> pk_<stem>_step
                found["pk_" + stem + key.removeprefix("PK_ENV_ENTRY(").removesuffix(")")] = args
        elif api == "cuda" and "PK_ENV_KERNELS(" in text:
            # PK_ENV_KERNELS is the reset/step macro and the rollout macro (pk_common.cuh; the rollout alone with
            # PK_ROLLOUT_ONLY): read as the two
            text = re.sub(r"^(\s*)PK_ENV_KERNELS\((\w+),\s*(\w+)\)", r"\1PK_ENV_RESET_STEP_KERNELS(\2, \3)\n\1PK_ENV_ROLLOUT_KERNEL(\2, \3)",
                          text, flags=re.MULTILINE)  # fmt: skip
            text = env_macro + "\n" + text
        found.update(_entries(text))
    return found


@pytest.mark.parametrize("api", ["opencl", "cuda"])
def test_every_kernel_entry_point_matches_the_declared_abi(api):
    found = _source_entries(api)
    assert found, f"no entry points found in kernels/{api}"
    for name, args in found.items():
        assert args == _declared(name, api), f"kernels/{api}: {name} disagrees with portkern/_abi.py"
    for spec in ENVS.values():  # every env has its three entry points in every API (but where it is pending)
        if api in PENDING_KERNELS.get(spec.id, ()):
            continue
        for what in _abi.ENV_ENTRIES:
            assert _abi.env_entry(spec.kernel, what) in found, f"kernels/{api}: no {spec.kernel} {what} entry"


def test_every_declared_entry_point_exists_in_a_kernel_source():
    found = {**_source_entries("opencl"), **_source_entries("cuda")}
    missing = [n for n in (*_abi.ENTRIES, *_abi.SAME_AS) if n not in found]
    assert not missing, f"declared in portkern/_abi.py but in no kernel source: {missing}"


def test_a_kernel_whose_arguments_are_swapped_is_caught():
    """The check itself: a source with two same-typed arguments swapped disagrees with the declaration."""
    src = (kernel_dir("cuda") / "gae.cu").read_text().replace("REAL gamma, REAL gamma_lam", "REAL gamma_lam, REAL gamma")
    assert _entries(src)["pk_gae"] != _declared("pk_gae", "cuda")


def test_numba_env_kernels_take_the_declared_arguments():
    numba = pytest.importorskip("portkern.backends.numba")
    if numba.cuda is None:
        pytest.skip("numba-cuda is not importable here")
    from portkern.backends import _numba

    for spec in ENVS.values():
        if "numba" in PENDING_KERNELS.get(spec.id, ()):
            continue
        k = _numba.env_kernels(spec, np.dtype(np.float32))
        for what in _abi.ENV_ENTRIES:
            fn = getattr(k, what).py_func
            assert fn.__name__ == _abi.env_entry(spec.kernel, what)
            names = list(fn.__code__.co_varnames[: fn.__code__.co_argcount])
            assert names == [a.name for a in _abi.ENV_ENTRIES[what]], f"{fn.__name__} disagrees with portkern/_abi.py"


def test_the_readme_signatures_are_the_declared_ones():
    blocks = re.findall(r"```\n(.*?)```", README.read_text(), flags=re.DOTALL)
    text = _strip("\n".join(blocks))
    seen = set()
    for m in re.finditer(r"\b(pk_[\w<>]+)\s*\(([^)]*)\)", text):
        name = m.group(1).replace("pk_<env>_", "pk_env_")
        assert _params(m.group(2)) == _declared(name, "readme"), f"kernels/README.md: {m.group(1)} disagrees"
        seen.add(name)
    expected = {*_abi.ENTRIES, *(f"pk_env_{w}" for w in _abi.ENV_ENTRIES)}
    assert expected <= seen, f"kernels/README.md lacks {sorted(expected - seen)}"


def test_pack_orders_by_the_declaration_with_sized_scalars():
    values = {"rewards": "r", "values": "v", "next_values": "nv", "terminated": "te", "truncated": "tr",
              "advantages": "a", "returns": "ret", "gamma": 0.99, "gamma_lam": 0.95, "T": 3, "N": 4}  # fmt: skip
    args = _abi.pack("pk_gae", values, lambda a: f"*{a}", np.float64)
    assert args[:7] == ("*r", "*v", "*nv", "*te", "*tr", "*a", "*ret")
    assert [type(a) for a in args[7:]] == [np.float64, np.float64, np.int32, np.int32]
    step = _abi.pack("pk_cartpole_step", {a.name: 1 for a in _abi.ENV_ENTRIES["step"]}, lambda a: a)
    assert type(step[_abi.packer("pk_cartpole_step", lambda a: a).index("seed")]) is np.uint32
    with pytest.raises(TypeError, match="pk_gae: no value for argument.*gamma_lam"):
        _abi.pack("pk_gae", {k: v for k, v in values.items() if k != "gamma_lam"}, lambda a: a)
    with pytest.raises(KeyError, match="pk_nope"):
        _abi.declaration("pk_nope")
