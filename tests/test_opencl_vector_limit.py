"""A PoCL whose compiler targets a CPU without AVX-512, on a CPU whose kernel library uses it: tuned
vector widths are narrowed to 256 bits, widths set by hand above that are refused, results unchanged."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

import portkern
from portkern import buffer, step, tuning
from portkern.backends import get_backend, probe

_PROBE = probe("opencl")
pytestmark = pytest.mark.skipif(not _PROBE.available, reason=f"opencl: {_PROBE.reason}")

if _PROBE.available:
    import pyopencl as cl

    from portkern.backends import opencl as ocl_mod


def _fake(platform: str, version: str, cpu: bool = True):
    dev = SimpleNamespace(type=cl.device_type.CPU if cpu else cl.device_type.GPU, version=version)
    return SimpleNamespace(name=platform), dev


@pytest.mark.parametrize(
    "platform, version, host_avx512, want",
    [
        ("Portable Computing Language", "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", True, 32),
        ("Portable Computing Language", "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", False, None),
        ("Portable Computing Language", "OpenCL 3.0 PoCL HSTR: pthread-x86_64-unknown-linux-gnu-icelake-server", True,
         None),
        ("Intel(R) OpenCL", "OpenCL 3.0 (Build 0)", True, None),
        ("Portable Computing Language", "OpenCL 3.0 PoCL", True, None),  # no HSTR: nothing known
    ],
)
def test_max_vector_bytes_from_the_target_and_the_host(monkeypatch, platform, version, host_avx512, want):
    monkeypatch.setattr(ocl_mod, "_host_has_avx512", lambda: host_avx512)
    assert ocl_mod._max_vector_bytes(*_fake(platform, version)) == want


def test_max_vector_bytes_ignores_gpus(monkeypatch):
    monkeypatch.setattr(ocl_mod, "_host_has_avx512", lambda: True)
    plat, dev = _fake("Portable Computing Language", "PoCL HSTR: pthread-x86_64-unknown-linux-gnu-znver3", cpu=False)
    assert ocl_mod._max_vector_bytes(plat, dev) is None


@pytest.fixture
def limited(monkeypatch):
    """The default OpenCL backend as it runs on such a PoCL (restored afterwards: instances are shared)."""
    b = get_backend("opencl")
    monkeypatch.setattr(b, "max_vector_bytes", 32)
    for knob in ("env_vector_width", "scan_vector_width", "scan_vectors_per_item"):
        monkeypatch.setattr(b, knob, tuning.TUNED)
    return b


def test_tuned_width_is_narrowed_and_recorded(limited):
    b = limited
    opts, vw = b._env_options(np.float32, "step:CartPole-v1", "step")
    assert vw <= 8 and f"-DPK_VW={vw}" in opts
    opts, vw = b._env_options(np.float64, "step:CartPole-v1", "step")
    assert vw <= 4
    assert b.knob_in_force("env_vector_width", "step:CartPole-v1").value <= 8


def test_width_set_by_hand_above_the_limit_is_refused(limited):
    b = limited
    b.env_vector_width = 16
    with pytest.raises(ValueError, match=r"env_vector_width: 16 lanes of float32 .*at most 8"):
        b._env_options(np.float32, "step:CartPole-v1", "step")
    b.scan_vector_width = 8
    with pytest.raises(ValueError, match=r"scan_vector_width: 8 lanes of float64 .*at most 4"):
        b._scan_options("gae", np.dtype(np.float64))


def test_narrowed_widths_give_the_reference_results(limited):
    b = limited
    env = step.make("Pendulum-v1", 64, backend=b, seed=3)
    ref = step.make("Pendulum-v1", 64, backend="numpy", seed=3)
    env.reset(), ref.reset()
    a = np.linspace(-2, 2, 64, dtype=np.float32)[:, None]
    o, *_ = env.step(b.from_host(a))
    r, *_ = ref.step(a)
    np.testing.assert_allclose(portkern.to_numpy(o), r, rtol=1e-5, atol=1e-6)
    x = np.random.default_rng(0).random((8, 100))
    f = np.zeros((8, 100), bool)
    adv, _ = buffer.gae(*(b.from_host(v) for v in (x, x, x, f, f)), gamma=0.9, lam=0.8)
    want, _ = buffer.gae(x, x, x, f, f, gamma=0.9, lam=0.8)
    np.testing.assert_allclose(portkern.to_numpy(adv), want, rtol=1e-12)
