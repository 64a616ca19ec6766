"""The benchmark at other structural values of an env (``--links K[,K...]``: Chain-v0 at other link counts):
option checks, kernel names that carry K, a real run holding every K as a kernel of its own, the report's
order and re-tune rows per K, and tuned defaults looked up per K."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from portkern import cli, tuning
from portkern.backends import probe
from portkern.envs import ENVS
from portkern.portability import commands, names, report
from portkern.portability.options import structure_values
from portkern.portability.suite import cases as suite_cases
from portkern.portability.training.mixes import check_mixes
from portkern.runs import Record

ROOT = Path(__file__).resolve().parent.parent
CHAIN = ENVS["Chain-v0"]
LINKS = next(s for s in CHAIN.structure if s.name == "links")
#: Every kernel of the chain a run may name at its default K.
CHAIN_KERNELS = [k for k in names.KERNEL_ORDER if ":Chain-v0" in k]


def _portkern(*args: str) -> subprocess.CompletedProcess:
    # As tests/test_portability_cli.py: a subprocess of the CLI (whose suite runs with -n 0, bench_run.py).
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PORTKERN_MACHINE": "test-machine"}
    return subprocess.run([sys.executable, "-m", "portkern.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)  # fmt: skip


# ---- the option ---------------------------------------------------------------------------------------
def test_links_values_are_distinct_in_the_order_given() -> None:
    assert structure_values("3,10") == {"links": (3, 10)}
    assert structure_values(" 5, 3 ,5") == {"links": (5, 3)}
    assert structure_values(f"{LINKS.low},{LINKS.high}") == {"links": (LINKS.low, LINKS.high)}
    assert structure_values(None) == {} and structure_values("") == {}


@pytest.mark.parametrize("text", [str(LINKS.low - 1), str(LINKS.high + 1), "ten", "3,,5", "3.5", "-4"])
def test_a_bad_links_value_names_the_option_and_the_range(text: str) -> None:
    with pytest.raises(ValueError) as exc:
        structure_values(text)
    msg = str(exc.value)
    assert msg.startswith(f"--links {text}: ") and f"from {LINKS.low} to {LINKS.high}" in msg and "Chain-v0" in msg


@pytest.fixture
def no_suite(monkeypatch):
    """Fails the test if the benchmark suite is started."""

    def run_suite(*args, **kwargs):
        raise AssertionError("the benchmark suite ran although an option was invalid")

    monkeypatch.setattr(commands, "run_suite", run_suite)


@pytest.mark.parametrize("command", ["bench", "tune"])
@pytest.mark.parametrize("args,message", [
    (["--links", "17"], f"--links 17: expected K[,K...] with each K an int from {LINKS.low} to {LINKS.high}"),
    (["--links", ""], "--links: expected K[,K...]"),
    (["--links", "3", "--kernels", "step:Chain-v0/links=10"], "--kernels step:Chain-v0/links=10: links=10 is not "
                                                               "timed in this run; add it to --links (--links 3,10)"),
    (["--kernels", "step:Chain-v0/links=3"], "--kernels step:Chain-v0/links=3: 'Chain-v0/links=3' names 'Chain-v0'"),
    (["--kernels", "step:CartPole-v1/links=4"], "--kernels step:CartPole-v1/links=4: 'CartPole-v1/links=4': links: "
                                                "CartPole-v1 has no structural keywords"),
], ids=["range", "empty", "kernel-K-not-run", "default-K-spelt-out", "env-without-links"])  # fmt: skip
def test_bad_links_fail_before_anything_runs(command, args, message, tmp_path, capsys, no_suite) -> None:
    out = tmp_path / "out"
    assert cli.main([command, *args, "--out", str(out)]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_the_suite_gets_the_links_and_a_run_without_them_is_unchanged() -> None:
    p = cli.build_parser()
    base = ["--quick", "--backend", "numpy"]
    plain = commands.suite_options(p.parse_args(["bench", *base]), tune=False)
    assert not any(a.startswith("--pk-links") for a in plain)
    given = commands.suite_options(p.parse_args(["bench", *base, "--links", "10,3,10"]), tune=False)
    assert [a for a in given if a.startswith("--pk-links")] == ["--pk-links=10,3"]


# ---- names -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("k", range(LINKS.low, LINKS.high + 1))
def test_names_round_trip_at_every_k(k: int) -> None:
    for plain in CHAIN_KERNELS:
        name = names.with_structure(plain, links=k)
        assert (name == plain) == (k == LINKS.default)
        assert names.base_kernel(name) == plain and names.is_kernel(name)
        assert names.kernel_structure(name) == ({} if k == LINKS.default else {"links": k})
        env = name.split(":")[1]
        assert names.split_env(env) == ("Chain-v0", names.kernel_structure(name))
        assert names.env_spec(env) is CHAIN.with_structure(links=k) and tuning.env_label(names.env_spec(env)) == env
        rp, base_rp = names.rollout_parts(name), names.rollout_parts(plain)
        if base_rp is not None:
            assert rp == (env, base_rp[1], base_rp[2])
            assert names.functional_kernel(name) == names.with_structure(names.functional_kernel(plain), links=k)
        assert names.with_structure(name, links=LINKS.default) == plain


def test_a_structural_kernel_is_named_one_way_only() -> None:
    assert names.with_structure("rollout:Chain-v0:fused", links=10) == "rollout:Chain-v0/links=10:fused"
    bad = {"Chain-v0/links=3": "names 'Chain-v0'", "Chain-v0/links=010": "expected <keyword>=<int>",
           "Chain-v0/links=17": f"from {LINKS.low} to {LINKS.high}", "Chain-v0/knots=4": "no structural keyword 'knots'",
           "Chain-v0/links=4/links=5": "links given twice", "CartPole-v1/links=4": "has no structural keywords",
           "Nope-v0/links=4": "unknown env 'Nope-v0'"}  # fmt: skip
    for token, message in bad.items():
        with pytest.raises(ValueError, match=message):
            names.split_env(token)
        assert not names.is_kernel(f"step:{token}")


def test_envs_without_links_are_unaffected() -> None:
    structure = {"links": (3, 10)}
    for k in names.KERNEL_ORDER:
        variants = names.structural_variants(k, structure)
        if ":Chain-v0" in k:
            assert variants == [k, names.with_structure(k, links=10)]
        else:
            assert variants == [k]


def test_reports_list_each_k_after_its_kernel_and_mixes_take_them() -> None:
    kernels = ["rollout:Chain-v0/links=10:fused", "step:Chain-v0/links=10", "gae", "step:Chain-v0/links=5",
               "rollout:Chain-v0:fused", "step:Chain-v0", "step:CartPole-v1"]  # fmt: skip
    assert sorted(kernels, key=names.kernel_rank) == [
        "step:CartPole-v1", "step:Chain-v0", "step:Chain-v0/links=5", "step:Chain-v0/links=10", "gae",
        "rollout:Chain-v0:fused", "rollout:Chain-v0/links=10:fused"]  # fmt: skip
    check_mixes({"k10": {"step:Chain-v0/links=10": 0.5, "gae": 0.5}}, "--mix")
    with pytest.raises(ValueError, match="unknown kernels"):
        check_mixes({"k3": {"step:Chain-v0/links=3": 1.0}}, "--mix")


def test_a_case_is_made_at_the_k_its_name_gives() -> None:
    for k in (LINKS.default, 10):
        spec = CHAIN.with_structure(links=k)
        env = names.env_name("Chain-v0", links=k)
        prep = suite_cases.prepare(_numpy(), f"step:{env}", 8)
        assert (prep.info["structure"], prep.info["obs_dim"], prep.info["action_dim"]) == (
            {"links": k}, spec.obs_dim, spec.action_dim)  # fmt: skip
        assert prep.check().status == "pass"


def _numpy():
    from portkern.backends import get_backend

    return get_backend("numpy")


# ---- a real run and its report ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def two_k_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("two-k")
    done = _portkern("bench", "--quick", "--sizes", "256", "--backend", "numpy", "--kernels", "step:Chain-v0",
                     "--links", "3,5", "--rounds", "2", "--out", str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return out


def test_a_run_times_every_k_as_a_kernel_of_its_own(two_k_run: Path) -> None:
    data = json.loads((two_k_run / "results.json").read_text())
    assert data["portkern"]["structure"] == {"links": [3, 5]}
    cases = {c["kernel"]: c for c in data["portkern"]["cases"]}
    assert set(cases) == {"step:Chain-v0", "step:Chain-v0/links=5"}
    for name, c in cases.items():
        spec = names.env_spec(name.split(":")[1])
        assert c["status"] == "pass" and c["size"] == 256 and c["shape"] == [256]
        assert (c["structure"], c["obs_dim"], c["action_dim"]) == (dict(spec.structure_values), spec.obs_dim,
                                                                    spec.action_dim)  # fmt: skip
        assert c["bytes"] == 256 * suite_cases._step_bytes(name.split(":")[1])  # K's state and observations
        assert len(c["round_s"]) >= 2 and c["items_per_s"] > 0
    assert cases["step:Chain-v0"]["obs_dim"] < cases["step:Chain-v0/links=5"]["obs_dim"]


def test_the_report_of_a_two_k_run_lists_both(two_k_run: Path, tmp_path: Path) -> None:
    done = _portkern("report", str(two_k_run / "results.json"), "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr[-3000:]
    rep = json.loads((tmp_path / "report.json").read_text())
    assert rep["kernels"] == ["step:Chain-v0", "step:Chain-v0/links=5"]
    fn = next(iter(rep["functional"].values()))
    assert {k: fn["kernels"][k]["status"] for k in rep["kernels"]} == dict.fromkeys(rep["kernels"], "pass")
    md = (tmp_path / "report.md").read_text()
    assert "step:Chain-v0/links=5" in md


def test_retune_rows_are_per_k_and_size_class() -> None:
    """Two devices searched at K = 3 and K = 10: a row per K and class, each K's penalty its own."""
    recs = []
    # (device, kernel) -> throughput per env_vector_width: the best width differs between devices at K = 10 only.
    rates = {("A", "step:Chain-v0"): {4: 10.0, 16: 8.0}, ("B", "step:Chain-v0"): {4: 20.0, 16: 10.0},
             ("A", "step:Chain-v0/links=10"): {4: 5.0, 16: 6.0}, ("B", "step:Chain-v0/links=10"): {4: 9.0, 16: 6.0}}
    for (d, k), by_vw in rates.items():
        for size in (4096, 65536):
            for vw, rate in by_vw.items():
                recs.append(Record(k, "opencl", d, size, "pass", {"env_vector_width": vw}, items=size,
                                   round_s=(size / rate,) * 5, round_group=f"{k}@{d}-n{size}"))  # fmt: skip
    rows = report.retune(recs, {"A": {}, "B": {}})
    got = [(r["kernel"], r["size_class"], r["source"], r["target"]) for r in rows]
    assert got == [(k, c, s, t) for k in ("step:Chain-v0", "step:Chain-v0/links=10") for c in ("medium", "small")
                   for s, t in (("A", "B"), ("B", "A"))]  # fmt: skip
    for r in rows:
        tuned = max(rates[(r["source"], r["kernel"])].items(), key=lambda kv: kv[1])[0]
        there, best = rates[(r["target"], r["kernel"])][tuned], max(rates[(r["target"], r["kernel"])].values())
        assert r["config"] == {"env_vector_width": tuned}
        assert r["penalty"] == pytest.approx(1 - there / best)


# ---- tuned defaults per K ------------------------------------------------------------------------------
_OCL = probe("opencl")


@pytest.mark.skipif(not _OCL.available, reason=f"opencl: {_OCL.reason}")
def test_a_launch_at_another_k_reads_that_ks_entry_never_the_default_ks(tmp_path, monkeypatch) -> None:
    from portkern import step
    from portkern.backends import opencl as ocl_mod
    from portkern.backends.opencl import OpenCLBackend

    monkeypatch.setenv("PORTKERN_TUNE_CACHE", str(tmp_path / "cache.json"))
    monkeypatch.delenv("PORTKERN_NO_TUNE_CACHE", raising=False)
    monkeypatch.setattr(tuning, "table", lambda: {"schema": tuning.TABLE_SCHEMA, "rows": {}})
    cpus = [label for _, label in sorted(ocl_mod.device_ids().items()) if OpenCLBackend(label).device_kind() == "cpu"]
    if not cpus:
        pytest.skip("needs an OpenCL CPU device")
    be = OpenCLBackend(cpus[0])
    platform, device, driver = be._device_key()
    entry = {"kernels": {"step:Chain-v0": {"env_vector_width": 4, "local_size": 32},
                         "step:Chain-v0/links=5": {"env_vector_width": 2, "local_size": 64}},
             "families": {"step": {"env_vector_width": 1, "local_size": 128}}}  # fmt: skip
    cache = {"schema": tuning.CACHE_SCHEMA, "devices": {tuning.Identity("opencl", platform, device, driver, "cpu").key:
                                                        entry}}  # fmt: skip
    Path(tuning.cache_path()).write_text(json.dumps(cache))
    be = OpenCLBackend(be.device_name)
    want = {3: ("step:Chain-v0", 4, 32), 5: ("step:Chain-v0/links=5", 2, 64), 10: ("step", 1, 128)}
    for k, (source, vw, ls) in want.items():
        kernel = names.with_structure("step:Chain-v0", links=k)
        got = {knob: be.knob_in_force(knob, kernel, 64) for knob in ("env_vector_width", "local_size")}
        assert {knob: (r.entry, r.value) for knob, r in got.items()} == {"env_vector_width": (source, vw),
                                                                           "local_size": (source, ls)}  # fmt: skip
        # The launches read the entry the case records: spy on the lookups of one reset and one step.
        asked = []
        resolve = be.tuned_defaults.resolve

        def spy(knob, family, kernel=None, size_class=tuning.UNSIZED_CLASS, _resolve=resolve):
            found = _resolve(knob, family, kernel, size_class)
            asked.append((knob, found.entry, found.value))
            return found

        monkeypatch.setattr(be.tuned_defaults, "resolve", spy)
        env = step.make("Chain-v0", 64, backend=be, seed=1, links=k)
        env.reset()
        env.step(be.from_host(np.zeros((64, CHAIN.with_structure(links=k).action_dim), np.float32)))
        monkeypatch.setattr(be.tuned_defaults, "resolve", resolve)
        # (reduce_wg: the action range check's reduction, a buffer op's knob, not the env's)
        assert {a for a in asked if a[0] != "reduce_wg"} == {("env_vector_width", source, vw), ("local_size", source, ls)}
