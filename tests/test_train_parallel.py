"""portkern train --parallel-seeds K: K seeds at once on one device (the jax stack), one record per seed with
device_seconds_per_policy, a batch as one journal unit, and H against K in the report."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="portkern train needs PyTorch: pip install 'portkern[train]'")
pytest.importorskip("jax", reason="the jax stack needs JAX: pip install 'portkern[jax]'")

from portkern.cli import main  # noqa: E402
from portkern.journal import journal_path, read  # noqa: E402
from portkern.portability import training  # noqa: E402
from portkern.train import jax_batch, runner  # noqa: E402
from portkern.train.ppo import PHASES  # noqa: E402

from . import train_docs as td  # noqa: E402

SHIPPED = Path(__file__).resolve().parents[1] / "portkern" / "data" / "train_configs.json"
#: Two seeds at once, 3 PPO updates: one compiled chunk program (K = 2), shared by every test here.
GRID = ["train", "--task", "CartPole-v1", "--stack", "jax", "--updates", "3", "--parallel-seeds", "2", "--no-progress"]


@pytest.fixture(autouse=True)
def _one_cpu_device(monkeypatch: pytest.MonkeyPatch) -> None:
    """`portkern train --parallel-seeds` starts JAX with one CPU device per core when it is the first to start it;
    in a test process that would depend on which test ran first and change JAX for every later test."""
    monkeypatch.setattr(jax_batch, "spread_cpu_devices", lambda n: False)


# ---- refusals ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--stack", "numpy", "--parallel-seeds", "2", "--seeds", "1,2"],
     "--parallel-seeds 2: only the jax stack and the torch stacks (torch, torch_compile) train several seeds at once "
     "on one device (vmap over seeds); not numpy"),
    (["--stack", "jax,numpy", "--parallel-seeds", "2", "--seeds", "1,2"], "not numpy"),
    (["--stack", "jax", "--parallel-seeds", "0"], "--parallel-seeds: expected an integer >= 1, got 0"),
    (["--stack", "jax", "--parallel-seeds", "2", "--seeds", "1,2,3"], "3 seed(s) do not split into batches of 2"),
    (["--stack", "jax", "--parallel-seeds", "2", "--seeds", "1,2", "--ray"], "--parallel-seeds 2: not with --ray"),
])  # fmt: skip
def test_parallel_seeds_refusals(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    _assert_refused(tmp_path, capsys, argv, message)


def _assert_refused(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    """``portkern train ... argv`` exits 2 with ``message`` on stderr, before writing a file or a journal."""
    out = tmp_path / "o.json"
    assert main(["train", "--updates", "1", "--out", str(out), *argv]) == 2
    assert message in capsys.readouterr().err
    assert not out.exists() and not journal_path(out).exists()


def test_batch_label_keeps_k_out_of_single_seed_rows() -> None:
    assert jax_batch.batch_label("jax", 1) == "jax"
    assert jax_batch.batch_label("jax", 8) == "jax/8"
    assert jax_batch.batch_label("jax@gpu", 4) == "jax/4@gpu"
    assert training.summary.base_stack({"stack": "jax/4@gpu", "parallel_seeds": 4}) == "jax@gpu"


# ---- a K = 2 smoke run ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def batch(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    out = tmp_path_factory.mktemp("par") / "k2.json"
    assert main([*GRID, "--seeds", "1,2", "--out", str(out)]) == 0
    return json.loads(out.read_text()), out


def test_k2_run_gives_a_record_per_seed(batch: tuple[dict, Path]) -> None:
    doc, out = batch
    training.load_train(out)  # the report's reader takes it
    assert [(r["stack"], r["seed"]) for r in doc["runs"]] == [("jax/2", 1), ("jax/2", 2)]
    assert set(doc["prime_s"]["CartPole-v1"]) == {"jax/2"}
    assert doc["order"].startswith("batch-major")
    for r in doc["runs"]:
        assert r["parallel_seeds"] == 2 and r["batch_seeds"] == [1, 2] and r["batch_updates"] == 3
        assert r["updates"] == 3 and r["env_steps"] == 3 * 32 * 64 and r["stop_reason"] == "step budget"
        # Unconverged: no policy, so no device seconds per policy (the batch's time goes to converged seeds).
        assert "device_seconds_per_policy" in r and r["device_seconds_per_policy"] is None
        assert r["converged"] is False and r["device_hours"] is None
        assert [c[0] for c in r["curve"]] == [1, 2, 3]
        assert r["losses_finite"] and all(math.isfinite(x) for x in r["losses"].values())
        # One fused phase, said so; the phases and the gaps between them add up to the wall time.
        assert set(r["phases"]) == {*PHASES, "fused"} and r["phases"]["fused"] > 0
        assert all(r["phases"][p] == 0 for p in ("act", "env", "adv", "update"))
        assert "fused" in r["phase_note"] and "pro-rated" in r["phase_note"]
        assert abs(r["wall_s"] - sum(r["phases"].values()) - r["untimed_s"]) < 1e-5
        assert 0 <= r["untimed_s"] <= runner.UNTIMED_TOLERANCE * r["wall_s"]
    a, b = doc["runs"]
    assert a["wall_s"] == b["wall_s"] and a["curve"] != b["curve"]  # one batch, two different policies


def test_converged_batch_splits_its_wall_time_over_its_policies(tmp_path: Path) -> None:
    """With a target a random policy meets, both seeds converge at update 1, exactly as the single-seed loop
    decides it (the same window of returns), and the batch stops at the end of that chunk."""
    path = td.easy_config(tmp_path)
    out = tmp_path / "k2.json"
    assert main([*GRID, "--seeds", "3,4", "--config", str(path), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    td.check_batch_converged_at_update_1(doc, k=2)
    # The same seed alone on the jax stack reaches update 1 with the very same returns window.
    single = tmp_path / "single.json"
    assert main(["train", "--task", "CartPole-v1", "--stack", "jax", "--updates", "3", "--no-progress", "--seeds",
                 "3", "--config", str(path), "--out", str(single)]) == 0  # fmt: skip
    one = json.loads(single.read_text())["runs"][0]
    assert one["converged"] and one["updates"] == 1 and one["parallel_seeds"] == 1
    assert one["device_seconds_per_policy"] == one["wall_s"]
    assert one["curve"][0][3:] == doc["runs"][0]["curve"][0][3:]


# ---- journal: a batch is one unit ---------------------------------------------------------------------
def test_interrupted_batch_grid_resumes_without_rerunning_a_finished_batch(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # fmt: skip
    real = jax_batch.train_batch
    calls: list[list[int]] = []

    def stop_on_second(task, spec, seeds, *a, **k):
        calls.append(list(seeds))
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(task, spec, seeds, *a, **k)

    monkeypatch.setattr(jax_batch, "train_batch", stop_on_second)
    out = tmp_path / "grid.json"
    argv = [*GRID, "--seeds", "5,6,7,8", "--out", str(out)]
    assert main(argv) == 130
    assert "interrupted after 2 of 4 runs" in capsys.readouterr().err
    header, records, _ = read(journal_path(out))
    done = [r for r in records if r["status"] == "done"]
    assert header["identity"]["parallel_seeds"] == 2
    assert [r["key"] for r in done] == [["batch", "CartPole-v1", "jax", 5, 6]]
    assert [r["seed"] for r in done[0]["data"]["runs"]] == [5, 6]
    # Another K is another grid: the resume refuses to mix it in.
    assert main([*GRID[:-3], "--parallel-seeds", "4", "--no-progress", "--seeds", "5,6,7,8", "--out", str(out),
                 "--resume"]) == 2  # fmt: skip
    assert "parallel_seeds" in capsys.readouterr().err
    assert main([*argv, "--resume"]) == 0
    assert calls == [[5, 6], [7, 8], [7, 8]]  # the finished batch is not trained again
    doc = json.loads(out.read_text())
    assert [(r["seed"], r["batch_seeds"]) for r in doc["runs"]] == [(5, [5, 6]), (6, [5, 6]), (7, [7, 8]), (8, [7, 8])]
    assert doc["runs"][:2] == done[0]["data"]["runs"] and not journal_path(out).exists()


# ---- the report: H against K ---------------------------------------------------------------------------
def _batch_run(seed: int, k: int, batch_wall: float, converged: int, seeds: list[int]) -> dict:
    r = td.run("CartPole-v1", f"jax/{k}", td.CPU, seed, batch_wall, 100_000, converged=seed in seeds[:converged])
    r.update(parallel_seeds=k, batch_seeds=seeds, phases={**dict.fromkeys(r["phases"], 0.0), "fused": batch_wall},
             untimed_s=0.0, device_seconds_per_policy=batch_wall / converged if seed in seeds[:converged] else None)
    if r["converged"]:
        r["device_hours"] = r["device_seconds_per_policy"] / 3600
    return r


def test_report_shows_h_per_policy_against_k(tmp_path: Path) -> None:
    single = [td.run("CartPole-v1", "jax", td.CPU, s, w, 100_000) for s, w in ((1, 2.0), (2, 3.0), (3, 4.0))]
    for r in single:
        r.update(parallel_seeds=1, device_seconds_per_policy=r["wall_s"])
    # Two batches of 4: 10 s with all 4 converged (2.5 s each), 12 s with 3 converged (4 s each, one seed unconverged).
    batches = [_batch_run(s, 4, 10.0, 4, [1, 2, 3, 4]) for s in (1, 2, 3, 4)]
    batches += [_batch_run(s, 4, 12.0, 3, [5, 6, 7, 8]) for s in (5, 6, 7, 8)]
    doc = td.doc(single + batches)
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    tr = training.summarise([(str(path), training.load_train(path))])
    (g,) = [g for g in tr["groups"] if g["task"] == "CartPole-v1"]
    by = {s["stack"]: s for s in g["stacks"]}
    assert by["jax/4"]["H_s"] == 2.5 and by["jax/4"]["H_s_range"] == [2.5, 4.0]  # the per-policy share, not 10 s
    assert by["jax/4"]["converged"] == 7 and by["jax/4"]["batches"] == 2
    rows = {r["k"]: r for r in g["h_against_k"]}
    assert set(rows) == {1, 4} and rows[1]["H_s"] == 3.0 and rows[4]["vs_smallest_k"] == pytest.approx(2.5 / 3.0)
    md = "\n".join(training.markdown(tr))
    assert "H per converged policy against K" in md
    assert "| jax/4 | 4 | 2 | 7 of 8 | 2.5 [2.5–4] | 0.833x | 100.0% |" in md
    header, rows_md = training.table(g)
    jax4 = next(r for r in rows_md if r[0] == "jax/4")
    assert jax4[header.index("env share")] == "fused"
    # Without several K for one stack there is no such table.
    only = tmp_path / "s.json"
    only.write_text(json.dumps(td.doc(single)))
    tr1 = training.summarise([(str(only), training.load_train(only))])
    assert all(not g["h_against_k"] for g in tr1["groups"])
    assert "against K" not in "\n".join(training.markdown(tr1))


# ---- --refill: a finished seed's slot takes the next seed of the list -----------------------------------
@pytest.mark.parametrize("argv, message", [
    (["--stack", "jax", "--refill", "--seeds", "1,2"], "--refill: only with --parallel-seeds K > 1"),
    (["--stack", "jax", "--parallel-seeds", "4", "--refill", "--seeds", "1,2,3"],
     "--parallel-seeds 4 --refill: 3 seed(s) for 4 slots; give at least 4 seeds"),
    (["--stack", "numpy", "--parallel-seeds", "2", "--refill", "--seeds", "1,2,3"], "only the jax stack"),
])  # fmt: skip
def test_refill_refusals(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
    _assert_refused(tmp_path, capsys, argv, message)


def test_refilled_slot_runs_as_it_would_have_from_the_start() -> None:
    """The K = 2 chunk program the CLI tests use: slot 0 trains seed 1 for a chunk, then takes seed 3 (refill);
    seed 3's next chunk there is bit for bit its first chunk in a batch it started in, and seed 2 in slot 1 goes
    on exactly as in a batch without the refill."""
    import jax
    import numpy as np

    from portkern.backends.registry import get_backend
    from portkern.train import config
    from portkern.train.jax_ppo import Static, init_state

    task = config.task("CartPole-v1")
    st, dev = Static.of(task), get_backend("jax").device
    prog = jax_batch.chunk_program(st)

    def lrs(*firsts: int) -> np.ndarray:
        return np.stack([jax_batch._lrs(task.ppo, f, jax_batch.CHUNK, task.num_updates) for f in firsts])

    def slot(tree, i: int) -> list[np.ndarray]:
        return [np.asarray(x)[i] for x in jax.tree_util.tree_leaves(tree)]

    first, _ = prog(jax_batch._stacked_state(st, [1, 2], dev)[0], lrs(1, 1))
    refilled, out = prog(jax_batch.refill(first, {0: init_state(st, 3)}, dev), lrs(1, 1 + jax_batch.CHUNK))
    fresh, out_fresh = prog(jax_batch._stacked_state(st, [3, 2], dev)[0], lrs(1, 1))
    kept, out_kept = prog(first, lrs(1 + jax_batch.CHUNK, 1 + jax_batch.CHUNK))
    for a, b in zip(slot((refilled, out), 0), slot((fresh, out_fresh), 0)):
        np.testing.assert_array_equal(a, b)  # params, Adam moments, env, ring, returns, losses: all of it
    for a, b in zip(slot((refilled, out), 1), slot((kept, out_kept), 1)):
        np.testing.assert_array_equal(a, b)
    assert int(np.asarray(out["finished"])[0, -1]) > 0  # episodes did finish: the rings compared hold returns


@pytest.fixture
def no_shrink(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep a refilling batch at K slots to the end: the smaller programs of its tail would each compile (tens of
    seconds on a small CPU); the tail's own tests are below."""
    monkeypatch.setattr(jax_batch, "program_sizes", lambda k, n_seeds, spread=1: [k])


def _refill_run(out: Path, seeds: str, *extra: str) -> dict[int, dict]:
    assert main([*GRID, "--refill", "--seeds", seeds, "--out", str(out), *extra]) == 0
    return {r["seed"]: r for r in json.loads(out.read_text())["runs"]}


def test_refill_pool_records_each_seed_on_its_own_budget(batch: tuple[dict, Path], tmp_path: Path,
                                                         no_shrink: None) -> None:  # fmt: skip
    """Three seeds through two slots, 3 updates each (unconverged: the step budget): seed 3 takes the first free
    slot after the first chunk and runs its own 3 updates from update 1 (its own annealing); seeds 1 and 2 ran in
    the slots they had in the plain K = 2 batch, so their curves are that batch's."""
    out = tmp_path / "refill.json"
    assert main([*GRID, "--refill", "--seeds", "1,2,3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    training.load_train(out)
    assert doc["order"].startswith("refill") and set(doc["prime_s"]["CartPole-v1"]) == {"jax/2"}
    runs = {r["seed"]: r for r in doc["runs"]}
    assert [r["seed"] for r in doc["runs"]] == [1, 2, 3]
    for r in runs.values():
        assert r["stack"] == "jax/2" and r["parallel_seeds"] == 2 and r["refill"] is True
        assert r["batch_seeds"] == [1, 2, 3] and r["batch_updates"] == jax_batch.CHUNK + 3
        assert r["updates"] == 3 and r["env_steps"] == 3 * 32 * 64 and r["stop_reason"] == "step budget"
        assert not r["converged"] and r["device_seconds_per_policy"] is None
        assert [c[0] for c in r["curve"]] == [1, 2, 3] and r["losses_finite"]
        assert abs(r["wall_s"] - sum(r["phases"].values()) - r["untimed_s"]) < 1e-5
    assert (runs[1]["slot"], runs[2]["slot"], runs[3]["slot"]) == (0, 1, 0)
    assert all(r["shrunk"] == [] for r in runs.values())
    assert runs[1]["started_at_s"] == runs[2]["started_at_s"] == 0 < runs[3]["started_at_s"] < runs[3]["wall_s"]
    plain = {r["seed"]: r for r in batch[0]["runs"]}
    for s in (1, 2):
        assert [c[3:] for c in runs[s]["curve"]] == [c[3:] for c in plain[s]["curve"]]


def test_converged_refill_pool_splits_its_wall_time_over_all_its_policies(tmp_path: Path, no_shrink: None) -> None:
    cfg = json.loads(SHIPPED.read_text())
    cfg["tasks"]["CartPole-v1"]["target"] = 10.0
    path = tmp_path / "easy.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "k2.json"
    assert main([*GRID, "--refill", "--seeds", "3,4,5", "--config", str(path), "--out", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    for r in runs:
        assert r["converged"] and r["updates"] == 1 and r["steps_to_converge"] == 32 * 64
        assert r["device_seconds_per_policy"] == pytest.approx(r["wall_s"] / 3, abs=1e-5)
        assert r["started_at_s"] < r["converged_at_s"] <= r["wall_s"]
    assert [r["started_at_s"] > 0 for r in runs] == [False, False, True]
    # What a resume must find unchanged says so: a plain K = 2 grid's journal does not resume as a refill one.
    from portkern.train import config

    task = config.task("CartPole-v1")
    ident = [runner.grid_identity([task], [], [3, 4, 5], "c", "u", 2, refill) for refill in (False, True)]
    assert "refill" not in ident[0] and ident[1]["refill"] is True


# ---- the tail: once the list is out, the live seeds go on in a smaller program ----------------------------
def test_program_sizes_halve_only_for_a_refilling_batch_and_keep_every_device_busy() -> None:
    assert jax_batch.program_sizes(2, 3) == [2, 1] and jax_batch.program_sizes(2, 2) == [2]
    assert jax_batch.program_sizes(8, 16, spread=2) == [8, 4, 2] and jax_batch.program_sizes(6, 16) == [6, 3]
    assert jax_batch.program_sizes(8, 8) == [8]


def test_shrinking_batch_keeps_every_seed_on_its_own_slot_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bookkeeping of refills and of the tail's compaction, with a stand-in for the compiled program whose
    seed s meets the target at its own update s: a seed booked another slot's outputs would converge elsewhere."""
    import numpy as np

    from portkern.train import config
    from portkern.train.stacks import parse_stack

    task = config.task("CartPole-v1")
    w, chunk = task.ppo.solve_window, 4

    def program(state: dict, lrs: np.ndarray) -> tuple[dict, dict]:
        seed, u = np.asarray(state["seed"]), np.asarray(state["u"])
        upd = u[:, None] + np.arange(1, chunk + 1)  # (K, chunk): each slot's own update numbers
        solved = (upd >= seed[:, None]) & (lrs > 0)  # lr 0: an idle slot's or a padded update
        ring = np.where(solved, task.target, 0.0)[..., None].repeat(w, axis=-1)
        return {"seed": seed, "u": u + chunk}, {
            "finished": w * upd, "episodes": np.full(upd.shape, w), "ring": ring,
            "return_sum": ring.sum(-1), "losses": np.zeros((*upd.shape, 4))}  # fmt: skip

    monkeypatch.setattr(jax_batch, "chunk_program", lambda st: program)
    monkeypatch.setattr(jax_batch, "init_state", lambda st, seed: {"seed": np.int64(seed), "u": np.int64(0)})
    seeds = [1, 9, 2, 3, 4, 6]
    results, _ = jax_batch.train_batch(task, parse_stack("jax"), seeds, chunk, result_class=runner.RunResult, slots=4)
    by = {r.seed: r for r in results}
    assert all(r.converged and r.updates == r.seed for r in results)
    assert {s: by[s].slot for s in by} == {1: 0, 9: 1, 2: 2, 3: 3, 4: 0, 6: 2}
    # Chunk 1 frees slots 0, 2, 3 (seeds 1, 2, 3): seeds 4 and 6 take 0 and 2, slot 3 idles. Chunk 2 frees
    # slot 0 (seed 4): 2 of 4 slots live, so seeds 9 and 6 go on in a 2-slot program, 9 booked to update 9.
    assert by[9].shrunk == [[2 * chunk, 2]] and by[9].batch_updates == 2 * chunk + 2
    assert by[4].started_at_s == by[6].started_at_s > 0 == by[9].started_at_s
    assert [by[s].device_seconds_per_policy for s in by] == [pytest.approx(by[1].wall_s / 6, abs=1e-6)] * 6


@pytest.mark.slow  # compiles the one-slot program (tens of seconds on a small CPU); the bookkeeping test above is fast
def test_shrunk_tail_trains_its_seed_as_the_full_batch_would(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeds 1, 2, 3 through two slots, 3 updates each: after the first chunk only seed 3 trains, alone in a
    one-slot program (primed with K = 2's), and its record is the one it has when the batch keeps both slots, up
    to float rounding (XLA's kernels for one slot and for two round differently in the last bits)."""
    runs = _refill_run(tmp_path / "shrunk.json", "1,2,3")
    assert all(r["shrunk"] == [[jax_batch.CHUNK, 1]] for r in runs.values())
    assert set(json.loads((tmp_path / "shrunk.json").read_text())["prime_s"]["CartPole-v1"]) == {"jax/2"}
    monkeypatch.setattr(jax_batch, "program_sizes", lambda k, n_seeds, spread=1: [k])
    kept = _refill_run(tmp_path / "kept.json", "1,2,3")
    assert kept[3]["shrunk"] == [] and kept[3]["updates"] == runs[3]["updates"] == 3
    assert [c[3:] for c in runs[3]["curve"]] == [c[3:] for c in kept[3]["curve"]]
    assert runs[3]["losses"] == pytest.approx(kept[3]["losses"], rel=1e-4)
