// In-kernel policies of fused rollouts, as portkern/policy.py: Philox random and a two-layer tanh MLP.
// float32 throughout, whatever REAL is; callers pass the draw (or, for a wide Box, the Philox key and
// counter) and the obs already cast to float. Included by pk_common.cuh after its Philox.
#ifndef PK_POLICY_CUH
#define PK_POLICY_CUH

// Widest hidden layer, input and output: the activations live in per-thread arrays of this size.
#define PK_MLP_MAX 64
#define PK_POLICY_RANDOM 0
#define PK_POLICY_MLP 1

// uint32 -> [0, 1) from the top 24 bits, as rng.uniform: exact in float.
__device__ __forceinline__ float pk_uniformf(uint b) { return (float)(b >> 8) * 5.9604644775390625e-08f; }

// One dense layer for one row: y = x @ W + b, W [in, out] row-major. Each dot product starts at 0 and
// adds x[k] * W[k, j] in index order (policy._dot), then the bias, so it rounds as the reference
// (--fmad=false keeps the multiply and the add separate).
template <bool TANH>
__device__ __forceinline__ void pk_mlp_layer(const float *__restrict__ w, const float *__restrict__ b, const float *x,
                                             int in, int out, float *y) {
    for (int j = 0; j < out; ++j) {
        float acc = 0.0f;
        for (int k = 0; k < in; ++k) acc = acc + x[k] * __ldg(w + k * out + j);
        acc = acc + __ldg(b + j);
        y[j] = TANH ? tanhf(acc) : acc;
    }
}

#ifdef PK_MLP_HIDDEN
// The same layer with its width OUT fixed at compile time, for the hidden layers when the host builds
// with PK_MLP_HIDDEN (the policy's hidden width; one build per width). The loop over inputs runs
// outside, the OUT accumulators inside, unrolled: they live in registers, each input is read once
// and each weight row is contiguous. Every acc[j] still starts at 0 and adds x[k] * W[k, j] in index
// order, then the bias: the same rounding as pk_mlp_layer. Without it, the per-thread activations
// sit in local memory (ptxas: a 512-byte stack frame in every env's rollout kernel), read
// hidden x hidden times a step; the first H200 run's MLP rollouts were ~90x slower than the random
// policy's. (Unrolling both loops of pk_mlp_layer instead keeps everything in registers but took
// NVRTC 39 s per env kernel at width 64.)
template <bool TANH, int OUT>
__device__ __forceinline__ void pk_mlp_layer_fixed(const float *__restrict__ w, const float *__restrict__ b,
                                                   const float *x, int in, float *y) {
    float acc[OUT];
#pragma unroll
    for (int j = 0; j < OUT; ++j) acc[j] = 0.0f;
    for (int k = 0; k < in; ++k) {
        const float xk = x[k];
        const float *row = w + k * OUT;
#pragma unroll
        for (int j = 0; j < OUT; ++j) acc[j] = acc[j] + xk * __ldg(row + j);
    }
#pragma unroll
    for (int j = 0; j < OUT; ++j) {
        const float a = acc[j] + __ldg(b + j);
        y[j] = TANH ? tanhf(a) : a;
    }
}
#endif

// policy = w1 [in, H], b1 [H], w2 [H, H], b2 [H], w3 [H, out], b3 [out], log_std [1] (MLPPolicy.flat).
__device__ __forceinline__ void pk_mlp(const float *__restrict__ policy, int hidden, int in, int out, const float *x,
                                       float *y) {
#ifdef PK_MLP_HIDDEN
    hidden = PK_MLP_HIDDEN;  // the host builds with the width it launches with
    float h1[PK_MLP_HIDDEN], h2[PK_MLP_HIDDEN];
#else
    float h1[PK_MLP_MAX], h2[PK_MLP_MAX];
#endif
    const float *w1 = policy;
    const float *b1 = w1 + in * hidden;
    const float *w2 = b1 + hidden;
    const float *b2 = w2 + hidden * hidden;
    const float *w3 = b2 + hidden;
    const float *b3 = w3 + hidden * out;
#ifdef PK_MLP_HIDDEN
    pk_mlp_layer_fixed<true, PK_MLP_HIDDEN>(w1, b1, x, in, h1);
    pk_mlp_layer_fixed<true, PK_MLP_HIDDEN>(w2, b2, h1, hidden, h2);
#else
    pk_mlp_layer<true>(w1, b1, x, in, hidden, h1);
    pk_mlp_layer<true>(w2, b2, h1, hidden, hidden, h2);
#endif
    pk_mlp_layer<false>(w3, b3, h2, hidden, out, y);
}

// A discrete action from draw b0: uniform, or an inverse-CDF sample of the MLP's softmax.
__device__ __forceinline__ int pk_policy_discrete(const float *__restrict__ policy, int kind, int hidden,
                                                  const float *x, int in, int n_actions, uint b0) {
    if (kind == PK_POLICY_RANDOM)  // 64-bit product: (b0 >> 8) * n can exceed 32 bits
        return (int)(((unsigned long long)(b0 >> 8) * (unsigned long long)n_actions) >> 24);
    float e[PK_MLP_MAX];
    pk_mlp(policy, hidden, in, n_actions, x, e);
    float m = e[0];
    for (int k = 1; k < n_actions; ++k) m = fmaxf(m, e[k]);
    float total = 0.0f;
    for (int k = 0; k < n_actions; ++k) {
        e[k] = expf(e[k] - m);
        total = total + e[k];
    }
    const float threshold = pk_uniformf(b0) * total;
    float acc = 0.0f;
    for (int k = 0; k < n_actions - 1; ++k) {
        acc = acc + e[k];
        if (threshold < acc) return k;
    }
    return n_actions - 1;  // also when rounding leaves the threshold above the last partial sum
}

// One Box component of the random policy from draw b: high * (2u - 1).
__device__ __forceinline__ float pk_random_box(float high, uint b) { return high * (pk_uniformf(b) * 2.0f - 1.0f); }

// Box-Muller's standard normal from draws b0, b1 (rng.uniform's u1 = 1 - u(b0), u2 = u(b1)).
__device__ __forceinline__ float pk_gauss(uint b0, uint b1) {
    const float u1 = 1.0f - pk_uniformf(b0);  // (0, 1]: the log is finite
    const float u2 = pk_uniformf(b1);
    return sqrtf(-2.0f * logf(u1)) * cosf(6.28318530717958647692f * u2);
}

// The MLP's one log_std, the float after b3 (MLPPolicy.flat), for an MLP with out outputs.
__device__ __forceinline__ float pk_mlp_log_std(const float *__restrict__ policy, int in, int hidden, int out) {
    return __ldg(policy + in * hidden + hidden + hidden * hidden + hidden + hidden * out + out);
}

// A continuous action from draws b0, b1: high * (2u - 1), or the MLP mean plus Box-Muller noise.
__device__ __forceinline__ float pk_policy_continuous(const float *__restrict__ policy, int kind, int hidden,
                                                      const float *x, int in, float high, uint b0, uint b1) {
    if (kind == PK_POLICY_RANDOM) return pk_random_box(high, b0);
    float mean;
    pk_mlp(policy, hidden, in, 1, x, &mean);
    return mean + expf(pk_mlp_log_std(policy, in, hidden, 1)) * pk_gauss(b0, b1);
}

// A Box action of A > 1 components into out[A] (policy._sample_box). Each component draws from Philox
// key (seed, env), counter (episode, step, policy stream, block): random, component j is
// high * (2u - 1) of word j % 4 of block j / 4; MLP, mean_j + exp(log_std) * the Box-Muller of words
// 2 (j % 2) and 2 (j % 2) + 1 of block j / 2. Component 0 is therefore the 1-wide draw of block 0.
template <int A>
__device__ __forceinline__ void pk_policy_box(const float *__restrict__ policy, int kind, int hidden, const float *x,
                                              int in, float high, uint seed, uint env, uint ep, uint t, float out[A]) {
    if (kind == PK_POLICY_RANDOM) {
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
    float mean[A];
    pk_mlp(policy, hidden, in, A, x, mean);
    const float std = expf(pk_mlp_log_std(policy, in, hidden, A));
#pragma unroll
    for (int b = 0; b < (A + 1) / 2; ++b) {
        uint c[4] = {ep, t, PK_STREAM_POLICY, (uint)b};
        pk_philox4x32_10(c, seed, env);
#pragma unroll
        for (int w = 0; w < 2; ++w)
            if (2 * b + w < A) out[2 * b + w] = mean[2 * b + w] + std * pk_gauss(c[2 * w], c[2 * w + 1]);
    }
}

#endif  // PK_POLICY_CUH
