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

/* Intel GPUs: the SIMD width of the heavy kernels, set where IGC's own choice spilled. OpenCL C names no device,
 * so Xe-HPC is told apart as the Intel GPU with float64 (cl_khr_fp64; Xe-HPG has none). CPU drivers pick their own.
 * PK_MLP_SIMD, the kernels with the MLP, whose 64 first-layer activations live in registers through the second
 * layer: Xe-HPC SIMD16 (its registers are 64 bytes, one float a lane at SIMD16; at SIMD32 its 128 registers held
 * 64 floats a lane, fewer than h1 alone: "spilled around 142-316"), Xe-HPG SIMD8 (32-byte registers: at SIMD16 h1
 * alone is all 128 of them; IGC then kept the rollout's arrays in private memory, 320-740 bytes a lane). The
 * MLP builds' register file is a build option, not the source's: 256 registers a thread (4 threads a vector
 * engine instead of 8) on Xe-HPC, where SIMD16 at 128 spilled, and for Acrobot's and Chain-v0's on Xe-HPG, which
 * spilled 23-27 at SIMD8 (intel_gpu_options in portkern/_kernels.py; the backend and the port-check pass it).
 * PK_XEHPC_SIMD16, Xe-HPC only, the step and the random policy's rollout: IGC's default there is
 * SIMD32, at which Acrobot's, Pendulum's, CartPole's and Chain-v0's rollouts and Chain-v0's step spilled (7-104);
 * SIMD16 is Xe-HPC's native width. Xe-HPG keeps its own choice for those (forced to SIMD16, Acrobot's and
 * Chain-v0's spilled; it picks SIMD8 without spilling). */
#if defined(cl_intel_required_subgroup_size) && !defined(PK_CPU_DEVICE)
#define PK_INTEL_SIMD16 __attribute__((intel_reqd_sub_group_size(16)))
#define PK_INTEL_SIMD8 __attribute__((intel_reqd_sub_group_size(8)))
#else
#define PK_INTEL_SIMD16
#define PK_INTEL_SIMD8
#endif
#if defined(cl_khr_fp64)
#define PK_XEHPC_SIMD16 PK_INTEL_SIMD16
#else
#define PK_XEHPC_SIMD16
#endif
#if !defined(PK_HAS_MLP)
#define PK_MLP_SIMD
#elif defined(cl_khr_fp64)
#define PK_MLP_SIMD PK_INTEL_SIMD16
#else
#define PK_MLP_SIMD PK_INTEL_SIMD8
#endif

/* AMD GPUs, the fixed-width MLP's float builds: ask clang for 4 waves a SIMD (at most 128 VGPRs on gfx90a and
 * gfx942); MountainCar's rollout then takes 106 VGPRs where clang chose 127. An env whose rollout would spill
 * held to that defines ENV_MLP_OWN_WAVES (Chain-v0 past 3 links, chain.cl). The float64 builds keep clang's choice (the HIP twin spilled
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
#ifdef __AMDGCN__
    return copysign(select(large, small, a < 0.625f), x);
#else
    /* the same pick without a compare: a - 0.625 is negative exactly when a < 0.625 (two different floats never
     * subtract to 0), so its sign bit, spread by an arithmetic shift, is the mask. With the select, Intel's
     * compiler held the 64 units' compares in flag registers and spilled them (Pendulum's rollout, Xe-HPC);
     * on AMD the select is one instruction and the mask cost up to 4 VGPRs (gfx1100: 12 -> 10 waves). */
    const IV m = PK_CAT(as_, IV)(a - 0.625f) >> 31;
    return copysign(PK_CAT(as_, FV)((PK_CAT(as_, IV)(small) & m) | (PK_CAT(as_, IV)(large) & ~m)), x);
#endif
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

/* PK_MLP_EACH(F) writes F(0) .. F(PK_MLP_HIDDEN - 1) out with the preprocessor, a statement per hidden unit
 * (widths up to 64; wider builds keep the loop with its unroll hint). Why not `#pragma unroll` on the first layer:
 * Intel's compiler lost that hint on its way in (the SPIR-V carries the loop control, IGC's IR had none), unrolled
 * the loop by 4 and kept h1 as an array indexed at run time, in private memory (Xe-HPC: 4-8 KB scratch a thread;
 * Xe-HPG: 256-392 bytes a lane of private memory). Written out, h1 is indexed by constants for every compiler,
 * and the code clang makes from the hint is the same. */
#if PK_MLP_HIDDEN <= 64
#define PK_MLP_U1(F, j) if ((j) < PK_MLP_HIDDEN) { F(j); }
#define PK_MLP_U4(F, j) PK_MLP_U1(F, (j)) PK_MLP_U1(F, (j) + 1) PK_MLP_U1(F, (j) + 2) PK_MLP_U1(F, (j) + 3)
#define PK_MLP_U16(F, j) PK_MLP_U4(F, (j)) PK_MLP_U4(F, (j) + 4) PK_MLP_U4(F, (j) + 8) PK_MLP_U4(F, (j) + 12)
#define PK_MLP_EACH(F) PK_MLP_U16(F, 0) PK_MLP_U16(F, 16) PK_MLP_U16(F, 32) PK_MLP_U16(F, 48)
#else
#define PK_MLP_EACH(F) _Pragma("unroll") for (int j_ = 0; j_ < PK_MLP_HIDDEN; ++j_) { F(j_); }
#endif

/* The first layer, one input at a time: pk_mlp_h1_init, pk_mlp_h1_add for k = 0 .. in - 1, pk_mlp_h1_end. */
static inline void pk_mlp_h1_init(FV *h1)
{
#define PK_F(j) h1[j] = (FV)(0.0f)
    PK_MLP_EACH(PK_F)
#undef PK_F
}

static inline void pk_mlp_h1_add(FV *h1, __global const float *w1, int k, FV xk)
{
    __global const float *row = w1 + k * PK_MLP_HIDDEN;
#define PK_F(j) h1[j] = h1[j] + xk * row[j]; PK_PIN(h1[j])
    PK_MLP_EACH(PK_F)
#undef PK_F
}

static inline void pk_mlp_h1_end(FV *h1, __global const float *b1)
{
#define PK_F(j) h1[j] = pk_tanh(h1[j] + b1[j]); PK_PIN(h1[j])
    PK_MLP_EACH(PK_F)
#undef PK_F
}

/* Hidden unit j of the first layer from the in inputs x: the dot product in input order, the bias, tanh. */
static inline FV pk_mlp_unit1(__global const float *policy, int in, const FV *x, int j)
{
    FV acc = (FV)(0.0f);
#pragma unroll
    for (int k = 0; k < in; ++k) {
        acc = acc + x[k] * policy[k * PK_MLP_HIDDEN + j];
        PK_PIN(acc);
    }
    return pk_tanh(acc + policy[in * PK_MLP_HIDDEN + j]);
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
#define PK_F(j) h1[j] = pk_mlp_unit1(policy, in, x, j); PK_PIN(h1[j])
    PK_MLP_EACH(PK_F)
#undef PK_F
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
