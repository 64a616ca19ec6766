/* In-kernel policies of fused rollouts, as portkern/policy.py: Philox random and a two-layer tanh
 * MLP, float32 whatever REAL is, over the PK_VW lanes of pk_vec.h (one env per lane; the weights
 * are the same for every lane). The caller passes the draw and the obs already cast to float. */
#ifndef PK_POLICY_H
#define PK_POLICY_H

#include "pk_common.h"

/* Widest hidden layer, input and output of the run-time-width build: its activations live in private
 * arrays of this size. */
#define PK_MLP_MAX 64
#define PK_POLICY_RANDOM 0
#define PK_POLICY_MLP 1

/* Which MLP a build has. PK_MLP_HIDDEN=H: the hidden width fixed at compile time (the backends' default,
 * one build per width in use), every activation in registers. PK_MLP_RUNTIME_WIDTH: any width up to
 * PK_MLP_MAX chosen at launch, the activations in per-work-item arrays (private memory on a GPU: the
 * labelled comparison build). Neither: the random policy only, so the kernels of the random policy and
 * the env's step and reset carry no MLP code, no arrays and no scratch; the host builds an MLP policy's
 * kernels with one of the two defines, and a build without them acts at random whatever the kind. */
#if defined(PK_MLP_HIDDEN) || defined(PK_MLP_RUNTIME_WIDTH)
#define PK_HAS_MLP 1
#endif

/* Outputs computed per pass over the second layer in the fixed-width build: the env kernels define it as
 * their action count (or Box width) before including this header, so one pass makes them all. */
#ifndef PK_MLP_OUTS
#define PK_MLP_OUTS 4
#endif

/* Intel GPUs: the SIMD width of the heavy kernels (16 lanes a hardware thread), set where IGC's own choice spilled.
 * PK_MLP_SIMD16, every Intel GPU, the kernels with the MLP: at SIMD32 Xe-HPC's 128 registers hold 64 floats a lane,
 * fewer than the first hidden layer alone (IGC spilled every MLP rollout: "spilled around 142-316"), and Xe-HPG
 * fell back to SIMD8; at SIMD16 they fit. PK_XEHPC_SIMD16, Xe-HPC only, the step and the random policy's rollout:
 * IGC's default there is SIMD32, at which Acrobot's, Pendulum's, CartPole's and Chain-v0's rollouts and Chain-v0's
 * step spilled (7-104); SIMD16 is Xe-HPC's native width. Xe-HPG keeps its own choice for those (forced to SIMD16,
 * Acrobot's and Chain-v0's spilled; it picks SIMD8 without spilling). OpenCL C names no device, so Xe-HPC is told
 * apart as the Intel GPU with float64 (cl_khr_fp64; Xe-HPG has none). CPU drivers pick their own width. */
#if defined(cl_intel_required_subgroup_size) && !defined(PK_CPU_DEVICE)
#define PK_INTEL_SIMD16 __attribute__((intel_reqd_sub_group_size(16)))
#else
#define PK_INTEL_SIMD16
#endif
#if defined(PK_HAS_MLP)
#define PK_MLP_SIMD16 PK_INTEL_SIMD16
#else
#define PK_MLP_SIMD16
#endif
#if defined(cl_khr_fp64)
#define PK_XEHPC_SIMD16 PK_INTEL_SIMD16
#else
#define PK_XEHPC_SIMD16
#endif

/* PK_PIN(v), on AMD GPUs: an empty asm statement that takes v in a VGPR, so clang must have v made by then, and
 * keeps such statements in order. The layers are unrolled straight-line code of 64 units, and without it clang
 * scheduled all the units' products, or all their tanh, ahead of the adds that consume them: 64 temporaries on
 * top of the 64 activations (pk_mlp_forward 241 VGPRs, 2 waves a SIMD on gfx942). Pinned unit by unit, the
 * same code needs 87 (5 waves). No instruction is added and the values are unchanged. Other compilers keep
 * their order (the macro is empty there). */
#ifdef __AMDGCN__
#define PK_PIN(v) __asm__ volatile("" : "+v"(v))
#else
#define PK_PIN(v) ((void)0)
#endif

/* AMD GPUs, the fixed-width MLP's float builds: ask clang for 4 waves a SIMD (at most 128 VGPRs on gfx90a and
 * gfx942); MountainCar's rollout then takes 106 VGPRs where clang chose 127. An env whose rollout would spill
 * held to that defines ENV_MLP_OWN_WAVES (Chain-v0: 130-132 VGPRs, 3 waves, its physics' peak beside the
 * policy's Box-Muller; held to 128 it spilled 2). The float64 builds keep clang's choice (the HIP twin spilled
 * there when held to 128). Other compilers: empty. */
#if defined(__AMDGCN__) && defined(PK_MLP_HIDDEN) && !defined(PK_DOUBLE) && !defined(ENV_MLP_OWN_WAVES)
#define PK_MLP_AMD_WAVES __attribute__((amdgpu_waves_per_eu(4)))
#else
#define PK_MLP_AMD_WAVES
#endif

/* uint32 -> [0, 1) from the top 24 bits, as rng.uniform: exact in float. */
static inline FV pk_uniform_v(UV b)
{
    return PK_CONVERT(FV, b >> 8) * 5.9604644775390625e-08f;
}

#ifdef PK_HAS_MLP
/* tanh in float32 without a branch: an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) above (the
 * split and coefficients of ROCm's device library), both computed and one selected, then x's sign. Within 1.7
 * ulp of the exact tanh over float32 (checked against float64 on a dense sweep of [-12, 12] and 10^-30 ..
 * 20); OpenCL's tanh may be 5 ulp off, and differs between drivers. Why not the builtin: ROCm's branches
 * on |x| per lane, and its 64 divergent branches a layer made clang keep both sides' results, ~2 VGPRs a
 * hidden unit (190-256 VGPRs in every MLP rollout); every driver then also computes the same function. */
static inline FV pk_tanh(FV x)
{
    const FV a = fabs(x);
    const FV a2 = a * a;
    FV p = a2 * -0.0057000867f + 0.020634588f;
    p = a2 * p + -0.053737253f;
    p = a2 * p + 0.13331418f;
    p = a2 * p + -0.33333281f;
    const FV small = a + a * (a2 * p);
    const FV large = 1.0f - 2.0f / (exp(a + a) + 1.0f);
    return copysign(select(large, small, a < 0.625f), x);
}
#endif

#ifdef PK_MLP_HIDDEN
/* ---- the fixed-width MLP: every activation in registers, on every GPU ---------------------------
 * policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat).
 *
 * A dense layer y = x @ W + b computes each y[j] as a dot product that starts at 0, adds x[k] * W[k, j]
 * in index order, then the bias (policy._dot): every function below keeps that order, so the results
 * are bit for bit those of the layer-at-a-time form (pk_mlp_layer) and of the reference.
 *
 * The live values are what decide whether a GPU spills. Layer at a time, the second layer holds its H
 * inputs and its H outputs at once (2H = 128 floats a lane at H = 64): NVIDIA put both arrays in a
 * 256-byte stack frame, AMD needed 240-256 VGPRs (1-2 waves a SIMD) and scratch, Intel spilled. Here
 * the second layer is streamed: its units are made PK_MLP_BLOCK at a time from the H first-layer
 * values and each goes straight into the output layer's accumulators, so the second hidden layer never
 * exists as an array and the peak is H + PK_MLP_BLOCK + PK_MLP_OUTS floats a lane. The loop over the
 * blocks stays a loop (unrolled, it is H x H multiply-adds of code); inside it the H inputs are
 * unrolled, so h1 is indexed by constants and stays in registers. The weights are the same for every
 * work-item: a GPU reads them as uniform (scalar or broadcast) loads, PK_MLP_BLOCK contiguous floats of
 * a row of W2 at a time. */
#if PK_MLP_HIDDEN % 4 == 0
#define PK_MLP_BLOCK 4
#elif PK_MLP_HIDDEN % 2 == 0
#define PK_MLP_BLOCK 2
#else
#define PK_MLP_BLOCK 1
#endif

/* The first layer, one input at a time: pk_mlp_h1_init, pk_mlp_h1_add for k = 0 .. in - 1, pk_mlp_h1_end. */
static inline void pk_mlp_h1_init(FV *h1)
{
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j)
        h1[j] = (FV)(0.0f);
}

static inline void pk_mlp_h1_add(FV *h1, __global const float *w1, int k, FV xk)
{
    __global const float *row = w1 + k * PK_MLP_HIDDEN;
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        h1[j] = h1[j] + xk * row[j];
        PK_PIN(h1[j]);
    }
}

static inline void pk_mlp_h1_end(FV *h1, __global const float *b1)
{
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        h1[j] = pk_tanh(h1[j] + b1[j]);
        PK_PIN(h1[j]);
    }
}

/* Outputs o0 .. o0 + PK_MLP_OUTS - 1 (those below out) of the second and output layers from h1, into y. */
static inline void pk_mlp_tail(__global const float *w2, int out, int o0, const FV *h1, FV *y)
{
    __global const float *b2 = w2 + PK_MLP_HIDDEN * PK_MLP_HIDDEN;
    __global const float *w3 = b2 + PK_MLP_HIDDEN;
    __global const float *b3 = w3 + PK_MLP_HIDDEN * out;
    FV acc[PK_MLP_OUTS];
#pragma unroll
    for (int o = 0; o < PK_MLP_OUTS; ++o)
        acc[o] = (FV)(0.0f);
#pragma unroll 1
    for (int j0 = 0; j0 < PK_MLP_HIDDEN; j0 += PK_MLP_BLOCK) {
        FV a[PK_MLP_BLOCK];
#pragma unroll
        for (int b = 0; b < PK_MLP_BLOCK; ++b)
            a[b] = (FV)(0.0f);
#pragma unroll
        for (int k = 0; k < PK_MLP_HIDDEN; ++k) {
            __global const float *row = w2 + k * PK_MLP_HIDDEN + j0;
#pragma unroll
            for (int b = 0; b < PK_MLP_BLOCK; ++b) {
                a[b] = a[b] + h1[k] * row[b];
                PK_PIN(a[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < PK_MLP_BLOCK; ++b) {
            const FV h2 = pk_tanh(a[b] + b2[j0 + b]);
            __global const float *row3 = w3 + (j0 + b) * out + o0;
#pragma unroll
            for (int o = 0; o < PK_MLP_OUTS; ++o)
                if (o0 + o < out)
                    acc[o] = acc[o] + h2 * row3[o];
        }
    }
#pragma unroll
    for (int o = 0; o < PK_MLP_OUTS; ++o)
        if (o0 + o < out)
            y[o] = acc[o] + b3[o0 + o];
}

static inline void pk_mlp(__global const float *policy, int hidden, int in, int out, const FV *x, FV *y)
{
    (void)hidden; /* the host builds with the width it launches with */
    FV h1[PK_MLP_HIDDEN];
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        FV acc = (FV)(0.0f);
#pragma unroll
        for (int k = 0; k < in; ++k) {
            acc = acc + x[k] * policy[k * PK_MLP_HIDDEN + j];
            PK_PIN(acc);
        }
        h1[j] = pk_tanh(acc + policy[in * PK_MLP_HIDDEN + j]);
        PK_PIN(h1[j]);
    }
    __global const float *w2 = policy + in * PK_MLP_HIDDEN + PK_MLP_HIDDEN;
    for (int o0 = 0; o0 < out; o0 += PK_MLP_OUTS)
        pk_mlp_tail(w2, out, o0, h1, y + o0);
}

#elif defined(PK_MLP_RUNTIME_WIDTH)
/* ---- the run-time-width MLP: any hidden width up to PK_MLP_MAX, a layer at a time -------------- */
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
        y[j] = use_tanh ? pk_tanh(acc) : acc;
    }
}

/* policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std [1] (MLPPolicy.flat). */
static inline void pk_mlp(__global const float *policy, int hidden, int in, int out, const FV *x, FV *y)
{
    FV h1[PK_MLP_MAX], h2[PK_MLP_MAX];
    __global const float *w1 = policy;
    __global const float *b1 = w1 + in * hidden;
    __global const float *w2 = b1 + hidden;
    __global const float *b2 = w2 + hidden * hidden;
    __global const float *w3 = b2 + hidden;
    __global const float *b3 = w3 + hidden * out;
    pk_mlp_layer(w1, b1, x, in, hidden, 1, h1);
    pk_mlp_layer(w2, b2, h1, hidden, hidden, 1, h2);
    pk_mlp_layer(w3, b3, h2, hidden, out, 0, y);
}
#endif

/* Discrete actions from draws b: uniform, or an inverse-CDF sample of the MLP's softmax. */
static inline IV pk_policy_discrete(__global const float *policy, int kind, int hidden, const FV *x,
                             int in, int n_actions, pk_bits b)
{
    /* (b >> 8) * n < 2^32 for n <= 256, so 32 bits hold the reference's 64-bit product */
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
        return PK_CONVERT(IV, ((b.x >> 8) * (uint)n_actions) >> 24);
#ifdef PK_HAS_MLP
    FV e[PK_MLP_OUTS];
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
#endif
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
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
        return high * (pk_uniform_v(b.x) * 2.0f - 1.0f);
#ifdef PK_HAS_MLP
    FV mean;
    pk_mlp(policy, hidden, in, 1, x, &mean);
    const float log_std = policy[in * hidden + hidden + hidden * hidden + hidden + hidden + 1];
    const FV u1 = 1.0f - pk_uniform_v(b.x); /* (0, 1]: the log is finite */
    const FV u2 = pk_uniform_v(b.y);
    const FV z = sqrt(-2.0f * log(u1)) * cos(6.28318530717958647692f * u2);
    return mean + exp(log_std) * z;
#endif
}

/* The dim > 1 components y of a Box action, as policy._sample_box: the draws of component j come
 * from Philox block (the 4th counter word) j / 4 for the random policy, word j % 4 of it, and j / 2
 * for the MLP, words 2 (j % 2) and 2 (j % 2) + 1. So component 0 draws exactly what a 1-wide
 * action does, and a work-item computes one block per 4 (or 2) components. The other counter
 * words and the key are pk_philox_v's: (c0, c1, policy stream), (seed, env). */
static inline void pk_policy_box(__global const float *policy, int kind, int hidden, const FV *x, int in,
                          int dim, float high, UV c0, UV c1, uint seed, UV env, FV *y)
{
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
    {
        for (int j = 0; j < dim; j += 4) {
            const pk_bits b = pk_philox_block_v(c0, c1, PK_STREAM_POLICY, (uint)(j / 4), seed, env);
            const UV words[4] = {b.x, b.y, b.z, b.w};
            for (int w = 0; w < 4 && j + w < dim; ++w)
                y[j + w] = high * (pk_uniform_v(words[w]) * 2.0f - 1.0f);
        }
        return;
    }
#ifdef PK_HAS_MLP
    pk_mlp(policy, hidden, in, dim, x, y);
    const float log_std = policy[in * hidden + hidden + hidden * hidden + hidden + hidden * dim + dim];
    const float std = exp(log_std);
    for (int j = 0; j < dim; j += 2) {
        const pk_bits b = pk_philox_block_v(c0, c1, PK_STREAM_POLICY, (uint)(j / 2), seed, env);
        y[j] = y[j] + std * pk_box_muller(b.x, b.y);
        if (j + 1 < dim)
            y[j + 1] = y[j + 1] + std * pk_box_muller(b.z, b.w);
    }
#endif
}

#endif
