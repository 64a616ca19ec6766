"""Rollout-buffer kernels (time-major [T, N]; reference: portkern/backends/numpy.py) and the
device-side checks behind argument validation (index range, finiteness)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np
from numba import cuda

from .common import Toolkit


@dataclass(frozen=True)
class BufferKernels:
    gae: Any  # (rewards, values, next_values, terminated, truncated, advantages, returns, gamma, gamma_lam)
    returns: Any  # (rewards, terminated, truncated, bootstrap [T, N] or [1, N], out, gamma, per_step_bootstrap)
    norm_partial: Any  # (x, pcount, pmean, pm2): one (count, mean, M2) per block
    norm_finalize: Any  # (pcount, pmean, pm2, stats, groups): one block
    norm_apply: Any  # (x, out, stats, eps, n)


def build(k: Toolkit, wg: int) -> BufferKernels:
    """The buffer kernels of dtype ``k.T``; ``wg`` is normalize's block size (a power of two)."""
    T, mul, dmul, zero, one = k.T, k.mul, k.dmul, k.zero, k.one
    djit = cuda.jit(device=True)  # for block_reduce, which uses cuda.shared and cuda.syncthreads

    @cuda.jit
    def pk_gae(rewards, values, next_values, terminated, truncated, advantages, returns, gamma, gamma_lam):
        i = cuda.grid(1)
        steps, n = rewards.shape
        if i < n:
            last = zero
            for t in range(steps - 1, -1, -1):
                # The flags multiply, as in the reference, so a non-finite value propagates the same way.
                nonterminal = zero if terminated[t, i] else one
                notdone = zero if (terminated[t, i] or truncated[t, i]) else one
                v = values[t, i]
                delta = rewards[t, i] + mul(mul(gamma, next_values[t, i]), nonterminal) - v
                last = delta + mul(mul(gamma_lam, notdone), last)
                advantages[t, i] = last
                returns[t, i] = last + v

    @cuda.jit
    def pk_discounted_returns(rewards, terminated, truncated, bootstrap, out, gamma, per_step_bootstrap):
        # bootstrap is [T, N] (per_step_bootstrap: the value of each step's final obs, used wherever a
        # step truncated) or [1, N] (the value after the last step; a truncation mid-rollout ends the
        # return with no bootstrap), as the per_step_bootstrap argument of the other APIs' kernel.
        i = cuda.grid(1)
        steps, n = rewards.shape
        if i < n:
            running = zero
            for t in range(steps - 1, -1, -1):
                if t == steps - 1 or (per_step_bootstrap and truncated[t, i]):
                    nxt = bootstrap[t if per_step_bootstrap else 0, i]
                elif truncated[t, i]:
                    nxt = zero
                else:
                    nxt = running
                running = rewards[t, i] + mul(mul(gamma, nxt), zero if terminated[t, i] else one)
                out[t, i] = running

    @k.djit
    def chan(na, ma, qa, nb, mb, qb):
        # Chan, Golub & LeVeque's pairwise update in float64; counts stay exact integers.
        if nb == 0:
            return na, ma, qa
        n = np.uint32(na + nb)
        delta = mb - ma
        fa, fb, fn = np.float64(na), np.float64(nb), np.float64(n)
        return n, ma + dmul(delta, fb / fn), qa + qb + dmul(dmul(delta, delta), fa * fb / fn)

    @djit
    def block_reduce(c, m, q):
        sc = cuda.shared.array(wg, np.uint32)
        sm = cuda.shared.array(wg, np.float64)
        sq = cuda.shared.array(wg, np.float64)
        tid = cuda.threadIdx.x
        sc[tid], sm[tid], sq[tid] = c, m, q
        stride = wg // 2
        while stride > 0:
            cuda.syncthreads()
            if tid < stride:
                sc[tid], sm[tid], sq[tid] = chan(sc[tid], sm[tid], sq[tid],
                                                 sc[tid + stride], sm[tid + stride], sq[tid + stride])  # fmt: skip
            stride //= 2
        cuda.syncthreads()
        return sc[0], sm[0], sq[0]

    @cuda.jit
    def pk_normalize_partial(x, pcount, pmean, pm2):
        # Welford over a grid-stride slice in float64 (the reference accumulates in float64).
        c, m, q = np.uint32(0), 0.0, 0.0
        j = cuda.grid(1)
        stride = cuda.gridsize(1)
        while j < x.size:
            v = np.float64(x[j])
            c = np.uint32(c + np.uint32(1))
            d = v - m
            m = m + d / np.float64(c)
            q = q + dmul(d, v - m)
            j += stride
        c, m, q = block_reduce(c, m, q)
        if cuda.threadIdx.x == 0:
            b = cuda.blockIdx.x
            pcount[b], pmean[b], pm2[b] = c, m, q

    @cuda.jit
    def pk_normalize_finalize(pcount, pmean, pm2, stats, groups):
        c, m, q = np.uint32(0), 0.0, 0.0
        g = cuda.threadIdx.x
        while g < groups:
            c, m, q = chan(c, m, q, pcount[g], pmean[g], pm2[g])
            g += wg
        c, m, q = block_reduce(c, m, q)
        if cuda.threadIdx.x == 0:
            stats[0] = T(m)
            stats[1] = T(math.sqrt(q / np.float64(c))) if c else zero

    @cuda.jit
    def pk_normalize_apply(x, out, stats, eps, n):
        # The reference's roundings: (x - T(mean)) / (T(std) + T(eps)).
        j = cuda.grid(1)
        if j < n:
            out[j] = (x[j] - stats[0]) / (stats[1] + eps)

    return BufferKernels(gae=pk_gae, returns=pk_discounted_returns,
                         norm_partial=pk_normalize_partial, norm_finalize=pk_normalize_finalize,
                         norm_apply=pk_normalize_apply)  # fmt: skip


@dataclass(frozen=True)
class CopyKernels:
    """Kernels that only move or inspect elements: one build serves every dtype."""

    gather: Any  # (x [M, L], indices [B], out [B, L]): out[b] = x[indices[b]]
    index_range: Any  # (x [n] int, out [2] int64 = (INT64_MAX, INT64_MIN)): atomic min / max
    any_nonfinite: Any  # (x [n] float, flag [1] int32 = 0): sets 1 if any element is NaN or inf


@cache
def copy_kernels() -> CopyKernels:
    @cuda.jit
    def pk_gather(x, indices, out):
        j = cuda.grid(1)
        row_len = x.shape[1]
        if j < out.shape[0] * row_len:
            b = j // row_len
            c = j - b * row_len
            out[b, c] = x[indices[b], c]

    @cuda.jit
    def pk_index_range(x, out):
        # On the device: validating actions every step must not copy the whole array to the host.
        i = cuda.grid(1)
        if i < x.size:
            v = np.int64(x[i])
            cuda.atomic.min(out, 0, v)
            cuda.atomic.max(out, 1, v)

    @cuda.jit
    def pk_any_nonfinite(x, flag):
        i = cuda.grid(1)
        if i < x.size and not math.isfinite(x[i]):
            flag[0] = 1  # every writer stores the same value, so the race is benign

    return CopyKernels(gather=pk_gather, index_range=pk_index_range, any_nonfinite=pk_any_nonfinite)
