// In-kernel policies of fused rollouts, as portkern/policy.py: Philox random and a two-layer tanh MLP.
// float32 throughout, whatever REAL is; callers pass the draw (or, for a wide Box, the Philox key and
// counter) and the obs already cast to float. Included by pk_common.cuh after its Philox.
//
// The MLP's code follows kernels/opencl/pk_policy.h function for function and in the same arithmetic
// order (the CUDA builds use --fmad=false, so each a * b + c rounds twice there too).
#ifndef PK_POLICY_CUH
#define PK_POLICY_CUH

// Widest hidden layer, input and output of the run-time-width build: its activations live in per-thread
// arrays of this size.
#define PK_MLP_MAX 64
#define PK_POLICY_RANDOM 0
#define PK_POLICY_MLP 1

// Which MLP a build has. PK_MLP_HIDDEN=H: the hidden width fixed at compile time (the backends' default,
// one build per width in use), every activation in registers. PK_MLP_RUNTIME_WIDTH: any width up to
// PK_MLP_MAX chosen at launch, the activations in per-thread arrays (local memory on a GPU: the labelled
// comparison build). Neither: the random policy only, so the kernels of the random policy and the env's
// step and reset carry no MLP code, no arrays and no stack; the host builds an MLP policy's kernels with
// one of the two defines (portkern._kernels.mlp_width_option), and a build without them acts at random
// whatever the kind.
#if defined(PK_MLP_HIDDEN) || defined(PK_MLP_RUNTIME_WIDTH)
#define PK_HAS_MLP 1
#endif

// Outputs computed per pass over the second layer in the fixed-width build where their number is only
// known at launch (pk_mlp_forward). The env kernels know theirs at compile time (Env::ACTIONS or the Box
// width A) and pass it as pk_mlp's OUT, so one pass makes them all, as pk_env.h's PK_MLP_OUTS does.
#ifndef PK_MLP_OUTS
#define PK_MLP_OUTS 4
#endif

// The MLP's arguments, unread where a build has no MLP (kept in the signatures: the env kernels' ABI is one).
#ifdef PK_HAS_MLP
#define PK_NO_MLP_ARGS(policy, kind, hidden, x)
#else
#define PK_NO_MLP_ARGS(policy, kind, hidden, x) ((void)(policy), (void)(kind), (void)(hidden), (void)(x))
#endif

// PK_PIN(v), on AMD GPUs (this file built as HIP): an empty asm statement that takes v in a VGPR, so clang must
// have v made by then, and keeps such statements in order (pk_policy.h's, the same places). The layers are
// unrolled straight-line code of 64 units, and without it clang scheduled all the units' products, or all
// their tanh, ahead of the adds that consume them: 64 temporaries on top of the 64 activations. No
// instruction is added and the values are unchanged. nvcc, NVRTC and the host build keep their order (empty).
#ifdef __AMDGCN__
#define PK_PIN(v) __asm__ volatile("" : "+v"(v))
#else
#define PK_PIN(v) ((void)0)
#endif

// The fixed-width MLP build's kernels (the rollouts and pk_mlp_forward): at most 128 registers a thread, which
// the compilers meet with no spill and no scratch. On AMD GPUs (HIP) at least 4 waves a SIMD (128 VGPRs on
// gfx90a and gfx942), float builds only: without it Chain-v0's MLP rollout took 134 VGPRs (3 waves), its
// physics peak plus the policy's Box-Muller; the double builds need 120-174 VGPRs (3 waves at most), and held
// to 128 clang spilled three of them to scratch. On NVIDIA GPUs (nvcc, NVRTC) 2 blocks of 256 threads an SM,
// 256 being the block the backends launch (CudaKernels.block_size): without it ptxas gave Chain-v0's
// 167 registers (one block, 8 warps an SM); every rollout, float or double, fits 128 with no spill. The other
// float rollouts need at most 128 either way. pk_policy.h has the same role for Intel's SIMD width
// (PK_MLP_SIMD). Empty in the host build and in the run-time-width build (the comparison build keeps the
// compilers' own choice).
// An env whose MLP rollout would spill held to these defines ENV_MLP_OWN_WAVES first (Chain-v0 past 3 links:
// at 10, held to 128 registers its MLP rollout spilled 329-778; bench/results/port-check/README.md).
#if defined(ENV_MLP_OWN_WAVES)
#define PK_MLP_KERNEL
#elif defined(__AMDGCN__) && defined(PK_MLP_HIDDEN) && !defined(PK_DOUBLE)
#define PK_MLP_KERNEL __attribute__((amdgpu_waves_per_eu(4)))
#elif (defined(__NVCC__) || defined(__CUDACC_RTC__)) && defined(PK_MLP_HIDDEN)
#define PK_MLP_KERNEL __launch_bounds__(256, 2)
#else
#define PK_MLP_KERNEL
#endif

// uint32 -> [0, 1) from the top 24 bits, as rng.uniform: exact in float.
__device__ __forceinline__ float pk_uniformf(uint b) { return (float)(b >> 8) * 5.9604644775390625e-08f; }

#ifdef PK_HAS_MLP
// tanh in float32 without a branch: an odd polynomial below |x| = 0.625, 1 - 2 / (exp(2|x|) + 1) above (the
// split and coefficients of ROCm's device library), both computed and one selected, then x's sign: the
// formula and constants of pk_policy.h's pk_tanh. Within 1.7 ulp of the exact tanh over float32 with a
// correctly rounded exp (pk_policy.h's sweep); expf's own error (CUDA's: 2 ulp at most) adds to the large
// side's. Why not tanhf: HIP's branches on |x| per lane (with 64 divergent branches a layer clang kept both
// sides' results, ~2 VGPRs a hidden unit), and CUDA's and HIP's differ; this is one formula on every GPU.
__device__ __forceinline__ float pk_tanh(float x) {
    const float a = fabsf(x);
    const float a2 = a * a;
    float p = a2 * -0.0057000867f + 0.020634588f;
    p = a2 * p + -0.053737253f;
    p = a2 * p + 0.13331418f;
    p = a2 * p + -0.33333281f;
    const float small = a + a * (a2 * p);
    const float large = 1.0f - 2.0f / (expf(a + a) + 1.0f);
    return copysignf(a < 0.625f ? small : large, x);
}
#endif

#ifdef PK_MLP_HIDDEN
// ---- the fixed-width MLP: every activation in registers, on every GPU ---------------------------------
// policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std (MLPPolicy.flat).
//
// A dense layer y = x @ W + b computes each y[j] as a dot product that starts at 0, adds x[k] * W[k, j] in
// index order, then the bias (policy._dot): every function below keeps that order, so the results are bit
// for bit those of the layer-at-a-time form (pk_mlp_layer, the run-time-width build) and of the reference.
//
// The live values decide whether a GPU spills. Layer at a time, the second layer holds its H inputs and H
// outputs at once (2H = 128 floats a thread at H = 64): ptxas put both arrays in a 256-byte stack frame,
// and HIP needed 190-256 VGPRs (2 waves a SIMD) and scratch. Here the second layer is streamed: its units are
// made PK_MLP_BLOCK at a time from the H first-layer values and each goes straight into the output layer's
// accumulators, so the second hidden layer never exists as an array and the peak is
// H + PK_MLP_BLOCK + outputs floats a thread. The loop over the blocks stays a loop (unrolled, it is H x H
// multiply-adds of code); inside it the H inputs are unrolled, so h1 is indexed by constants and stays in
// registers. The weights are the same for every thread: uniform loads, PK_MLP_BLOCK contiguous floats of a
// row of W2 at a time.
#if PK_MLP_HIDDEN % 4 == 0
#define PK_MLP_BLOCK 4
#elif PK_MLP_HIDDEN % 2 == 0
#define PK_MLP_BLOCK 2
#else
#define PK_MLP_BLOCK 1
#endif

// The first layer one input at a time, for an input width known only at launch (pk_mlp_forward):
// pk_mlp_h1_init, pk_mlp_h1_add for k = 0 .. in - 1, pk_mlp_h1_end.
__device__ __forceinline__ void pk_mlp_h1_init(float h1[PK_MLP_HIDDEN]) {
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) h1[j] = 0.0f;
}

__device__ __forceinline__ void pk_mlp_h1_add(float h1[PK_MLP_HIDDEN], const float *__restrict__ w1, int k,
                                              float xk) {
    const float *row = w1 + k * PK_MLP_HIDDEN;
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        h1[j] = h1[j] + xk * __ldg(row + j);
        PK_PIN(h1[j]);
    }
}

__device__ __forceinline__ void pk_mlp_h1_end(float h1[PK_MLP_HIDDEN], const float *__restrict__ b1) {
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        h1[j] = pk_tanh(h1[j] + __ldg(b1 + j));
        PK_PIN(h1[j]);
    }
}

// Outputs o0 .. o0 + OUTS - 1 (those below out) of the second and output layers from h1, into y[0 .. OUTS).
template <int OUTS>
__device__ __forceinline__ void pk_mlp_tail(const float *__restrict__ w2, int out, int o0, const float *h1,
                                            float *y) {
    const float *b2 = w2 + PK_MLP_HIDDEN * PK_MLP_HIDDEN;
    const float *w3 = b2 + PK_MLP_HIDDEN;
    const float *b3 = w3 + PK_MLP_HIDDEN * out;
    float acc[OUTS];
#pragma unroll
    for (int o = 0; o < OUTS; ++o) acc[o] = 0.0f;
#pragma unroll 1
    for (int j0 = 0; j0 < PK_MLP_HIDDEN; j0 += PK_MLP_BLOCK) {
        float a[PK_MLP_BLOCK];
#pragma unroll
        for (int b = 0; b < PK_MLP_BLOCK; ++b) a[b] = 0.0f;
#pragma unroll
        for (int k = 0; k < PK_MLP_HIDDEN; ++k) {
            const float *row = w2 + k * PK_MLP_HIDDEN + j0;
#pragma unroll
            for (int b = 0; b < PK_MLP_BLOCK; ++b) {
                a[b] = a[b] + h1[k] * __ldg(row + b);
                PK_PIN(a[b]);
            }
        }
#pragma unroll
        for (int b = 0; b < PK_MLP_BLOCK; ++b) {
            const float h2 = pk_tanh(a[b] + __ldg(b2 + j0 + b));
            const float *row3 = w3 + (j0 + b) * out + o0;
#pragma unroll
            for (int o = 0; o < OUTS; ++o)
                if (o0 + o < out) acc[o] = acc[o] + h2 * __ldg(row3 + o);
        }
    }
#pragma unroll
    for (int o = 0; o < OUTS; ++o)
        if (o0 + o < out) y[o] = acc[o] + __ldg(b3 + o0 + o);
}

// y[0 .. OUT) = MLP(x[0 .. IN)), IN and OUT the env's obs and output widths: the first layer a hidden unit
// at a time (k unrolled), then the streamed tail in one pass.
template <int IN, int OUT>
__device__ __forceinline__ void pk_mlp(const float *__restrict__ policy, int hidden, const float *x, float *y) {
    (void)hidden;  // the host builds with the width it launches with
    float h1[PK_MLP_HIDDEN];
#pragma unroll
    for (int j = 0; j < PK_MLP_HIDDEN; ++j) {
        float acc = 0.0f;
#pragma unroll
        for (int k = 0; k < IN; ++k) {
            acc = acc + x[k] * __ldg(policy + k * PK_MLP_HIDDEN + j);
            PK_PIN(acc);
        }
        h1[j] = pk_tanh(acc + __ldg(policy + IN * PK_MLP_HIDDEN + j));
        PK_PIN(h1[j]);
    }
    pk_mlp_tail<OUT>(policy + IN * PK_MLP_HIDDEN + PK_MLP_HIDDEN, OUT, 0, h1, y);
}

#elif defined(PK_MLP_RUNTIME_WIDTH)
// ---- the run-time-width MLP: any hidden width up to PK_MLP_MAX, a layer at a time -------------------
// One dense layer for one row: y = x @ W + b, W [in, out] row-major. Each dot product starts at 0 and
// adds x[k] * W[k, j] in index order (policy._dot), then the bias, so it rounds as the reference.
template <bool TANH>
__device__ __forceinline__ void pk_mlp_layer(const float *__restrict__ w, const float *__restrict__ b, const float *x,
                                             int in, int out, float *y) {
    for (int j = 0; j < out; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < in; ++k) acc = acc + x[k] * __ldg(w + k * out + j);
        acc = acc + __ldg(b + j);
        y[j] = TANH ? pk_tanh(acc) : acc;
    }
}

// policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std [1] (MLPPolicy.flat).
__device__ __forceinline__ void pk_mlp_rt(const float *__restrict__ policy, int hidden, int in, int out,
                                          const float *x, float *y) {
    float h1[PK_MLP_MAX], h2[PK_MLP_MAX];
    const float *w1 = policy;
    const float *b1 = w1 + in * hidden;
    const float *w2 = b1 + hidden;
    const float *b2 = w2 + hidden * hidden;
    const float *w3 = b2 + hidden;
    const float *b3 = w3 + hidden * out;
    pk_mlp_layer<true>(w1, b1, x, in, hidden, h1);
    pk_mlp_layer<true>(w2, b2, h1, hidden, hidden, h2);
    pk_mlp_layer<false>(w3, b3, h2, hidden, out, y);
}

template <int IN, int OUT>
__device__ __forceinline__ void pk_mlp(const float *__restrict__ policy, int hidden, const float *x, float *y) {
    pk_mlp_rt(policy, hidden, IN, OUT, x, y);
}
#endif

// The MLP's one log_std, the float after b3 (MLPPolicy.flat), for an MLP with out outputs.
__device__ __forceinline__ float pk_mlp_log_std(const float *__restrict__ policy, int in, int hidden, int out) {
#ifdef PK_MLP_HIDDEN
    hidden = PK_MLP_HIDDEN;
#endif
    return __ldg(policy + in * hidden + hidden + hidden * hidden + hidden + hidden * out + out);
}

// A discrete action of N from draw b0: uniform, or an inverse-CDF sample of the MLP's softmax (IN inputs).
template <int IN, int N>
__device__ __forceinline__ int pk_policy_discrete(const float *__restrict__ policy, int kind, int hidden,
                                                  const float *x, uint b0) {
    PK_NO_MLP_ARGS(policy, kind, hidden, x);
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
        // 64-bit product: (b0 >> 8) * n can exceed 32 bits
        return (int)(((unsigned long long)(b0 >> 8) * (unsigned long long)N) >> 24);
#ifdef PK_HAS_MLP
    float e[N];
    pk_mlp<IN, N>(policy, hidden, x, e);
    float m = e[0];
#pragma unroll
    for (int k = 1; k < N; ++k) m = fmaxf(m, e[k]);
    float total = 0.0f;
#pragma unroll
    for (int k = 0; k < N; ++k) {
        e[k] = expf(e[k] - m);
        total = total + e[k];
    }
    const float threshold = pk_uniformf(b0) * total;
    // Partial sums in order, then the first k with threshold < sum (the last if none, as when rounding
    // leaves the threshold above every partial sum): a select per action, no branch.
    float acc = 0.0f;
#pragma unroll
    for (int k = 0; k < N - 1; ++k) {
        acc = acc + e[k];
        e[k] = acc;
    }
    int action = N - 1;
#pragma unroll
    for (int k = N - 2; k >= 0; --k) action = threshold < e[k] ? k : action;
    return action;
#endif
}

// One Box component of the random policy from draw b: high * (2u - 1).
__device__ __forceinline__ float pk_random_box(float high, uint b) { return high * (pk_uniformf(b) * 2.0f - 1.0f); }

// Box-Muller's standard normal from draws b0, b1 (rng.uniform's u1 = 1 - u(b0), u2 = u(b1)). pk_cos: cosf's bits,
// without the stack frame libdevice's cosf leaves on NVIDIA behind the MLP's divisions (pk_common.cuh).
__device__ __forceinline__ float pk_gauss(uint b0, uint b1) {
    const float u1 = 1.0f - pk_uniformf(b0);  // (0, 1]: the log is finite
    const float u2 = pk_uniformf(b1);
    return sqrtf(-2.0f * logf(u1)) * pk_cos(6.28318530717958647692f * u2);
}

// A continuous action from draws b0, b1: high * (2u - 1), or the MLP mean (IN inputs) plus Box-Muller noise.
template <int IN>
__device__ __forceinline__ float pk_policy_continuous(const float *__restrict__ policy, int kind, int hidden,
                                                      const float *x, float high, uint b0, uint b1) {
    PK_NO_MLP_ARGS(policy, kind, hidden, x);
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
        return pk_random_box(high, b0);
#ifdef PK_HAS_MLP
    float mean;
    pk_mlp<IN, 1>(policy, hidden, x, &mean);
    return mean + expf(pk_mlp_log_std(policy, IN, hidden, 1)) * pk_gauss(b0, b1);
#endif
}

// A Box action of A > 1 components into out[A] (policy._sample_box). Each component draws from Philox
// key (seed, env), counter (episode, step, policy stream, block): random, component j is
// high * (2u - 1) of word j % 4 of block j / 4; MLP, mean_j + exp(log_std) * the Box-Muller of words
// 2 (j % 2) and 2 (j % 2) + 1 of block j / 2. Component 0 is therefore the 1-wide draw of block 0.
template <int IN, int A>
__device__ __forceinline__ void pk_policy_box(const float *__restrict__ policy, int kind, int hidden, const float *x,
                                              float high, uint seed, uint env, uint ep, uint t, float out[A]) {
    PK_NO_MLP_ARGS(policy, kind, hidden, x);
#ifdef PK_HAS_MLP
    if (kind == PK_POLICY_RANDOM)
#endif
    {
#pragma unroll
        for (int b = 0; b < (A + 3) / 4; ++b) {
            uint c[4] = {ep, t, PK_STREAM_POLICY, (uint)b};
            pk_philox4x32_10(c, seed, env);
#pragma unroll
            for (int w = 0; w < 4; ++w)
                if (4 * b + w < A) out[4 * b + w] = pk_random_box(high, c[w]);
        }
        return;
    }
#ifdef PK_HAS_MLP
    float mean[A];
    pk_mlp<IN, A>(policy, hidden, x, mean);
    const float std = expf(pk_mlp_log_std(policy, IN, hidden, A));
#pragma unroll
    for (int b = 0; b < (A + 1) / 2; ++b) {
        uint c[4] = {ep, t, PK_STREAM_POLICY, (uint)b};
        pk_philox4x32_10(c, seed, env);
#pragma unroll
        for (int w = 0; w < 2; ++w)
            if (2 * b + w < A) out[2 * b + w] = mean[2 * b + w] + std * pk_gauss(c[2 * w], c[2 * w + 1]);
    }
#endif
}

#endif  // PK_POLICY_CUH
