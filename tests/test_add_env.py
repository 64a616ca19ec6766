"""The add-an-env path, walked as a new contributor walks it: the guide's worked example, built.

docs/extending.md ("Adding an env") shows a variant env of a few lines. These tests write that
very text into a temporary directory, put the directory on ``portkern.envs``' search path (as if
the file had been dropped into portkern/envs/) and rediscover: the variant is a first-class env
(make, reset, step, parity across backends, the shared parity, perturbation, step and rollout
tests) that is not Gymnasium's, and nothing looks it up in Gymnasium. A broken env module takes
down only its own env, by name.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import gymnasium
import numpy as np
import pytest

import portkern
from portkern import _kernels, envs, step
from portkern.backends import get_backend, probe
from portkern.envs.base import variant

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"
SECTION = "## Adding an env"


def guide_example() -> tuple[str, str]:
    """(module name, source) of the worked example in the guide's "Adding an env" section."""
    text = GUIDE.read_text()
    assert SECTION in text, f"docs/extending.md has no section {SECTION!r} (tests/test_env_sources.py points at it)"
    section = text.split(SECTION, 1)[1].split("\n#", 1)[0]
    name = re.search(r"the whole of\s+`portkern/envs/(\w+)\.py`", section)
    code = re.search(r"```python\n(.*?)```", section, re.S)
    assert name and code, "the guide's 'Adding an env' section lost its worked example"
    return name.group(1), code.group(1)


def example_id() -> str:
    return re.search(r'variant\(\s*"([^"]+)"', guide_example()[1]).group(1)


@pytest.fixture
def env_dir(tmp_path):
    """A directory on ``portkern.envs``' search path: modules written there are env modules after
    ``envs.discover()``. Afterwards the registry is the shipped one again."""
    d = tmp_path / "envs"
    d.mkdir()
    saved = list(envs.__path__)
    envs.__path__.append(str(d))
    try:
        yield d
    finally:
        envs.__path__[:] = saved
        for name in [m for m, mod in sys.modules.items() if m.startswith("portkern.envs.")
                     and str(d) in str(getattr(mod, "__file__", ""))]:  # fmt: skip
            del sys.modules[name]
        envs.discover()
        _kernels.load_source.cache_clear()


@pytest.fixture
def example(env_dir):
    """The guide's variant, written from the guide's text and discovered."""
    module, source = guide_example()
    (env_dir / f"{module}.py").write_text(source)
    envs.discover()
    assert not envs.UNAVAILABLE, envs.UNAVAILABLE
    return envs.get(example_id())


@pytest.fixture
def no_gymnasium_lookup(monkeypatch):
    """Fails any Gymnasium lookup of the example's id (portkern/<id> is portkern's own adapter)."""
    vid = example_id()

    def guard(fn):
        def wrapped(env_id, *args, **kwargs):
            assert env_id != vid, f"{vid} is portkern-only, yet something called gymnasium.{fn.__name__}({vid!r})"
            return fn(env_id, *args, **kwargs)

        return wrapped

    for name in ("make", "make_vec", "spec"):
        monkeypatch.setattr(gymnasium, name, guard(getattr(gymnasium, name)))


def _pocl():
    if not probe("opencl").available:
        pytest.fail(f"OpenCL (PoCL) is part of the test extra and unavailable: {probe('opencl').reason}")
    return get_backend("opencl", "pocl")


# ---- the worked example -----------------------------------------------------------------------------
def test_the_guide_example_is_a_declaration_of_a_few_lines():
    _, source = guide_example()
    code = [ln for ln in source.splitlines() if ln.strip() and not ln.startswith('"""')]
    assert len(code) <= 4, f"the worked example has grown to {len(code)} lines of code"


def test_the_example_reuses_its_parents_kernels_and_is_portkern_only(example):
    parent = envs.get("MountainCar-v0")
    assert example.kernel == parent.kernel and example.struct_name == parent.struct_name
    assert example.step is parent.step and example.reset is parent.reset
    assert example.gymnasium_id is None and example.id not in gymnasium.registry
    assert example.defaults["gravity"] == 0.0035 and example.defaults["gravity"] != parent.defaults["gravity"]
    assert example.max_episode_steps == 300
    assert example.id in envs.ENVS and example.id not in envs.gymnasium_envs()
    # One struct per kernel in the generated header: the variant reads its parent's.
    assert _kernels.params_header().count(f"typedef struct {parent.struct_name} ") == 1


def test_the_example_runs_on_numpy_and_pocl_alike(example, no_gymnasium_lookup, rng):
    b = _pocl()
    # A whole episode and past its end (the variant's own limit), in float64 where the device
    # has it, within the shared trajectory test's tolerance.
    n, steps = 333, example.max_episode_steps + 5
    dtype = "float64" if b.supports_float64 else "float32"
    ref = step.make(example.id, n, backend="numpy", seed=3, dtype=dtype)
    dev = step.make(example.id, n, backend=b, seed=3, dtype=dtype)
    parent = step.make("MountainCar-v0", n, backend="numpy", seed=3, dtype=dtype)
    np.testing.assert_array_equal(b.to_host(dev.reset()), ref.reset())
    parent.reset()
    tol = max(example.parity_tolerance[dtype], 1e-9) * 10
    truncated_at = []
    for t in range(steps):
        actions = rng.integers(0, 3, n).astype(np.int32)
        if t == 0:  # the same state and push in the parent's valley: the new gravity moves the car
            moved = parent.step(actions)[0]
        r_obs, r_rew, r_term, r_trunc = ref.step(actions)
        d_obs, d_rew, d_term, d_trunc = (b.to_host(x) for x in dev.step(actions))
        if t == 0:
            assert not np.allclose(r_obs, moved, rtol=0, atol=1e-6)
        np.testing.assert_allclose(d_obs, r_obs, rtol=tol, atol=tol)
        np.testing.assert_array_equal(d_rew, r_rew)
        np.testing.assert_array_equal(d_term, r_term)
        np.testing.assert_array_equal(d_trunc, r_trunc)
        if r_trunc.any():
            truncated_at.append(t + 1)
    assert truncated_at and truncated_at[0] == example.max_episode_steps  # the variant's own limit


def test_the_example_is_registered_with_portkerns_gymnasium_adapter_only(example, no_gymnasium_lookup):
    import portkern.gym

    ours = f"{portkern.gym.NAMESPACE}/{example.id}"
    try:
        with warnings.catch_warnings():  # the shipped ids are registered again, identically
            warnings.simplefilter("ignore")
            portkern.gym.register_envs()  # what `import portkern` does for the envs it finds
        env = gymnasium.make(ours)
        assert env.spec.max_episode_steps == example.max_episode_steps
        obs, _ = env.reset(seed=0)
        assert obs.shape == (example.obs_dim,)
    finally:
        gymnasium.registry.pop(ours, None)  # the variant is gone once this test ends


SHARED_SUITE = ["tests/test_parity.py", "tests/test_perturbation.py", "tests/test_step.py", "tests/test_rollout.py",
                "tests/test_env_sources.py", "tests/test_envs_gymnasium.py", "tests/test_sb3.py",
                "tests/test_gym_adapter.py", "tests/test_render.py"]  # fmt: skip
PLUGIN = '''
"""Puts the guide's variant into portkern.envs before the test modules are collected."""
import os, warnings
import gymnasium
from portkern import envs
envs.__path__.append(os.environ["PK_EXTRA_ENV_DIR"])
envs.discover()
assert not envs.UNAVAILABLE, envs.UNAVAILABLE
import portkern.gym
with warnings.catch_warnings():  # the shipped ids are registered again, identically
    warnings.simplefilter("ignore")
    portkern.gym.register_envs()
VARIANT = os.environ["PK_VARIANT_ID"]
def _guard(fn):
    def wrapped(env_id, *args, **kwargs):
        if env_id == VARIANT:
            raise AssertionError(f"{VARIANT} is portkern-only, yet gymnasium.{fn.__name__}({VARIANT!r}) was called")
        return fn(env_id, *args, **kwargs)
    return wrapped
for _name in ("make", "make_vec", "spec"):
    setattr(gymnasium, _name, _guard(getattr(gymnasium, _name)))
'''


@pytest.mark.slow  # a second pytest process: about a minute on 2 cores
def test_the_example_passes_the_shared_suite(env_dir, tmp_path):
    # The shared tests, collected with the variant in the registry, on the reference, PoCL and the
    # CUDA C run on the CPU (the other backends run the very same cases in the suite proper, for
    # the shipped envs). The Gymnasium parity tests collect no case of it, and the guard fails any
    # Gymnasium lookup of its id.
    module, source = guide_example()
    (env_dir / f"{module}.py").write_text(source)
    (tmp_path / "pk_extra_envs.py").write_text(textwrap.dedent(PLUGIN))
    vid = example_id()
    env = {**os.environ, "PK_EXTRA_ENV_DIR": str(env_dir), "PK_VARIANT_ID": vid,
           "PYTHONPATH": os.pathsep.join(filter(None, (str(tmp_path), os.environ.get("PYTHONPATH"))))}  # fmt: skip
    cmd = [sys.executable, "-m", "pytest", "-q", "-rA", "-n", "0", "-p", "pk_extra_envs", "-p", "no:cacheprovider", *SHARED_SUITE,
           "-k", f"{vid} and not (intel or numba or torch or cupy)", "-o", "addopts="]  # fmt: skip
    res = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    tail = res.stdout[-5000:] + res.stderr[-2000:]
    assert res.returncode == 0, tail
    passed = set(re.findall(r"^PASSED (\S+)", res.stdout, re.M))
    for path in SHARED_SUITE:
        if path != "tests/test_envs_gymnasium.py":
            assert any(t.startswith(path) for t in passed), f"{path} ran no case of {vid}:\n{tail}"
    assert not any(t.startswith("tests/test_envs_gymnasium.py") for t in passed)
    spec = variant(vid, envs.get("MountainCar-v0"))  # the parent's param names
    for p in spec.user_params:  # every param of the variant, moved alone on PoCL, matched the reference
        case = f"test_each_param_alone_moves_every_backend_like_the_reference[opencl-pocl-{vid}-{p.name}]"
        assert any(t.endswith(case) for t in passed), f"{case} did not pass:\n{tail}"
    for kind in ("test_one_step_from_identical_states", "test_trajectory_across_episode_boundaries"):
        assert any(f"{kind}[opencl-pocl-{vid}" in t for t in passed), f"{kind} did not pass on PoCL:\n{tail}"


# ---- a broken env module takes down its env only ----------------------------------------------------
BROKEN = {
    # raises on import: the id comes from its source
    "broken_env": 'from .base import variant\nfrom .mountain_car import SPEC\n'
                  'SPEC = variant("Broken-v0", SPEC, kernel="mountain_carr")\n',
    # imports, but names a kernel no env module has (a typo)
    "typo_kernel": 'from dataclasses import replace\nfrom .mountain_car import SPEC as P\n'
                   'SPEC = replace(P, id="TypoKernel-v0", gymnasium_id=None, kernel="mountian_car")\n',
    # reuses a kernel whose params struct it does not lay out
    "other_struct": 'from dataclasses import replace\nfrom .cartpole import SPEC as C\nfrom .pendulum import SPEC as P\n'
                    'SPEC = replace(P, id="OtherStruct-v0", gymnasium_id=None, kernel=C.kernel)\n',
    # no SPEC at all, and no id to recover: listed by its file
    "no_spec": "X = 1\n",
}  # fmt: skip


def test_a_broken_env_module_fails_its_env_by_name_and_nothing_else(env_dir):
    for name, source in BROKEN.items():
        (env_dir / f"{name}.py").write_text(source)
    envs.discover()  # what `import portkern` runs: it must not raise
    assert set(envs.ENVS) >= {"CartPole-v1", "MountainCar-v0"}
    assert not set(envs.ENVS) & {"Broken-v0", "TypoKernel-v0", "OtherStruct-v0"}
    assert set(envs.UNAVAILABLE) == {"Broken-v0", "TypoKernel-v0", "OtherStruct-v0", "portkern/envs/no_spec.py"}
    with pytest.raises(envs.EnvUnavailable, match=r"'Broken-v0' is unavailable: portkern/envs/broken_env.py failed to "
                                                  r"import: ValueError: .*cannot set kernel"):  # fmt: skip
        step.make("Broken-v0", 2)
    with pytest.raises(envs.EnvUnavailable, match=r"typo_kernel.py: kernel 'mountian_car' is neither"):
        step.make("TypoKernel-v0", 2)
    with pytest.raises(envs.EnvUnavailable, match=r"other_struct.py: its field_names .* pk_cartpole_params"):
        envs.get("OtherStruct-v0")
    with pytest.raises(ValueError, match=r"unknown environment 'Nope-v0'.*unavailable: .*no_spec.py defines no SPEC"):
        envs.get("Nope-v0")
    env = step.make("CartPole-v1", 2)  # every other env works
    env.reset()
    env.step(np.zeros(2, np.int32))


def test_import_portkern_survives_a_broken_env_module(env_dir):
    # The same discovery at import time, in a fresh interpreter: an import hook adds the broken
    # module's directory to portkern.envs' path as the package is created, before it lists itself.
    (env_dir / "broken_env.py").write_text(BROKEN["broken_env"])
    code = textwrap.dedent(f"""
        import importlib.abc, importlib.util, sys
        class Hook(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path, target=None):
                if name != "portkern.envs":
                    return None
                sys.meta_path.remove(self)
                spec = importlib.util.find_spec(name)
                spec.submodule_search_locations.append({str(env_dir)!r})
                return spec
        sys.meta_path.insert(0, Hook())
        import portkern
        print(sorted(portkern.envs.UNAVAILABLE))
        portkern.step.make("CartPole-v1", 2).reset()
        print("ok")
    """)
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["['Broken-v0']", "ok"], res.stdout + res.stderr


# ---- variant() refuses what would not run its parent's kernels -------------------------------------
@pytest.mark.parametrize(("kwargs", "error", "words"), [
    ({"defaults": {"gravty": 0.003}}, ValueError, r"defaults: MountainCar-v0 has no parameter 'gravty'; valid names"),
    ({"defaults": {"reset_center": 0.0}}, ValueError, r"no parameter 'reset_center' \(derived"),
    ({"defaults": {"max_speed": -1.0}}, ValueError, r"X-v0 \(a variant of MountainCar-v0\): Param max_speed: default"),
    ({"defaults": {"reset_low": 0.0}}, ValueError, r"needs reset_low <= reset_high"),
    ({"defaults": {"gravity": "steep"}}, TypeError, r"defaults\['gravity'\]: expected a number"),
    ({"domains": {"gravity": "steep"}}, ValueError, r"unknown domain 'steep'"),
    ({"step": None}, ValueError, r"cannot set step: it reuses MountainCar-v0's kernels"),
    ({"obs_dim": 3}, ValueError, r"cannot set obs_dim"),
    ({"gymnasium_id": "MountainCar-v0"}, ValueError, r"cannot set gymnasium_id"),
    ({"max_episod_steps": 300}, TypeError, r"EnvSpec has no field max_episod_steps"),
])  # fmt: skip
def test_variant_rejects_with_a_clear_error(kwargs, error, words):
    with pytest.raises(error, match=words):
        variant("X-v0", envs.get("MountainCar-v0"), **kwargs)


def test_variant_takes_the_parent_spec_not_its_id():
    with pytest.raises(TypeError, match=r"parent: expected the parent env's EnvSpec"):
        variant("X-v0", "MountainCar-v0")


def test_variant_changes_domains_and_perturbations_by_name():
    parent = envs.get("Pendulum-v1")
    v = variant("PendulumMoon-v0", parent, defaults={"g": 1.62}, domains={"g": "positive"}, perturb={"g": 2.0})
    g = next(p for p in v.user_params if p.name == "g")
    assert (g.default, g.domain, g.perturbed()) == (1.62, "positive", 2.0)
    assert v.field_names == parent.field_names and v.kernel == parent.kernel
    with pytest.raises(ValueError, match=r"params\['g'\]: expected a finite number > 0"):
        v.resolve_params({"g": -1.0})
    assert portkern.envs.get("Pendulum-v1").defaults["g"] == 10.0  # the parent is untouched
