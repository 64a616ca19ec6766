"""The in-kernel policies (kernels/README.md, "Fused rollouts"; reference: portkern/policy.py):
Philox random actions and the tanh MLP, float32 whatever the env dtype."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from numba import cuda

from ... import rng
from ...envs.base import EnvSpec
from ...policy import MAX_WIDTH
from .common import Toolkit

_S8, _S24 = np.uint64(8), np.uint64(24)


@dataclass(frozen=True)
class Policies:
    mlp: Callable  # (policy, hidden, n_in, n_out, x, y): y = MLP(x), float32
    mlp_forward: Any  # kernel (policy, hidden, obs [N, obs_dim], out [N, out_dim])


def build(k: Toolkit, width: int | None = None) -> Policies:
    """The MLP device function and forward kernel; ``width``: built for that hidden width (a compile-time
    constant, as PK_MLP_HIDDEN is of the CUDA and OpenCL builds), else for the width passed at run time."""
    F, mulf = k.F, k.mulf
    djit = cuda.jit(device=True)  # for the functions that take cuda.local arrays
    f_zero = F(0)
    H = MAX_WIDTH if width is None else int(width)

    @k.djit
    def mlp_layer(policy, w, b, x, n_in, n_out, use_tanh, y):
        # y = x @ W + b, W [n_in, n_out] row-major at policy[w:]: each dot product starts at 0 and adds
        # x[k] * W[k, j] in index order (policy._dot), then the bias.
        for j in range(n_out):
            acc = f_zero
            for c in range(n_in):
                acc = acc + mulf(x[c], policy[w + c * n_out + j])
            acc = acc + policy[b + j]
            if use_tanh:
                acc = F(math.tanh(acc))
            y[j] = acc

    @djit
    def hidden_layer(policy, w, b, x, n_in, y):
        # The width-H build's hidden layer: the inputs outside, the H accumulators inside. H is a constant
        # of this build, so NVVM unrolls the inner loops and keeps the accumulators in registers (PTX for
        # sm_90 of CartPole's and Pendulum's rollout kernels: local depots of 256 bytes at width 64 and 128
        # at 32, against 512 for the run-time width). The same additions in the same order as mlp_layer:
        # each acc[j] starts at 0 and adds x[c] * W[c, j] for c ascending, then the bias.
        acc = cuda.local.array(H, np.float32)
        for j in range(H):
            acc[j] = f_zero
        for c in range(n_in):
            xc = x[c]
            r = w + c * H
            for j in range(H):
                acc[j] = acc[j] + mulf(xc, policy[r + j])
        for j in range(H):
            y[j] = F(math.tanh(acc[j] + policy[b + j]))

    # What the two builds differ in: the width the layout is computed with, and the hidden layers' loops.
    if width is None:

        @k.djit
        def width_of(hidden):
            return hidden

        @djit
        def tanh_layer(policy, w, b, x, n_in, n_out, y):
            mlp_layer(policy, w, b, x, n_in, n_out, True, y)

    else:

        @k.djit
        def width_of(hidden):
            return H  # the host launches this build with hidden == H

        @djit
        def tanh_layer(policy, w, b, x, n_in, n_out, y):
            hidden_layer(policy, w, b, x, n_in, y)

    @djit
    def mlp(policy, hidden, n_in, n_out, x, y):
        # policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat)
        hidden = width_of(hidden)
        h1 = cuda.local.array(H, np.float32)
        h2 = cuda.local.array(H, np.float32)
        b1 = n_in * hidden
        w2 = b1 + hidden
        b2 = w2 + hidden * hidden
        w3 = b2 + hidden
        b3 = w3 + hidden * n_out
        tanh_layer(policy, 0, b1, x, n_in, hidden, h1)
        tanh_layer(policy, w2, b2, h1, hidden, hidden, h2)
        mlp_layer(policy, w3, b3, h2, hidden, n_out, False, y)

    @cuda.jit
    def pk_mlp_forward(policy, hidden, obs, out):
        i = cuda.grid(1)
        n, obs_dim = obs.shape
        if i < n:
            x = cuda.local.array(MAX_WIDTH, np.float32)
            y = cuda.local.array(MAX_WIDTH, np.float32)
            for c in range(obs_dim):
                x[c] = F(obs[i, c])
            n_out = out.shape[1]
            mlp(policy, hidden, obs_dim, n_out, x, y)
            for j in range(n_out):
                out[i, j] = y[j]

    return Policies(mlp=mlp, mlp_forward=pk_mlp_forward)


def make_act(spec: EnvSpec, k: Toolkit, policies: Policies) -> Callable:
    """The rollout's policy step ``act(policy, kind, hidden, o, seed, i, ep, t, out_actions, row)``: writes
    the env's action at obs ``o[0, :obs_dim]`` to ``out_actions[row]`` (a Box of ``action_dim`` > 1: its
    row of components), where the rollout kernel reads the action it steps with.

    Philox key (seed, env), counter (episode, steps, 1, block); ``kind`` 0 is the random policy, 1 the MLP
    (policy.Policy.kind).
    """
    if not spec.is_discrete and spec.action_dim > 1:
        return _act_wide(spec, k, policies)
    draw = _draw(spec, k, policies)

    @k.djit
    def act(policy, kind, hidden, o, seed, i, ep, t, out_actions, row):
        out_actions[row] = draw(policy, kind, hidden, o, seed, i, ep, t)

    return act


def _policy_block(k: Toolkit) -> Callable:
    """``block(seed, i, ep, t, b)``: the 4 words of Philox block ``b`` of the policy stream, key (seed, env i),
    counter (episode, step, rng.STREAM_POLICY, b)."""
    philox, stream = k.philox, np.uint64(rng.STREAM_POLICY)

    @k.djit
    def block(seed, i, ep, t, b):
        return philox(np.uint64(ep), np.uint64(t), stream, np.uint64(b), np.uint64(seed), np.uint64(i))

    return block


def _draw(spec: EnvSpec, k: Toolkit, policies: Policies) -> Callable:
    """The action of a discrete or 1-wide Box env, from counter block 0."""
    F, mulf, uniformf, vmax, mlp = k.F, k.mulf, k.uniformf, k.vmax, policies.mlp
    policy_block = _policy_block(k)
    djit = cuda.jit(device=True)
    obs_dim, f_zero, f_one, f_two, f_neg_two = spec.obs_dim, F(0), F(1), F(2), F(-2)
    f_two_pi = F(2.0 * np.pi)
    if spec.is_discrete:
        n_actions = spec.discrete_actions

        @djit
        def act(policy, kind, hidden, o, seed, i, ep, t):
            c0, _, _, _ = policy_block(seed, i, ep, t, 0)
            if kind == 0:
                return np.int32(((c0 >> _S8) * np.uint64(n_actions)) >> _S24)
            x = cuda.local.array(MAX_WIDTH, np.float32)
            e = cuda.local.array(MAX_WIDTH, np.float32)
            for c in range(obs_dim):
                x[c] = F(o[0, c])
            mlp(policy, hidden, obs_dim, n_actions, x, e)
            m = e[0]
            for c in range(1, n_actions):
                m = vmax(m, e[c])
            total = f_zero
            for c in range(n_actions):
                e[c] = F(math.exp(e[c] - m))
                total = total + e[c]
            # Inverse CDF of the softmax: the first k whose partial sum exceeds u * total, else the last.
            threshold = mulf(uniformf(c0), total)
            acc = f_zero
            for c in range(n_actions - 1):
                acc = acc + e[c]
                if threshold < acc:
                    return np.int32(c)
            return np.int32(n_actions - 1)

        return act

    high = F(spec.action_high)

    @djit
    def act_box(policy, kind, hidden, o, seed, i, ep, t):
        c0, c1, _, _ = policy_block(seed, i, ep, t, 0)
        if kind == 0:
            return mulf(high, mulf(uniformf(c0), f_two) - f_one)
        x = cuda.local.array(MAX_WIDTH, np.float32)
        y = cuda.local.array(MAX_WIDTH, np.float32)
        for c in range(obs_dim):
            x[c] = F(o[0, c])
        mlp(policy, hidden, obs_dim, 1, x, y)
        log_std = policy[obs_dim * hidden + hidden + hidden * hidden + hidden + hidden + 1]
        # Box-Muller: 1 - u is in (0, 1], so the log is finite.
        u1 = f_one - uniformf(c0)
        u2 = uniformf(c1)
        z = mulf(F(math.sqrt(mulf(f_neg_two, F(math.log(u1))))), F(math.cos(mulf(f_two_pi, u2))))
        return y[0] + mulf(F(math.exp(log_std)), z)

    return act_box


def _act_wide(spec: EnvSpec, k: Toolkit, policies: Policies) -> Callable:
    """The action of a Box of A = ``action_dim`` > 1 components (policy._sample_box): the random policy's
    component j is ``high * symmetric`` of word j % 4 of block j // 4; the MLP's is its mean j plus
    ``exp(log_std[0])`` times Box-Muller of words 2 (j % 2), 2 (j % 2) + 1 of block j // 2. Component 0
    is the 1-wide draw; one Philox call per 4 (random) or 2 (MLP) components."""
    F, mulf, uniformf, mlp = k.F, k.mulf, k.uniformf, policies.mlp
    policy_block = _policy_block(k)
    djit = cuda.jit(device=True)
    obs_dim, n_out = spec.obs_dim, spec.action_dim
    random_blocks, mlp_blocks = (n_out + 3) // 4, (n_out + 1) // 2
    f_one, f_two, f_neg_two, f_two_pi = F(1), F(2), F(-2), F(2.0 * np.pi)
    high = F(spec.action_high)

    @djit
    def act(policy, kind, hidden, o, seed, i, ep, t, out_actions, row):
        if kind == 0:
            for block in range(random_blocks):
                c = policy_block(seed, i, ep, t, block)
                for w in range(4):
                    j = 4 * block + w
                    if j < n_out:
                        out_actions[row, j] = mulf(high, mulf(uniformf(c[w]), f_two) - f_one)
            return
        x = cuda.local.array(MAX_WIDTH, np.float32)
        y = cuda.local.array(MAX_WIDTH, np.float32)
        for col in range(obs_dim):
            x[col] = F(o[0, col])
        mlp(policy, hidden, obs_dim, n_out, x, y)
        # log_std follows w3 [hidden, A] and b3 [A] (MLPPolicy.flat); one value for every component.
        log_std = policy[obs_dim * hidden + hidden + hidden * hidden + hidden + hidden * n_out + n_out]
        std = F(math.exp(log_std))
        for block in range(mlp_blocks):
            c = policy_block(seed, i, ep, t, block)
            for half in range(2):
                j = 2 * block + half
                if j < n_out:
                    # Box-Muller: 1 - u is in (0, 1], so the log is finite.
                    u1 = f_one - uniformf(c[2 * half])
                    u2 = uniformf(c[2 * half + 1])
                    z = mulf(F(math.sqrt(mulf(f_neg_two, F(math.log(u1))))), F(math.cos(mulf(f_two_pi, u2))))
                    out_actions[row, j] = y[j] + mulf(std, z)

    return act
