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
     "--parallel-seeds 2: only the jax stack trains several seeds at once on one device (vmap over seeds); not numpy"),
    (["--stack", "jax,numpy", "--parallel-seeds", "2", "--seeds", "1,2"], "not numpy"),
    (["--stack", "jax", "--parallel-seeds", "0"], "--parallel-seeds: expected an integer >= 1, got 0"),
    (["--stack", "jax", "--parallel-seeds", "2", "--seeds", "1,2,3"], "3 seed(s) do not split into batches of 2"),
    (["--stack", "jax", "--parallel-seeds", "2", "--seeds", "1,2", "--ray"], "--parallel-seeds 2: not with --ray"),
])  # fmt: skip
def test_parallel_seeds_refusals(tmp_path: Path, capsys, argv: list[str], message: str) -> None:
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
    cfg = json.loads(SHIPPED.read_text())
    cfg["tasks"]["CartPole-v1"]["target"] = 10.0
    path = tmp_path / "easy.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "k2.json"
    assert main([*GRID, "--seeds", "3,4", "--config", str(path), "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    for r in doc["runs"]:
        assert r["converged"] and r["updates"] == 1 and r["steps_to_converge"] == 32 * 64
        assert r["device_seconds_per_policy"] == pytest.approx(r["wall_s"] / 2, abs=1e-5)
        assert r["device_hours"] == pytest.approx(r["device_seconds_per_policy"] / 3600)
        assert len(r["curve"]) == 1 and r["curve"][0][3] >= 10.0
        assert 0 < r["converged_at_s"] <= r["wall_s"]
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
