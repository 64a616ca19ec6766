"""Fuzzing the files users hand the CLI: bench runs (results.json), training files (train.json), their journals
(``--resume``), ``--price`` and ``--mix`` files, the training ``--config`` and the tuning cache. Each starts from a
real file and is truncated, replaced by garbage, or has parts of its JSON replaced by values of other types or
deleted. Allowed: the file read (and, for runs and training files, the report built from it), or a
ValueError/TypeError whose message names the file; the tuning cache, which a launch reads, may only be warned
about, never break the backend."""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from portkern import journal
from portkern.portability.report import mixes as report_mixes
from portkern.portability.report.crossdevice import parse_prices
from portkern.portability.report.files import build_all
from portkern.portability.report.render import markdown
from portkern.runs import load_run
from portkern.train import config as train_config
from tests._hypothesis_profiles import fuzz

_REPO = Path(__file__).resolve().parent.parent
_RUN = _REPO / "tests" / "data" / "run-ci-vm-paths-tiny.json"
_TRAIN = Path(__file__).parent / "data" / "mixes-source-workload_mixes_chain.json"  # a committed train.json
_CONFIG = _REPO / "portkern" / "data" / "train_configs.json"
_MIXES = _REPO / "portkern" / "data" / "workload_mixes.json"
_TABLE = _REPO / "portkern" / "data" / "tuned_defaults.json"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)


def _paths(doc, prefix=()):
    """Every (path to a container, key in it) of a JSON document, for mutations."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield prefix, k
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:4]):  # the first few entries of long lists: the rest are alike
            yield prefix, i
            yield from _paths(v, (*prefix, i))


@st.composite
def mutated(draw, original: bytes) -> bytes:
    """``original`` truncated, as garbage, as another JSON value, or with 1-3 parts replaced or deleted."""
    how = draw(st.sampled_from(["edit", "edit", "edit", "edit", "truncate", "garbage", "other"]))
    if how == "truncate":
        return original[: draw(st.integers(0, len(original) - 1))]
    if how == "garbage":
        return draw(st.binary(max_size=40))
    if how == "other":
        return json.dumps(draw(json_values)).encode()
    doc = json.loads(original)
    paths = list(_paths(doc))
    for _ in range(draw(st.integers(1, 3))):
        if not paths:
            break
        parent_path, key = draw(st.sampled_from(paths))
        parent = doc
        try:
            for step in parent_path:
                parent = parent[step]
            if draw(st.booleans()) and isinstance(parent, dict):
                del parent[key]
            else:
                parent[key] = draw(json_values)
        except (KeyError, IndexError, TypeError):  # an earlier mutation changed the path
            continue
    return json.dumps(doc).encode()


def _names_file(exc: BaseException, path: Path) -> bool:
    return str(path) in str(exc) or path.name in str(exc)


def _read_or_named_error(fn, path: Path):
    """fn() or a ValueError/TypeError naming ``path``; anything else fails the test."""
    try:
        return True, fn()
    except (ValueError, TypeError) as exc:
        assert _names_file(exc, path), f"{type(exc).__name__} does not name {path}: {exc}"
        return False, exc


@pytest.fixture(scope="module")
def scratch(tmp_path_factory):
    return tmp_path_factory.mktemp("fuzz-files")


# ---- results.json and train.json, and the report built from them ----------------------------------------
def _run_with(**case_fields) -> bytes:
    doc = json.loads(_RUN.read_text())
    doc["portkern"]["cases"][0].update(case_fields)
    return json.dumps(doc).encode()


@given(content=mutated(_RUN.read_bytes()))
@fuzz(25)
@example(content=b"\x80")  # was UnicodeDecodeError, naming no file
@example(content=_run_with(max_error=[1.0], status="fail"))  # was TypeError comparing a list with a float (report)
@example(content=_run_with(case_id=["a"]))  # was TypeError: unhashable type: 'list'
def test_a_run_file(scratch, content):
    path = scratch / "results.json"
    path.write_bytes(content)
    ok, _ = _read_or_named_error(lambda: load_run(path), path)
    if ok:  # loaded: the report of it is built and rendered, or the file is named as the problem
        ok, rep = _read_or_named_error(lambda: build_all([str(path)]), path)
        if ok:
            assert isinstance(markdown(rep), str)


def _train_with(**run_fields) -> bytes:
    doc = json.loads(_TRAIN.read_text())
    doc["runs"][0].update(run_fields)
    return json.dumps(doc).encode()


def _train_top(**changes) -> bytes:
    doc = json.loads(_TRAIN.read_text())
    for key, change in changes.items():
        doc[key] = change(doc[key])
    return json.dumps(doc).encode()


@given(content=mutated(_TRAIN.read_bytes()))
@fuzz(25)
@example(content=_train_with(device_seconds_per_policy=0))  # was ZeroDivisionError building the report
@example(content=_train_with(parallel_seeds="2"))
@example(content=_train_top(devices=lambda d: {k: None for k in d}))  # was AttributeError: 'NoneType' has no 'get'
def test_a_training_file(scratch, content):
    from portkern.portability import training
    from portkern.portability.training.cost import cost_from_train

    path = scratch / "train.json"
    path.write_bytes(content)
    ok, doc = _read_or_named_error(lambda: training.load_train(path), path)
    if not ok:
        return
    ok, rep = _read_or_named_error(lambda: build_all([str(path)]), path)
    if ok:
        assert isinstance(markdown(rep), str)
    stacks = sorted({r["stack"] for r in doc["runs"]})
    try:  # cost --train with the file's own first and last stacks
        cost_from_train([str(path)], stacks[0], stacks[-1])
    except (ValueError, TypeError) as exc:
        assert _names_file(exc, path) or "--locked" in str(exc) or "--portable" in str(exc) or "--task" in str(exc), exc


# ---- journals ----------------------------------------------------------------------------------------------
_JOURNAL = (
    json.dumps({"journal": journal.JOURNAL_SCHEMA, "kind": "train", "identity": {"config": {"v": 1}, "rev": "abc"}})
    + "\n" + json.dumps({"key": ["CartPole-v1", "numpy", 1], "status": "done", "data": {"wall_s": 1.5}})
    + "\n" + json.dumps({"key": ["CartPole-v1", "numpy", 2], "status": "failed", "data": {"error": "x"}})
    + "\n" + json.dumps({"key": ["CartPole-v1", "numpy", 2], "status": "note", "data": {}}) + "\n"
).encode()  # fmt: skip


@st.composite
def mutated_journal(draw) -> bytes:
    lines = _JOURNAL.split(b"\n")[:-1]
    i = draw(st.integers(0, len(lines) - 1))
    lines[i] = draw(mutated(lines[i]))
    text = b"\n".join(lines) + (b"\n" if draw(st.booleans()) else b"")
    return text


@given(content=mutated_journal())
@fuzz(25)
@example(content=_JOURNAL.replace(b', "data": {"wall_s": 1.5}', b""))  # a record without data: was KeyError 'data'
@example(content=_JOURNAL.replace(b'"key": ["CartPole-v1", "numpy", 1]', b'"key": [{"a": 1}]'))  # unhashable key
@example(content=_JOURNAL.replace(b'"identity": {"config": {"v": 1}, "rev": "abc"}', b'"identity": [1]'))
def test_a_journal(scratch, content):
    path = scratch / "train.json.journal"
    path.write_bytes(content)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a torn last line is warned about and left out: allowed
        ok, _ = _read_or_named_error(lambda: journal.read(path), path)
        ok, j = _read_or_named_error(
            lambda: journal.Journal.open(path, "train", {"config": {"v": 1}, "rev": "abc"}, resume=True), path)
    if ok:
        j.close()
        assert all(isinstance(v, dict) for v in (*j.done.values(), *j.failed.values(), *j.notes.values()))


# ---- --price, --mix, --config ------------------------------------------------------------------------------
_DEVICES = {"pocl:cpu:x": {"kind": "cpu", "platform": "Portable Computing Language", "hardware_key": "cpu:x"},
            "host:cpu:x": {"kind": "cpu", "platform": "", "hardware_key": "cpu:x"}}  # fmt: skip


@given(content=mutated(json.dumps({"pocl": 0.5, "host": 1.25, "pocl:cpu:x": 2}).encode()))
@fuzz(15)
@example(content=b'{"pocl": null}')  # the error named "--price pocl=None" but not the file
def test_a_price_file(scratch, content):
    path = scratch / "prices.json"
    path.write_bytes(content)
    ok, prices = _read_or_named_error(lambda: parse_prices([str(path)], _DEVICES), path)
    if ok:
        assert all(isinstance(v, float) and math.isfinite(v) and v >= 0 for v in prices.values())


@given(content=mutated(_MIXES.read_bytes()))
@fuzz(20)
@example(content=b'{"mine": {"gae": null}}')  # the error named "--mix 'mine'" but not the file
def test_a_mix_file(scratch, content):
    path = scratch / "mixes.json"
    path.write_bytes(content)
    try:
        ok, mixes = _read_or_named_error(lambda: report_mixes.parse_mix(str(path)), path)
    except RuntimeError as exc:  # the mixes clash with the shipped ones: said, naming the file
        assert _names_file(exc, path), exc
        return
    if ok:
        assert all(math.isfinite(v) and v >= 0 for m in mixes.values() for v in m.values())


@given(content=mutated(_CONFIG.read_bytes()))
@fuzz(25)
def test_a_training_config(scratch, content):
    path = scratch / "train_configs.json"
    path.write_bytes(content)
    ok, tasks = _read_or_named_error(lambda: train_config.load(path), path)
    if ok:
        assert tasks and all(t.env_id == k for k, t in tasks.items())


# ---- the tuning cache ---------------------------------------------------------------------------------------
_CACHE_SCRIPT = r"""
import json, sys, warnings
import numpy as np
from portkern import step
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    env = step.make("CartPole-v1", 7, backend="opencl", device=sys.argv[1])
    ref = step.make("CartPole-v1", 7)
    env.reset(seed=4); ref.reset(seed=4)
    for _ in range(3):
        got, want = env.step(np.ones(7, np.int32)), ref.step(np.ones(7, np.int32))
    np.testing.assert_allclose(got[0].get(), want[0], rtol=1e-4, atol=1e-4)
    from portkern import buffer
    r = np.random.default_rng(0).normal(size=(5, 7)).astype(np.float32)
    flags = r > 1.0
    for op, args in (("gae", (r, r, r, flags, flags)), ("discounted_returns", (r, flags, flags, r[0]))):
        kw = {"gamma": 0.9, "lam": 0.8} if op == "gae" else {"gamma": 0.9}
        got, want = getattr(buffer, op)(*args, backend=env.backend, **kw), getattr(buffer, op)(*args, backend="numpy", **kw)
        for g, w in zip(got if op == "gae" else [got], want if op == "gae" else [want]):
            np.testing.assert_allclose(g.get(), w, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(buffer.normalize(r, backend=env.backend).get(), buffer.normalize(r, backend="numpy"),
                               rtol=1e-4, atol=1e-4)
    idx = np.array([3, 0, 34, 7], np.int64)
    np.testing.assert_array_equal(buffer.gather(r.reshape(35, 1), idx, backend=env.backend).get(), r.reshape(35, 1)[idx])
print("STEPPED", json.dumps([str(w.message)[:300] for w in caught]))
"""

_KNOB_VALUES = [0, -1, 3, 7, 32, 1024, 4096, 2**31, 2**64, 1.5, "8", None, True, [8], {"a": 1}]


@st.composite
def mutated_cache(draw) -> bytes:
    """The cache with its structure intact and one knob of a step, rollout or buffer config set to a value no
    tune run writes (what the structure check lets through to the launch), or mutated like any other file."""
    doc = _cache_doc()
    if not doc["devices"] or draw(st.booleans()):
        return draw(mutated(json.dumps(doc).encode()))
    entry = doc["devices"][draw(st.sampled_from(sorted(doc["devices"])))]
    for _ in range(draw(st.integers(1, 3))):
        section = entry[draw(st.sampled_from(["kernels", "families"]))]
        config = section[draw(st.sampled_from(sorted(section)))]
        knob = draw(st.sampled_from(sorted(config) + ["env_vector_width", "local_size", "reduce_wg"]))
        config[knob] = draw(st.sampled_from(_KNOB_VALUES))
    return json.dumps(doc).encode()


def _cache_doc() -> dict:
    """A tuning cache holding the shipped table's rows as entries of this machine's OpenCL devices."""
    from portkern.backends import get_backend
    from portkern.tuning import CACHE_SCHEMA

    rows = list(json.loads(_TABLE.read_text())["rows"].values())
    devices = {}
    for dev in ("pocl", "intel"):
        try:
            b = get_backend("opencl", dev)
        except Exception:
            continue
        entry = {k: v for k, v in rows[0].items() if k != "match"}
        devices[b.tuned_defaults.identity.key] = entry
    return {"schema": CACHE_SCHEMA, "devices": devices}


@given(data=st.data())
@fuzz(5)
def test_a_tuning_cache(scratch, data):
    """A launch reads the cache: whatever it holds, an env steps right (a broken cache is warned about and the
    shipped table applies). In a subprocess: a knob value a driver cannot take must not take pytest down."""
    from tests._fuzz_helpers import _available

    devices = [d for d in ("pocl", "intel") if not _available(("opencl", d))]
    if not devices:
        pytest.skip("no OpenCL CPU driver here")
    content = data.draw(mutated_cache(), label="cache")
    device = data.draw(st.sampled_from(devices), label="device")
    path = scratch / "tuned-defaults.json"
    path.write_bytes(content)
    env = {**os.environ, "PORTKERN_TUNE_CACHE": str(path)}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT, device], env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0 and "STEPPED" in proc.stdout, (
        f"an env on opencl/{device} with this tuning cache did not step ({proc.returncode}):\n{content[:2000]!r}\n"
        f"{proc.stdout[-2000:]}\n{proc.stderr[-3000:]}"
    )
