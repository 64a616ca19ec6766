"""Rollout cases: one rollout of T steps of N envs along one data path (host, device, fused), checked against
the host path's buffer on the same device (the host path itself against the NumPy reference)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import numpy as np

from ...backends import Backend
from ...identity import bench_class
from ...policy import MLPPolicy, Policy, RandomPolicy, RolloutBuffer
from ...step import VectorEnv, make
from ..names import env_spec, split_env
from .kernels import RolloutKernel, rollout_kernel
from .knobs import config_id, current_config
from .prepared import PARITY_STEPS, SEED, Parity, Prepared, _compare

MLP_HIDDEN = 64
MLP_FLIP_SHARE = 1e-3  # most envs whose sampled MLP action may flip within float rounding (see _compare_paths)
#: Backends whose data paths agree to rounding, not bitwise (identity.bench_class(...).exact_paths False: torch.compile fuses
#: each path's ops differently): a rollout's floats match the host path's at RTOL/ATOL for PARITY_STEPS steps,
#: then within this drift bound, which the rounding of T chaotic steps stays under (torch_compile's Pendulum,
#: T = 32: 2.8e-5) and a wrong step, reset or path does not (errors of the size of the state).
DRIFT_RTOL, DRIFT_ATOL = 1e-3, 1e-3
#: A chaotic env (Chain-v0) amplifies that rounding until, after tens of steps, some trajectories leave the
#: drift bound: JAX's fused Chain-v0 rollout differs from its host path by an ulp from step 1 (XLA fuses the
#: step differently inside its scan) and, at T = 128 and N = 1,024, 125 envs cross the bound from step 83 on,
#: by up to 20x per step. Such an env ends its comparison at the crossing, like an MLP action flip, when its
#: error was already at least this share of the bound one step before: amplified rounding grows into the bound,
#: a wrong step jumps into it from a rounding-sized error (1e-7 of the bound's 1e-3).
CHAOS_PRECURSOR = 0.01

FIELDS = ("obs", "actions", "rewards", "terminated", "truncated", "final_obs")
_HOST_REFS: OrderedDict[tuple[Any, ...], dict[str, np.ndarray]] = OrderedDict()
_HOST_REFS_KEPT = 4  # device and fused cases of one (env, policy, N) share the host path's buffer


def make_env(env: str, n: int, **options: Any) -> VectorEnv:
    """``make`` of a kernel name's env part: the env at the structural values it names (``Chain-v0/links=10``
    -> ``make("Chain-v0", n, links=10)``), the defaults for a plain id."""
    env_id, structure = split_env(env)
    return make(env_id, n, **options, **structure)


def reset_staggered(env: VectorEnv) -> None:
    """``env.reset()``, then the envs spread over their episodes: each env's step counter set to a seeded draw in
    [0, limit), as in a long run whose episodes have drifted apart. From a plain reset every env truncates on the
    same step (a random or fixed policy rarely ends MountainCar's, Pendulum's or Acrobot's episodes sooner), so
    one launch in ``limit`` resets all N at once (torch's MountainCar-v0 step at 16,384 envs: 4.4 ms against 0.28 ms) and a
    case's rounds caught that launch or not as their launch counts fell: the same case measured 0.36 ms in one
    run and 0.63 ms in the next. Staggered, about N / limit envs reset on every launch, the steady state."""
    env.reset()
    limit = env.spec.max_episode_steps
    if not limit or limit < 2:
        return
    counts = np.random.default_rng(SEED + 1).integers(0, limit, env.num_envs).astype(np.int32)
    env._bufs.steps = env.backend.assign(env._bufs.steps, counts)


def structure_info(spec: Any) -> dict[str, Any]:
    """A case's record of the structure it ran at (an env with structural keywords: its values and the sizes
    they give); {} for an env without any, whose records stay as they were."""
    if not spec.structure:
        return {}
    return {"structure": dict(spec.structure_values), "obs_dim": spec.obs_dim, "action_dim": spec.action_dim}


def _policy(name: str, env_id: str) -> Policy:
    return MLPPolicy.init(env_spec(env_id), hidden=MLP_HIDDEN, seed=SEED) if name == "mlp" else RandomPolicy()


def _host_copy(b: Backend, buf: RolloutBuffer) -> dict[str, np.ndarray]:
    return {f: np.array(a) if isinstance(a := getattr(buf, f), np.ndarray) else b.to_host(a) for f in FIELDS}


def _seeded_rollout(b: Backend | str, rk: RolloutKernel, n: int, steps: int, path: str,
                    spl: int | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    env = make_env(rk.env, n, backend=b, seed=SEED)
    env.reset()
    buf = env.rollout(steps, _policy(rk.policy, rk.env), path=path, steps_per_launch=spl)
    return _host_copy(env.backend, buf)


def _host_reference(b: Backend, rk: RolloutKernel, n: int, steps: int) -> dict[str, np.ndarray]:
    """The host path's buffer on ``b`` from a seeded reset, kept for the other paths of the same case."""
    key = (b.name, b.device_name, rk.env, rk.policy, n, steps, config_id(current_config(f"step:{rk.env}", b)))
    if key not in _HOST_REFS:
        _HOST_REFS[key] = _seeded_rollout(b, rk, n, steps, "host")
        while len(_HOST_REFS) > _HOST_REFS_KEPT:
            _HOST_REFS.popitem(last=False)
    _HOST_REFS.move_to_end(key)
    return _HOST_REFS[key]


def _compare_paths(got: dict[str, np.ndarray], want: dict[str, np.ndarray], discrete: bool, exact: bool,
                   drift: bool = False) -> Parity:  # fmt: skip
    """A rollout buffer against the host path's on the same device.

    ``exact`` (random policy): every field bit for bit. Otherwise (MLP: the host path runs the policy in
    NumPy, the kernel in-device, so tanh/exp may differ by an ulp): floats to RTOL/ATOL, flags exactly,
    and a discrete action that flips where the sampling threshold falls within rounding of a softmax
    boundary ends the comparison of that env (its trajectory legitimately diverges from there); at most
    MLP_FLIP_SHARE of the envs may flip. ``drift`` (a backend whose paths agree to rounding only): floats at
    RTOL/ATOL for the first PARITY_STEPS steps, then within DRIFT_RTOL/DRIFT_ATOL; flags exactly throughout.
    """
    if exact:
        problems = [f"{f}: {int(np.count_nonzero(got[f] != want[f]))} of {want[f].size} values differ"
                    for f in FIELDS if got[f].shape != want[f].shape or not np.array_equal(got[f], want[f])]  # fmt: skip
        worst = max((float(np.nanmax(np.abs(got[f].astype(np.float64) - want[f].astype(np.float64))))
                     for f in FIELDS if got[f].shape == want[f].shape and got[f].size), default=0.0)  # fmt: skip
        return Parity("fail", worst, "; ".join(problems)) if problems else Parity("pass", worst)
    steps, n = want["rewards"].shape
    if discrete:
        flipped = got["actions"] != want["actions"]  # [T, N]
        first = np.where(flipped.any(axis=0), flipped.argmax(axis=0), steps)  # first flipped step per env
    else:
        first = np.full(n, steps)
    t = np.arange(steps)[:, None]
    diverged = _chaotic_divergence(got, want, steps, n) if drift else np.full(n, steps)
    cut = diverged < first
    first = np.minimum(first, diverged)
    # The obs acted on at a flip must still agree; at a divergence, that obs is where it left the bound.
    before, upto = t < first, (t <= first) & ~(cut & (t == first))
    parts, later = [], []
    for f in FIELDS:
        mask = upto if f == "obs" else before
        if drift and got[f].dtype != np.bool_:
            early = mask & (t < PARITY_STEPS).reshape((steps,) + (1,) * (mask.ndim - 1))
            parts.append((f, got[f][early], want[f][early]))
            later.append((f"{f} after step {PARITY_STEPS}", got[f][mask & ~early], want[f][mask & ~early]))
        else:
            parts.append((f, got[f][mask], want[f][mask]))
    parity = _compare(parts)
    if later:
        drifted = _compare(later, DRIFT_RTOL, DRIFT_ATOL)
        parity = Parity("fail" if "fail" in (parity.status, drifted.status) else "pass",
                        max(parity.max_error or 0.0, drifted.max_error or 0.0),
                        "; ".join(x for x in (parity.reason, drifted.reason) if x))  # fmt: skip
    flips = (first < steps) & ~cut
    share = float(np.mean(flips))
    if share > MLP_FLIP_SHARE:
        reason = f"discrete actions flip in {share:.2%} of the envs (more than rounding explains)"
        return Parity("fail", parity.max_error, "; ".join(x for x in (parity.reason, reason) if x))
    if parity.status == "pass":
        notes = []
        if share:
            notes.append(f"{int(np.sum(flips))} of {n} envs flip an action within rounding")
        if cut.any():
            notes.append(f"{int(np.sum(cut))} of {n} envs diverge by amplified rounding from step "
                         f"{int(diverged[cut].min())} on")
        if notes:
            parity.reason = "; ".join(notes) + ", compared up to it"
    return parity


def _chaotic_divergence(got: dict[str, np.ndarray], want: dict[str, np.ndarray], steps: int, n: int) -> np.ndarray:
    """Per env, the step at which amplified rounding carries its floats out of the drift bound (``steps``: never):
    the first step after PARITY_STEPS beyond the bound whose previous step's error was already at least
    CHAOS_PRECURSOR of it (see there). An env that jumps out of the bound is not cut: the comparison fails it."""
    ratio = np.zeros((steps, n))
    for f in FIELDS:
        w = want[f]
        if w.dtype == np.bool_ or got[f].shape != w.shape or w.shape[:2] != (steps, n):
            continue
        w64 = w.astype(np.float64)
        r = np.abs(got[f].astype(np.float64) - w64) / (DRIFT_ATOL + DRIFT_RTOL * np.abs(w64))
        r = np.where(np.isnan(r), np.inf, r).reshape(steps, n, -1).max(axis=2)
        ratio = np.maximum(ratio, r)
    over = ratio > 1.0
    over[:PARITY_STEPS] = False
    cross = np.where(over.any(axis=0), over.argmax(axis=0), steps)
    env = np.nonzero(cross < steps)[0]
    grown = ratio[cross[env] - 1, env] >= CHAOS_PRECURSOR  # cross >= PARITY_STEPS >= 1
    out = np.full(n, steps)
    out[env[grown]] = cross[env[grown]]
    return out



def _rollout_bytes(env_id: str) -> int:
    """Compulsory bytes per env step: the buffer written once (obs, final obs, action, reward, two flags)."""
    spec = env_spec(env_id)
    return 2 * 4 * spec.obs_dim + 4 + 4 + 2


def _prepare_rollout(b: Backend, kernel: str, n: int, steps: int, config: dict[str, Any] | None) -> Prepared:
    rk = rollout_kernel(kernel)
    assert rk is not None
    spl = (config or {}).get("steps_per_launch") if rk.path == "fused" else None
    spl = {"fused": steps if spl is None else int(spl), "device": 1, "host": None}[rk.path]
    if spl is not None and not 1 <= spl <= steps:
        raise ValueError(f"steps_per_launch: expected an int in [1, {steps}], got {spl}")
    env = make_env(rk.env, n, backend=b, seed=SEED)
    policy = _policy(rk.policy, rk.env)
    buf = env.rollout_buffer(steps, host=rk.path == "host")  # preallocated: the timing is the rollout only
    reset_staggered(env)

    def run() -> None:  # continues from wherever the previous rollout left the envs (autoreset)
        env.rollout(steps, policy, buf, path=rk.path, steps_per_launch=spl)

    def check() -> Parity:
        if rk.path == "host":
            # The host loop against the NumPy reference from a seeded reset, for as long as float
            # rounding cannot move a trajectory across a threshold (the step kernels' parity rule).
            short = min(PARITY_STEPS, steps)
            got, want = (_seeded_rollout(x, rk, n, short, "host") for x in (b, "numpy"))
            return _compare([(f, got[f], want[f]) for f in FIELDS])
        env.reset(seed=SEED)
        run()
        got = _host_copy(b, buf)
        reset_staggered(env)  # the timed rollouts start from the staggered episodes again
        exact = bench_class(b.name).exact_paths
        return _compare_paths(got, _host_reference(b, rk, n, steps), env_spec(rk.env).is_discrete,
                              exact=rk.policy == "random" and exact, drift=not exact)  # fmt: skip

    info = {"env": rk.env, "path": rk.path, "policy": rk.policy, "T": steps, "N": n, "steps_per_launch": spl,
            **structure_info(env_spec(rk.env))}  # fmt: skip
    return Prepared(run, check, n * steps, n * steps * _rollout_bytes(rk.env), "env steps", (steps, n), info)
