"""The in-kernel policies (kernels/README.md, "Fused rollouts"; reference: portkern/policy.py):
Philox random actions and the tanh MLP, float32 whatever the env dtype."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from ... import rng
from ...envs.base import EnvSpec
from ...policy import MAX_WIDTH
from .common import Toolkit, simulator

_S8, _S24 = np.uint64(8), np.uint64(24)


@dataclass(frozen=True)
class Policies:
    #: (n_in, n_out) -> device function (policy, hidden, x, y): y[:n_out] = MLP(x[:n_in]), float32; the widths
    #: are the build's constants (an env's obs and action widths), as the CUDA rollouts' template arguments
    mlp: Callable
    mlp_forward: Any  # kernel (policy, hidden, obs [N, obs_dim], out [N, out_dim])


#: Outputs per pass over the second layer where their number is known only at launch (pk_mlp_forward), as
#: PK_MLP_OUTS of pk_policy.cuh; the rollouts make all of theirs in one pass.
MLP_OUTS = 4


def _local_jit() -> Callable:
    """The decorator of device functions that make cuda.local arrays: inlined on a GPU (so the arrays become
    registers), the simulator's device function there (it swaps in its fake ``cuda`` module)."""
    return cuda.jit(device=True) if simulator() else cuda.jit(device=True, forceinline=True)


def tanh_of(k: Toolkit) -> Callable:
    """pk_tanh of pk_policy.cuh and pk_policy.h: an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1)
    above, both computed and one selected, then x's sign; every operation in float32, rounded once.

    Two differences that change no result, so that the simulator (NumPy float32 scalars, Python's ``math.exp``)
    neither warns nor raises where a GPU saturates: the polynomial gets |x| capped at the split, 0.625 (above it
    its result is discarded, and it would overflow float32 from |x| ~ 1e4), and exp gets 2|x| capped at 80 (above
    it 1 - 2 / (e + 1) is 1.0 whether e is e^80 or infinite; ``math.exp`` raises past 709, and the float32 cast
    of its result overflows past 88.7). NaN passes both caps."""
    F, mulf = k.F, k.mulf
    c0, c1, c2, c3, c4 = F(-0.0057000867), F(0.020634588), F(-0.053737253), F(0.13331418), F(-0.33333281)
    f_split, f_one, f_two, f_cap, f_half_cap = F(0.625), F(1), F(2), F(80), F(40)

    @k.djit
    def tanh(x):
        a = abs(x)
        s = f_split if a > f_split else a  # noqa: FURB136 - NaN stays NaN (min would not say)
        s2 = mulf(s, s)
        p = mulf(s2, c0) + c1
        p = mulf(s2, p) + c2
        p = mulf(s2, p) + c3
        p = mulf(s2, p) + c4
        small = s + mulf(s, mulf(s2, p))
        t = f_cap if a > f_half_cap else a + a
        large = f_one - f_two / (F(math.exp(t)) + f_one)
        return F(math.copysign(small if a < f_split else large, x))

    return tanh


def build(k: Toolkit, width: int | None = None) -> Policies:
    """The MLP device functions and forward kernel; ``width``: built for that hidden width (a compile-time
    constant, as PK_MLP_HIDDEN is of the CUDA and OpenCL builds), else for the width passed at run time."""
    if width is None:
        return _build_run_time_width(k)
    return _build_fixed_width(k, int(width))


def _build_fixed_width(k: Toolkit, H: int) -> Policies:
    """pk_policy.cuh's fixed-width MLP: the first layer a hidden unit at a time, the second layer streamed
    (PK_MLP_BLOCK of its units at a time, each straight into the output layer's accumulators), so the second
    hidden layer never exists as an array. Every dot product starts at 0 and adds x[c] * W[c, j] for c
    ascending, then the bias: the same additions in the same order as the run-time-width build.

    Numba has no ``#pragma unroll`` and NVVM leaves loops of 64 units rolled, so a loop over the units would
    index the activations at run time and keep them in local memory (a 256-byte depot at H = 64). The loops
    the C code unrolls are therefore written out here (:func:`_fixed_source`): the H activations are H
    scalars, and only the loop over the second layer's blocks stays a loop, as in pk_policy.cuh."""
    F, mulf = k.F, k.mulf
    ljit = _local_jit()
    names = {"F": F, "mulf": mulf, "tanh": tanh_of(k), "f_zero": F(0), "cuda": cuda}

    def compile_(name: str, source: str, decorate: Callable) -> Any:
        scope = dict(names)
        exec(compile(source, f"<portkern numba MLP {name}, H={H}>", "exec"), scope)  # noqa: S102 - our own text
        return decorate(scope[name])

    @cache
    def mlp_of(n_in: int, n_out: int) -> Callable:
        return compile_("mlp", _fixed_source(H, n_in, n_out), ljit)

    forward = compile_("pk_mlp_forward", _fixed_forward_source(H), cuda.jit)
    return Policies(mlp=mlp_of, mlp_forward=forward)


def _block(H: int) -> int:
    """PK_MLP_BLOCK: the second layer's units made per pass of its loop."""
    return 4 if H % 4 == 0 else 2 if H % 2 == 0 else 1


def _tail_lines(H: int, outs: int, n_out: str, o0: str | None, indent: str) -> list[str]:
    """pk_mlp_tail over the scalars h1_0 .. h1_{H-1}: outputs o0 .. o0 + outs - 1 into acc_0 .. acc_{outs-1} (those
    below n_out: every one where o0 is None, the env kernels' single pass), before their bias."""
    B = _block(H)
    i1, i2 = indent + "    ", indent + "        "
    lines = [f"{indent}w2 = w1_end + {H}", f"{indent}b2 = w2 + {H * H}", f"{indent}w3 = b2 + {H}"]
    lines += [f"{indent}acc_{o} = f_zero" for o in range(outs)]
    lines.append(f"{indent}for j0 in range(0, {H}, {B}):")
    lines += [f"{i1}a_{b} = f_zero" for b in range(B)]
    for c in range(H):
        lines.append(f"{i1}row = w2 + {c * H} + j0")
        lines += [f"{i1}a_{b} = a_{b} + mulf(h1_{c}, policy[row + {b}])" for b in range(B)]
    for b in range(B):
        lines.append(f"{i1}h2 = tanh(a_{b} + policy[b2 + j0 + {b}])")
        lines.append(f"{i1}row3 = w3 + (j0 + {b}) * {n_out}" + (f" + {o0}" if o0 else ""))
        for o in range(outs):
            if o0 is None:
                lines.append(f"{i1}acc_{o} = acc_{o} + mulf(h2, policy[row3 + {o}])")
            else:
                lines += [f"{i1}if {o0} + {o} < {n_out}:", f"{i2}acc_{o} = acc_{o} + mulf(h2, policy[row3 + {o}])"]
    lines.append(f"{indent}b3 = w3 + {H} * {n_out}")
    return lines


def _fixed_source(H: int, n_in: int, n_out: int) -> str:
    """``mlp(policy, hidden, x, y)``: y[0 .. n_out) = MLP(x[0 .. n_in)), every loop but the second layer's written out."""
    lines = ["def mlp(policy, hidden, x, y):",
             "    # policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat);",
             "    # the host launches this build with hidden == H"]  # fmt: skip
    lines += [f"    x_{c} = x[{c}]" for c in range(n_in)]
    for j in range(H):  # the first layer, a hidden unit at a time
        lines.append("    acc = f_zero")
        lines += [f"    acc = acc + mulf(x_{c}, policy[{c * H + j}])" for c in range(n_in)]
        lines.append(f"    h1_{j} = tanh(acc + policy[{n_in * H + j}])")
    lines.append(f"    w1_end = {n_in * H}")
    lines += _tail_lines(H, n_out, str(n_out), None, "    ")
    lines += [f"    y[{o}] = acc_{o} + policy[b3 + {o}]" for o in range(n_out)]
    return "\n".join(lines) + "\n"


def _fixed_forward_source(H: int) -> str:
    """pk_mlp_forward: the first layer one input at a time, read straight from obs (its width is known only at
    launch), the outputs MLP_OUTS at a time, as in mlp.cu."""
    lines = ["def pk_mlp_forward(policy, hidden, obs, out):",
             "    i = cuda.grid(1)",
             "    n, obs_dim = obs.shape",
             "    n_out = out.shape[1]",
             "    if i < n:"]  # fmt: skip
    lines += [f"        h1_{j} = f_zero" for j in range(H)]
    lines += ["        for c in range(obs_dim):", "            xc = F(obs[i, c])", f"            row = c * {H}"]
    lines += [f"            h1_{j} = h1_{j} + mulf(xc, policy[row + {j}])" for j in range(H)]
    lines.append(f"        w1_end = obs_dim * {H}")
    lines += [f"        h1_{j} = tanh(h1_{j} + policy[w1_end + {j}])" for j in range(H)]
    lines.append(f"        for o0 in range(0, n_out, {MLP_OUTS}):")
    lines += _tail_lines(H, MLP_OUTS, "n_out", "o0", "            ")
    for o in range(MLP_OUTS):
        lines += [f"            if o0 + {o} < n_out:", f"                out[i, o0 + {o}] = acc_{o} + policy[b3 + o0 + {o}]"]
    return "\n".join(lines) + "\n"


def _build_run_time_width(k: Toolkit) -> Policies:
    """Any hidden width up to MAX_WIDTH, read at run time: a layer at a time, in per-thread arrays."""
    F, mulf = k.F, k.mulf
    ljit = _local_jit()
    tanh = tanh_of(k)
    f_zero = F(0)

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
                acc = tanh(acc)
            y[j] = acc

    @ljit
    def mlp_rt(policy, hidden, n_in, n_out, x, y):
        # policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat)
        h1 = cuda.local.array(MAX_WIDTH, np.float32)
        h2 = cuda.local.array(MAX_WIDTH, np.float32)
        b1 = n_in * hidden
        w2 = b1 + hidden
        b2 = w2 + hidden * hidden
        w3 = b2 + hidden
        b3 = w3 + hidden * n_out
        mlp_layer(policy, 0, b1, x, n_in, hidden, True, h1)
        mlp_layer(policy, w2, b2, h1, hidden, hidden, True, h2)
        mlp_layer(policy, w3, b3, h2, hidden, n_out, False, y)

    @cache
    def mlp_of(n_in: int, n_out: int) -> Callable:
        @ljit
        def mlp(policy, hidden, x, y):
            mlp_rt(policy, hidden, n_in, n_out, x, y)

        return mlp

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
            mlp_rt(policy, hidden, obs_dim, n_out, x, y)
            for j in range(n_out):
                out[i, j] = y[j]

    return Policies(mlp=mlp_of, mlp_forward=pk_mlp_forward)


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
    F, mulf, uniformf, vmax, cosf = k.F, k.mulf, k.uniformf, k.vmax, k.cosf
    policy_block = _policy_block(k)
    djit = _local_jit()
    obs_dim, f_zero, f_one, f_two, f_neg_two = spec.obs_dim, F(0), F(1), F(2), F(-2)
    f_two_pi = F(2.0 * np.pi)
    if spec.is_discrete:
        n_actions = spec.discrete_actions
        mlp = policies.mlp(obs_dim, n_actions)

        @djit
        def act(policy, kind, hidden, o, seed, i, ep, t):
            c0, _, _, _ = policy_block(seed, i, ep, t, 0)
            if kind == 0:
                return np.int32(((c0 >> _S8) * np.uint64(n_actions)) >> _S24)
            x = cuda.local.array(obs_dim, np.float32)
            e = cuda.local.array(n_actions, np.float32)
            for c in range(obs_dim):
                x[c] = F(o[0, c])
            mlp(policy, hidden, x, e)
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
    mlp = policies.mlp(obs_dim, 1)

    @djit
    def act_box(policy, kind, hidden, o, seed, i, ep, t):
        c0, c1, _, _ = policy_block(seed, i, ep, t, 0)
        if kind == 0:
            return mulf(high, mulf(uniformf(c0), f_two) - f_one)
        x = cuda.local.array(obs_dim, np.float32)
        y = cuda.local.array(1, np.float32)
        for c in range(obs_dim):
            x[c] = F(o[0, c])
        mlp(policy, hidden, x, y)
        log_std = policy[obs_dim * hidden + hidden + hidden * hidden + hidden + hidden + 1]
        # Box-Muller: 1 - u is in (0, 1], so the log is finite.
        u1 = f_one - uniformf(c0)
        u2 = uniformf(c1)
        z = mulf(F(math.sqrt(mulf(f_neg_two, F(math.log(u1))))), F(cosf(mulf(f_two_pi, u2))))
        return y[0] + mulf(F(math.exp(log_std)), z)

    return act_box


def _act_wide(spec: EnvSpec, k: Toolkit, policies: Policies) -> Callable:
    """The action of a Box of A = ``action_dim`` > 1 components (policy._sample_box): the random policy's
    component j is ``high * symmetric`` of word j % 4 of block j // 4; the MLP's is its mean j plus
    ``exp(log_std[0])`` times Box-Muller of words 2 (j % 2), 2 (j % 2) + 1 of block j // 2. Component 0
    is the 1-wide draw; one Philox call per 4 (random) or 2 (MLP) components."""
    F, mulf, uniformf, cosf = k.F, k.mulf, k.uniformf, k.cosf
    policy_block = _policy_block(k)
    djit = _local_jit()
    obs_dim, n_out = spec.obs_dim, spec.action_dim
    mlp = policies.mlp(obs_dim, n_out)
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
        x = cuda.local.array(obs_dim, np.float32)
        y = cuda.local.array(n_out, np.float32)
        for col in range(obs_dim):
            x[col] = F(o[0, col])
        mlp(policy, hidden, x, y)
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
                    z = mulf(F(math.sqrt(mulf(f_neg_two, F(math.log(u1))))), F(cosf(mulf(f_two_pi, u2))))
                    out_actions[row, j] = y[j] + mulf(std, z)

    return act
