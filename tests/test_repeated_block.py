"""Repeated blocks of env physics (``portkern.envs._blocks.repeated_block``): the reference's own code everywhere,
and under torch.compile one compiled region that the step calls again instead of 20 inlined copies (Chain-v0's
articulated-body pass), with results equal to the uncompiled calls."""

from __future__ import annotations

import numpy as np
import pytest

from portkern import envs
from portkern.envs import _blocks, _chain_model
from portkern.envs.base import ParamView


def _chain_inputs(n: int, seed: int = 3) -> tuple:
    spec = envs.get("Chain-v0")
    g = np.random.default_rng(seed)
    states = spec.parity_states(g, n)
    k = spec.state_dim // 2
    q = tuple(states[:, j].astype(np.float32) for j in range(k))
    v = tuple(states[:, k + j].astype(np.float32) for j in range(k))
    u = tuple(g.uniform(-1, 1, n).astype(np.float32) for _ in range(k))
    return spec, q, v, u


def test_a_block_without_a_runner_is_the_function_itself(monkeypatch):
    monkeypatch.setattr(_blocks, "_BLOCK_RUNNER", None)
    spec, q, v, u = _chain_inputs(64)
    p = spec.param_vector(spec.defaults, np.float32)
    got = _chain_model._qacc_aba(q, v, u, p)
    want = _chain_model._qacc_aba.__wrapped__(q, v, u, p)
    assert len(got) == len(q)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def test_an_installed_runner_gets_every_block_with_its_region(monkeypatch):
    monkeypatch.setattr(_blocks, "_BLOCKS", [])  # this test's blocks only: the env modules' keep their regions
    monkeypatch.setattr(_blocks, "_BLOCK_RUNNER", None)
    monkeypatch.setattr(_blocks, "_REGION_MAKER", None)
    calls = []

    @_blocks.repeated_block
    def before(x, p):
        return tuple(a + 1 for a in x)

    def runner(block, args):
        calls.append((block.fn.__name__, block.region))
        return block.fn(*args)

    _blocks.install_block_runner(runner, lambda fn: f"region of {fn.__name__}")

    @_blocks.repeated_block
    def after(x, p):
        return tuple(a * 2 for a in x)

    assert before((1, 2), None) == (2, 3) and after((1, 2), None) == (2, 4)
    # Regions are made at install for the blocks marked before it, and when marked for later ones.
    assert calls == [("before", "region of before"), ("after", "region of after")]


torch = pytest.importorskip("torch", reason="the torch backends need PyTorch: pip install 'portkern[torch]'")


def _capture():
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    return graphs, backend


def _tensor_params(spec) -> ParamView:
    kp = spec.param_vector(spec.defaults, np.float32)
    values = torch.tensor([float(getattr(kp, n)) for n in spec.field_names], dtype=torch.float32)
    return ParamView(spec.field_names, values)


def test_a_compiled_chain_step_traces_its_articulated_body_pass_once():
    from portkern.backends import get_backend

    get_backend("torch")  # the torch backends install the runner
    spec, q, v, u = _chain_inputs(33)
    tq, tv, tu = ([torch.from_numpy(a) for a in xs] for xs in (q, v, u))
    stacked = torch.stack(tq), torch.stack(tv), torch.stack(tu)

    def env_step(qs, vs, us, values):
        p = ParamView(spec.field_names, values)
        nq, nv = _chain_model.env_step(tuple(qs.unbind(0)), tuple(vs.unbind(0)), tuple(us.unbind(0)), p)
        return torch.stack(nq), torch.stack(nv)

    graphs, backend = _capture()
    values = _tensor_params(spec)._values
    got = torch.compile(env_step, backend=backend, fullgraph=True)(*stacked, values)
    assert len(graphs) == 1
    code = graphs[0].code
    # FRAME_SKIP RK4 steps x 4 stages: 20 calls of one subgraph, not 20 inlined copies of it.
    assert code.count("torch.ops.higher_order.invoke_subgraph(") == 4 * _chain_model.FRAME_SKIP
    subgraphs = {name for name, _ in graphs[0].named_children() if "subgraph" in name}
    assert len(subgraphs) == 1, subgraphs
    want = env_step(*stacked, values)  # eager: the block is the reference's function
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    # And eager torch is the NumPy reference's arithmetic, to float32 rounding.
    ref_q, ref_v = _chain_model.env_step(q, v, u, spec.param_vector(spec.defaults, np.float32))
    tol = spec.parity_tolerance["float32"]
    np.testing.assert_allclose(want[0].numpy(), np.stack(ref_q), rtol=tol, atol=tol)
    np.testing.assert_allclose(want[1].numpy(), np.stack(ref_v), rtol=tol, atol=tol)


def test_a_block_on_arguments_it_cannot_stack_runs_inline(monkeypatch):
    """Tuples of differently shaped arrays (or params that are not one tensor) are not a region's inputs:
    the runner calls the function, inlined into the graph as before."""
    from portkern.backends import get_backend

    get_backend("torch")
    monkeypatch.setattr(_blocks, "_BLOCKS", list(_blocks._BLOCKS))
    calls = []

    @_blocks.repeated_block
    def block(x, p):
        calls.append(len(x))
        return tuple(a * 2 for a in x)

    spec = envs.get("Chain-v0")

    def f(a, b, values):
        return block((a, b), ParamView(spec.field_names, values))

    graphs, backend = _capture()
    a, b = torch.ones(3), torch.ones(4)
    out = torch.compile(f, backend=backend, fullgraph=True)(a, b, _tensor_params(spec)._values)
    assert "invoke_subgraph" not in graphs[0].code
    torch.testing.assert_close(out[1], 2 * b)
    assert calls == [2]  # traced once, inline
