/* In-kernel policies of fused rollouts, as portkern/policy.py: Philox random and a two-layer tanh
 * MLP, float32 whatever REAL is, over the PK_VW lanes of pk_vec.h (one env per lane; the weights
 * are the same for every lane). The caller passes the draw and the obs already cast to float. */
#ifndef PK_POLICY_H
#define PK_POLICY_H

#include "pk_common.h"

/* Widest hidden layer, input and output: the activations live in private arrays of this size. */
#define PK_MLP_MAX 64
#define PK_POLICY_RANDOM 0
#define PK_POLICY_MLP 1

/* uint32 -> [0, 1) from the top 24 bits, as rng.uniform: exact in float. */
static inline FV pk_uniform_v(UV b)
{
    return PK_CONVERT(FV, b >> 8) * 5.9604644775390625e-08f;
}

/* One dense layer: y = x @ W + b, W [in, out] row-major. Each dot product starts at 0 and adds
 * x[k] * W[k, j] in index order (policy._dot), then the bias, so it rounds as the reference. */
static inline void pk_mlp_layer(__global const float *w, __global const float *b, const FV *x, int in,
                         int out, int use_tanh, FV *y)
{
    for (int j = 0; j < out; ++j) {
        FV acc = (FV)(0.0f);
        for (int k = 0; k < in; ++k)
            acc = acc + x[k] * w[k * out + j];
        acc = acc + b[j];
        y[j] = use_tanh ? tanh(acc) : acc;
    }
}

#ifdef PK_MLP_HIDDEN
/* The same layer with its width fixed at compile time, for the hidden layers when the host builds with
 * PK_MLP_HIDDEN (the policy's hidden width; one build per width): the loop over inputs outside, the
 * PK_MLP_HIDDEN accumulators inside, unrolled, so they can live in registers and each input is read
 * once. Every acc[j] still starts at 0 and adds x[k] * W[k, j] in index order, then the bias: the same
 * rounding as pk_mlp_layer. On CUDA the run-time-width arrays sit in local memory (ptxas: a 512-byte
 * frame per rollout kernel; the first H200 run's MLP rollouts ~90x slower than the random policy's). */
static inline void pk_mlp_layer_fixed(__global const float *w, __global const float *b, const FV *x, int in,
                               FV *y)
{
    FV acc[PK_MLP_HIDDEN];
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j)
        acc[j] = (FV)(0.0f);
    for (int k = 0; k < in; ++k) {
        const FV xk = x[k];
        __global const float *row = w + k * PK_MLP_HIDDEN;
#pragma unroll
        for (int j = 0; j < PK_MLP_HIDDEN; ++j)
            acc[j] = acc[j] + xk * row[j];
    }
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j)
        y[j] = tanh(acc[j] + b[j]);
}
#endif

/* policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std [1] (MLPPolicy.flat). */
static inline void pk_mlp(__global const float *policy, int hidden, int in, int out, const FV *x, FV *y)
{
#ifdef PK_MLP_HIDDEN
    hidden = PK_MLP_HIDDEN; /* the host builds with the width it launches with */
    FV h1[PK_MLP_HIDDEN], h2[PK_MLP_HIDDEN];
#else
    FV h1[PK_MLP_MAX], h2[PK_MLP_MAX];
#endif
    __global const float *w1 = policy;
    __global const float *b1 = w1 + in * hidden;
    __global const float *w2 = b1 + hidden;
    __global const float *b2 = w2 + hidden * hidden;
    __global const float *w3 = b2 + hidden;
    __global const float *b3 = w3 + hidden * out;
#ifdef PK_MLP_HIDDEN
    pk_mlp_layer_fixed(w1, b1, x, in, h1);
    pk_mlp_layer_fixed(w2, b2, h1, hidden, h2);
#else
    pk_mlp_layer(w1, b1, x, in, hidden, 1, h1);
    pk_mlp_layer(w2, b2, h1, hidden, hidden, 1, h2);
#endif
    pk_mlp_layer(w3, b3, h2, hidden, out, 0, y);
}

/* Discrete actions from draws b: uniform, or an inverse-CDF sample of the MLP's softmax. */
static inline IV pk_policy_discrete(__global const float *policy, int kind, int hidden, const FV *x,
                             int in, int n_actions, pk_bits b)
{
    /* (b >> 8) * n < 2^32 for n <= 256, so 32 bits hold the reference's 64-bit product */
    if (kind == PK_POLICY_RANDOM)
        return PK_CONVERT(IV, ((b.x >> 8) * (uint)n_actions) >> 24);
    FV e[PK_MLP_MAX];
    pk_mlp(policy, hidden, in, n_actions, x, e);
    FV m = e[0];
    for (int k = 1; k < n_actions; ++k)
        m = fmax(m, e[k]);
    FV total = (FV)(0.0f);
    for (int k = 0; k < n_actions; ++k) {
        e[k] = exp(e[k] - m);
        total = total + e[k];
    }
    const FV threshold = pk_uniform_v(b.x) * total;
    /* Partial sums in order, then the first k with threshold < sum (the last if none, as when
     * rounding leaves the threshold above every partial sum). */
    FV acc = (FV)(0.0f);
    for (int k = 0; k < n_actions - 1; ++k) {
        acc = acc + e[k];
        e[k] = acc;
    }
    IV action = (IV)(n_actions - 1);
    for (int k = n_actions - 2; k >= 0; --k)
        action = select(action, (IV)(k), threshold < e[k]);
    return action;
}

/* A standard normal by Box-Muller from two draws, as policy._sample_box (pk_policy_continuous
 * spells the same out). */
static inline FV pk_box_muller(UV b1, UV b2)
{
    const FV u1 = 1.0f - pk_uniform_v(b1); /* (0, 1]: the log is finite */
    const FV u2 = pk_uniform_v(b2);
    return sqrt(-2.0f * log(u1)) * cos(6.28318530717958647692f * u2);
}

/* Continuous actions from draws b: high * (2u - 1), or the MLP mean plus Box-Muller noise. */
static inline FV pk_policy_continuous(__global const float *policy, int kind, int hidden, const FV *x,
                               int in, float high, pk_bits b)
{
    if (kind == PK_POLICY_RANDOM)
        return high * (pk_uniform_v(b.x) * 2.0f - 1.0f);
    FV mean;
    pk_mlp(policy, hidden, in, 1, x, &mean);
    const float log_std = policy[in * hidden + hidden + hidden * hidden + hidden + hidden + 1];
    const FV u1 = 1.0f - pk_uniform_v(b.x); /* (0, 1]: the log is finite */
    const FV u2 = pk_uniform_v(b.y);
    const FV z = sqrt(-2.0f * log(u1)) * cos(6.28318530717958647692f * u2);
    return mean + exp(log_std) * z;
}

/* The dim > 1 components y of a Box action, as policy._sample_box: the draws of component j come
 * from Philox block (the 4th counter word) j / 4 for the random policy, word j % 4 of it, and j / 2
 * for the MLP, words 2 (j % 2) and 2 (j % 2) + 1. So component 0 draws exactly what a 1-wide
 * action does, and a work-item computes one block per 4 (or 2) components. The other counter
 * words and the key are pk_philox_v's: (c0, c1, policy stream), (seed, env). */
static inline void pk_policy_box(__global const float *policy, int kind, int hidden, const FV *x, int in,
                          int dim, float high, UV c0, UV c1, uint seed, UV env, FV *y)
{
    if (kind == PK_POLICY_RANDOM) {
        for (int j = 0; j < dim; j += 4) {
            const pk_bits b = pk_philox_block_v(c0, c1, PK_STREAM_POLICY, (uint)(j / 4), seed, env);
            const UV words[4] = {b.x, b.y, b.z, b.w};
            for (int w = 0; w < 4 && j + w < dim; ++w)
                y[j + w] = high * (pk_uniform_v(words[w]) * 2.0f - 1.0f);
        }
        return;
    }
    pk_mlp(policy, hidden, in, dim, x, y);
    const float log_std = policy[in * hidden + hidden + hidden * hidden + hidden + hidden * dim + dim];
    const float std = exp(log_std);
    for (int j = 0; j < dim; j += 2) {
        const pk_bits b = pk_philox_block_v(c0, c1, PK_STREAM_POLICY, (uint)(j / 2), seed, env);
        y[j] = y[j] + std * pk_box_muller(b.x, b.y);
        if (j + 1 < dim)
            y[j + 1] = y[j + 1] + std * pk_box_muller(b.z, b.w);
    }
}

#endif
