// Shared code of portkern's CUDA kernels: dtype macro, params structs, Philox4x32-10, the reset draw, and
// the env kernels' one body (templates over an env struct) with the macro that generates their entry points.
#ifndef PK_COMMON_CUH
#define PK_COMMON_CUH

#ifndef REAL
#define REAL float
#endif

typedef unsigned int uint;
typedef unsigned char uchar;

#define PK_STREAM_RESET 0u
#define PK_STREAM_POLICY 1u

// Every env's params struct, generated from its module (EnvSpec.c_struct); read by name, p->gravity.
#include "pk_params.h"

// Philox4x32-10 (Salmon et al., SC'11), constants from Random123's philox.h.
__device__ __forceinline__ void pk_philox4x32_10(uint c[4], uint k0, uint k1) {
#pragma unroll
    for (int r = 0; r < 10; ++r) {
        if (r > 0) {
            k0 += 0x9E3779B9u;
            k1 += 0xBB67AE85u;
        }
        const uint hi0 = __umulhi(0xD2511F53u, c[0]), lo0 = 0xD2511F53u * c[0];
        const uint hi1 = __umulhi(0xCD9E8D57u, c[2]), lo1 = 0xCD9E8D57u * c[2];
        const uint c1 = c[1], c3 = c[3];
        c[0] = hi1 ^ c1 ^ k0;
        c[1] = lo1;
        c[2] = hi0 ^ c3 ^ k1;
        c[3] = lo0;
    }
}

// ---- sin and cos of REAL ---------------------------------------------------------------------------
// pk_sin, pk_cos, pk_sincos: what the env kernels call. double: CUDA's (HIP's) sin, cos and sincos. float: HIP and
// the host build call sin, cos and sincosf as before (HIP has no float overload of sincos, so the float build
// names sincosf itself, the function CUDA's float overload calls); NVIDIA builds call the versions below, made
// to give sinf's, cosf's and sincosf's bits for every float input (checked on a GPU by bench/gpu/trig_bits.py).
//
// Why on NVIDIA: libdevice's sinf, cosf and sincosf reduce |x| >= 105615 by Payne-Hanek into a local uint32[7]
// read at a run-time index. ptxas keeps that array in registers unless an IEEE division (its slow path a called
// subroutine) comes earlier in the kernel, as in every rollout's loop: then a 32-byte stack frame stays. Behind
// `if (fabsf(x) >= 105615.0f)` NVVM folds libdevice's own test of that compare, and the array with it (a ternary
// or __builtin_assume does not fold). The large arguments go to pk_trig_reduce, a Payne-Hanek reduction
// in registers giving what libdevice's does, then to libdevice's polynomials: sincosf of the reduced argument, behind the same test.
// PK_TRIG_HOST_TEST builds this path on the host (tests/test_cuda_trig.py).
#if (defined(__CUDA_ARCH__) && !defined(__HIP__)) || defined(PK_TRIG_HOST_TEST)
#define PK_TRIG_LARGE 105615.0f  // where libdevice's slow reduction starts

// x (|x| >= PK_TRIG_LARGE) = (q + f) pi/2 with |f| <= 1/2, r = f pi/2: libdevice's slow path, result for result.
// The significand at the top of 32 bits (m) times 192 bits of 2/pi makes 7 words; the exponent e puts the 2
// integer bits of x 2/pi and 62 fraction bits in words 4 - j .. 6 - j (j = e / 32), shifted left by e % 32.
// libdevice stores the 7 words in its array and reads those 3 at the run-time index; here 2/pi's words move up
// j places instead (each multiplier a select of constants), so the 3 are always the last words made, in
// registers. A fraction of 1/2 or more rounds q up and f is its complement, r's sign flipped; r is the fraction
// times pi/2 in double, rounded to float. inf: r = x * 0 (NaN), q = 0, as libdevice.
__device__ __forceinline__ uint pk_trig_reduce(float x, float &r) {
    typedef unsigned long long u64;
    const uint b = __float_as_uint(x), m = (b << 8) | 0x80000000u;
    const uint e = ((b >> 23) & 255u) - 128u;  // 15 .. 126 (127: inf)
    const uint j = e >> 5, sh = e & 31u;
    // 2/pi = 0.a2f9836e 4e441529 fc2757d1 f534ddc0 db629599 3c439041..., c0 its least significant word
    const uint c0 = 0x3c439041u, c1 = 0xdb629599u, c2 = 0xf534ddc0u, c3 = 0xfc2757d1u, c4 = 0x4e441529u,
               c5 = 0xa2f9836eu;
#define PK_2OPI(k0, k1, k2, k3) (j == 0u ? (k0) : j == 1u ? (k1) : j == 2u ? (k2) : (k3))
    u64 p = (u64)m * PK_2OPI(c0, 0u, 0u, 0u);
    p = (u64)m * PK_2OPI(c1, c0, 0u, 0u) + (p >> 32);
    p = (u64)m * PK_2OPI(c2, c1, c0, 0u) + (p >> 32);
    p = (u64)m * PK_2OPI(c3, c2, c1, c0) + (p >> 32);
    p = (u64)m * PK_2OPI(c4, c3, c2, c1) + (p >> 32);
    const uint low = (uint)p;
    p = (u64)m * PK_2OPI(c5, c4, c3, c2) + (p >> 32);
    const uint mid = (uint)p;
    p = (u64)m * PK_2OPI(0u, c5, c4, c3) + (p >> 32);
    const uint top = (uint)p;
#undef PK_2OPI
    const uint hi0 = sh ? (top << sh) + (mid >> (32u - sh)) : top;
    const uint lo0 = sh ? (mid << sh) + (low >> (32u - sh)) : mid;
    uint hi = (hi0 << 2) + (lo0 >> 30), lo = lo0 << 2;  // the fraction's 64 bits
    const uint up = hi >> 31;                             // 1/2 or more
    uint q = (hi0 >> 30) + up;
    if (b >> 31) q = 0u - q;
    if (up) {
        hi = ~hi;
        lo = ~lo;
    }
    const float f = (float)((double)(long long)(((u64)hi << 32) | lo) * 0x1.921fb54442d19p-64);  // pi/2 2^-64
    const bool inf = isinf(x);
    r = inf ? x * 0.0f : ((b >> 31) ^ up) ? -f : f;
    return inf ? 0u : q;
}

// sincosf of |r| <= pi/4 (or NaN): there libdevice's fast reduction leaves quadrant 0 and r as it is, so these are
// its sin and cos polynomials alone, the very ones sinf and cosf evaluate (one call for both: less code and fewer
// registers than sinf and cosf). The test is never true; it only lets NVVM drop the slow path.
__device__ __forceinline__ void pk_sincosf_small(float r, float *s, float *c) {
    if (fabsf(r) >= PK_TRIG_LARGE) {
        *s = 0.0f;
        *c = 1.0f;
        return;
    }
    sincosf(r, s, c);
}

// libdevice's quadrant step: sinf and cosf take the cos polynomial at odd i (cosf's i is q + 1) and negate
// at i & 2 as z * -1 + 0 (a zero comes out +0); sincosf swaps at odd q and negates with a plain minus.
__device__ __forceinline__ float pk_trig_quadrant(uint i, float r) {
    float s, c;
    pk_sincosf_small(r, &s, &c);
    const float z = (i & 1u) ? c : s;
    return (i & 2u) ? fmaf(z, -1.0f, 0.0f) : z;
}
__device__ __forceinline__ float pk_sin(float x) {
    if (fabsf(x) >= PK_TRIG_LARGE) {
        float r;
        const uint q = pk_trig_reduce(x, r);
        return pk_trig_quadrant(q, r);
    }
    return sinf(x);
}
__device__ __forceinline__ float pk_cos(float x) {
    if (fabsf(x) >= PK_TRIG_LARGE) {
        float r;
        const uint q = pk_trig_reduce(x, r);
        return pk_trig_quadrant(q + 1u, r);
    }
    return cosf(x);
}
__device__ __forceinline__ void pk_sincos(float x, float *s, float *c) {
    if (fabsf(x) >= PK_TRIG_LARGE) {
        float r, ps, pc;
        const uint q = pk_trig_reduce(x, r);
        pk_sincosf_small(r, &ps, &pc);
        *s = (q & 1u) ? pc : ps;
        *c = (q & 1u) ? ps : pc;
        if (q & 2u) *s = -*s;
        if ((q + 1u) & 2u) *c = -*c;
        return;
    }
    sincosf(x, s, c);
}
#else
__device__ __forceinline__ float pk_sin(float x) { return sin(x); }
__device__ __forceinline__ float pk_cos(float x) { return cos(x); }
__device__ __forceinline__ void pk_sincos(float x, float *s, float *c) { sincosf(x, s, c); }
#endif
__device__ __forceinline__ double pk_sin(double x) { return sin(x); }
__device__ __forceinline__ double pk_cos(double x) { return cos(x); }
__device__ __forceinline__ void pk_sincos(double x, double *s, double *c) { sincos(x, s, c); }

// uint32 -> [-1, 1): 24 bits are exact in float and double, so both builds equal the reference.
__device__ __forceinline__ REAL pk_sym(uint b) {
    return (REAL)(b >> 8) * (REAL)(1.0 / 16777216.0) * (REAL)2.0 - (REAL)1.0;
}

// The reset draw: key (seed, env index), counter (episode, 0, stream 0, 0), as four [-1, 1) values.
__device__ __forceinline__ void pk_reset_draw(uint seed, uint env, uint episode, REAL sym[4]) {
    uint c[4] = {episode, 0u, PK_STREAM_RESET, 0u};
    pk_philox4x32_10(c, seed, env);
#pragma unroll
    for (int k = 0; k < 4; ++k) sym[k] = pk_sym(c[k]);
}

// The rollouts' in-kernel policies (they draw with the Philox above).
#include "pk_policy.cuh"

// NumPy's maximum / minimum / clip on non-NaN values (clip is minimum(maximum(x, lo), hi)).
template <class F> __device__ __forceinline__ F pk_max(F a, F b) { return a > b ? a : b; }
template <class F> __device__ __forceinline__ F pk_min(F a, F b) { return a < b ? a : b; }
template <class F> __device__ __forceinline__ F pk_clip(F x, F lo, F hi) { return pk_min(pk_max(x, lo), hi); }

// The env kernels' shared body. An env is a struct with D (state size), O (obs size), Params (its
// generated params struct), its action space (Act: int or float; ACTIONS: the number of discrete
// actions, 0 for a Box; ACT_HIGH: the Box bound, EnvSpec.action_high; optionally A, the width of a
// Box action, EnvSpec.action_dim, 1 when absent) and static device functions reset(sym, p, s),
// step(s, action, p, reward, term), observe(s, o). The state is one [D, N] array: variable k of env i
// at k * n + i, so consecutive threads read consecutive addresses.
//
// A 1-wide env's step takes its Act by value and every action buffer holds one Act per env, as
// before A existed. A Box of width A > 1 (a chain's K motors) travels as pk_box<A>: step takes it,
// the actions buffer is [N, A] row-major (env i's component j at i * A + j) and a rollout's
// out_actions [T, N, A].
template <int W> struct pk_box {
    float v[W];
};

template <class...> struct pk_voider {
    using type = void;
};
template <class Env, class = void> struct pk_action_width {
    static constexpr int value = 1;
};
template <class Env> struct pk_action_width<Env, typename pk_voider<decltype(Env::A)>::type> {
    static constexpr int value = Env::A;
};

template <bool B, class T, class F> struct pk_if {
    using type = T;
};
template <class T, class F> struct pk_if<false, T, F> {
    using type = F;
};

// What Env::step takes: Env::Act itself when 1-wide (the existing envs' unchanged path), else pk_box<A>.
template <class Env>
using pk_action_t = typename pk_if<(pk_action_width<Env>::value > 1), pk_box<pk_action_width<Env>::value>,
                                   typename Env::Act>::type;

template <class Env>
__device__ __forceinline__ pk_action_t<Env> pk_load_action(const typename Env::Act *__restrict__ actions, int i) {
    constexpr int A = pk_action_width<Env>::value;
    if constexpr (A == 1) {
        return actions[i];
    } else {
        static_assert(Env::ACTIONS == 0, "an action wider than 1 is a Box's");
        pk_box<A> a;
#pragma unroll
        for (int j = 0; j < A; ++j) a.v[j] = actions[(size_t)i * A + j];
        return a;
    }
}

// Action of (step t, env i) of a rollout: out_actions[at] (at = t * n + i), or its row of A.
template <class Env>
__device__ __forceinline__ void pk_store_action(typename Env::Act *__restrict__ out_actions, size_t at,
                                                const pk_action_t<Env> &a) {
    constexpr int A = pk_action_width<Env>::value;
    if constexpr (A == 1) {
        out_actions[at] = a;
    } else {
#pragma unroll
        for (int j = 0; j < A; ++j) out_actions[at * A + j] = a.v[j];
    }
}

template <class Env>
__device__ __forceinline__ void pk_load_state(const REAL *__restrict__ state, int i, int n, REAL st[Env::D]) {
#pragma unroll
    for (int k = 0; k < Env::D; ++k) st[k] = state[(size_t)k * (size_t)n + (size_t)i];
}

template <class Env>
__device__ __forceinline__ void pk_store_state(REAL *__restrict__ state, int i, int n, const REAL st[Env::D]) {
#pragma unroll
    for (int k = 0; k < Env::D; ++k) state[(size_t)k * (size_t)n + (size_t)i] = st[k];
}

template <class Env>
__device__ __forceinline__ void pk_store_row(REAL *__restrict__ dst, size_t row, const REAL o[Env::O]) {
#pragma unroll
    for (int k = 0; k < Env::O; ++k) dst[row * Env::O + k] = o[k];
}

template <class Env>
__device__ __forceinline__ void pk_redraw(REAL s[Env::D], const typename Env::Params *__restrict__ p, uint seed, int i,
                                          uint ep) {
    REAL sym[4];
    pk_reset_draw(seed, (uint)i, ep, sym);
    Env::reset(sym, p, s);
}

template <class Env>
__device__ __forceinline__ void pk_env_reset(REAL *__restrict__ state, int *__restrict__ steps,
                                             uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
                                             REAL *__restrict__ obs, const typename Env::Params *__restrict__ p,
                                             uint seed, int fresh, int n, int i) {
    const uint ep = fresh ? 0u : episodes[i] + 1u;
    episodes[i] = ep;
    REAL st[Env::D], o[Env::O];
    pk_redraw<Env>(st, p, seed, i, ep);
    pk_store_state<Env>(state, i, n, st);
    steps[i] = 0;
    needs_reset[i] = 0;
    Env::observe(st, o);
    pk_store_row<Env>(obs, (size_t)i, o);
}

// One step of env i on state and counters held in registers, with the autoreset of either mode: the
// one code path of pk_<env>_step and pk_<env>_rollout. o is the obs the env is at afterwards, fo the
// obs the step reached before any autoreset.
template <class Env>
__device__ __forceinline__ void pk_env_advance(REAL st[Env::D], int &t, uint &ep, bool &nr, pk_action_t<Env> action,
                                               REAL o[Env::O], REAL fo[Env::O], REAL &r, bool &term, bool &trunc,
                                               const typename Env::Params *__restrict__ p, uint seed, int max_steps,
                                               int autoreset_mode, int i) {
    r = (REAL)0.0;
    term = trunc = false;
    if (autoreset_mode != 0 && nr) {
        // next_step: an env that finished on the previous call resets now instead of stepping.
        ep += 1u;
        pk_redraw<Env>(st, p, seed, i, ep);
        t = 0;
        nr = false;
    } else {
        Env::step(st, action, p, r, term);
        t += 1;
        trunc = t >= max_steps;  // both flags may be set, as Gymnasium's TimeLimit does
        if (autoreset_mode == 0) {
            // same_step: fo keeps the obs the step reached; o is the reset obs where it finished.
            Env::observe(st, fo);
            if (term || trunc) {
                ep += 1u;
                pk_redraw<Env>(st, p, seed, i, ep);
                t = 0;
            }
        } else {
            nr = term || trunc;
        }
    }
    Env::observe(st, o);
    if (autoreset_mode != 0) {
#pragma unroll
        for (int k = 0; k < Env::O; ++k) fo[k] = o[k];
    }
}

// Everything a step or a rollout launch leaves in the env's buffers: the state, the counters and the (last)
// step's outputs; the episode counter only with ep_write, needs_reset only with nr_write (a step: where the env
// reset, and in next_step mode; a rollout launch: always).
template <class Env>
__device__ __forceinline__ void pk_env_store(REAL *__restrict__ state, int *__restrict__ steps,
                                             uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
                                             REAL *__restrict__ obs, REAL *__restrict__ final_obs,
                                             REAL *__restrict__ reward, uchar *__restrict__ terminated,
                                             uchar *__restrict__ truncated, const REAL st[Env::D], int t, uint ep,
                                             bool nr, const REAL o[Env::O], const REAL fo[Env::O], REAL r, bool term,
                                             bool trunc, bool ep_write, bool nr_write, int n, int i) {
    pk_store_state<Env>(state, i, n, st);
    steps[i] = t;
    if (ep_write) episodes[i] = ep;
    if (nr_write) needs_reset[i] = nr ? 1 : 0;
    pk_store_row<Env>(obs, (size_t)i, o);
    pk_store_row<Env>(final_obs, (size_t)i, fo);
    reward[i] = r;
    terminated[i] = term ? 1 : 0;
    truncated[i] = trunc ? 1 : 0;
}

template <class Env>
__device__ __forceinline__ void pk_env_step(REAL *__restrict__ state, int *__restrict__ steps,
                                            uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
                                            const typename Env::Act *__restrict__ actions, REAL *__restrict__ obs,
                                            REAL *__restrict__ final_obs, REAL *__restrict__ reward,
                                            uchar *__restrict__ terminated, uchar *__restrict__ truncated,
                                            const typename Env::Params *__restrict__ p, uint seed, int max_steps,
                                            int autoreset_mode, int n, int i) {
    // The bytes of kernels/README.md's "Bytes per env-step", as pk_env.h's pk_env_step_one: the episode counter
    // written only where the env reset, needs_reset read and written only in next_step mode (same_step never
    // sets it).
    REAL st[Env::D], o[Env::O], fo[Env::O], r;
    pk_load_state<Env>(state, i, n, st);
    int t = steps[i];
    const uint ep0 = episodes[i];
    uint ep = ep0;
    const bool next_step = autoreset_mode != 0;  // 0: same_step, 1: next_step (pk_env_advance)
    bool nr = next_step && needs_reset[i] != 0, term, trunc;
    pk_env_advance<Env>(st, t, ep, nr, pk_load_action<Env>(actions, i), o, fo, r, term, trunc, p, seed, max_steps,
                        autoreset_mode, i);
    pk_env_store<Env>(state, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, st, t, ep, nr,
                      o, fo, r, term, trunc, ep != ep0, next_step, n, i);
}

// The policy's action at obs o: Philox key (seed, env), counter (episode, steps before the step,
// policy stream, block), as policy.sample_actions. A 1-wide action takes block 0, a wider Box the
// blocks pk_policy_box says.
template <class Env>
__device__ __forceinline__ pk_action_t<Env> pk_env_act(const float *__restrict__ policy, int policy_kind, int hidden,
                                                       const REAL o[Env::O], uint seed, int i, uint ep, int t) {
    constexpr int A = pk_action_width<Env>::value;
    float x[Env::O];
#pragma unroll
    for (int k = 0; k < Env::O; ++k) x[k] = (float)o[k];
    if constexpr (A == 1) {
        uint c[4] = {ep, (uint)t, PK_STREAM_POLICY, 0u};
        pk_philox4x32_10(c, seed, (uint)i);
        if constexpr (Env::ACTIONS > 0)
            return pk_policy_discrete<Env::O, Env::ACTIONS>(policy, policy_kind, hidden, x, c[0]);
        else
            return pk_policy_continuous<Env::O>(policy, policy_kind, hidden, x, Env::ACT_HIGH, c[0], c[1]);
    } else {
        pk_box<A> a;
        pk_policy_box<Env::O, A>(policy, policy_kind, hidden, x, Env::ACT_HIGH, seed, (uint)i, ep, (uint)t, a.v);
        return a;
    }
}

// Steps t0 .. t0 + t_count - 1 of a fused rollout for env i. State and counters stay in registers;
// everything the env's step buffers hold is stored at the end, so the next launch, or env.step,
// continues where this one stopped. The obs acted on first is the env's obs buffer (not observe(s)),
// as on the host path: set_state() leaves that buffer as it was.
template <class Env>
__device__ __forceinline__ void pk_env_rollout(
    REAL *__restrict__ state, int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward, uchar *__restrict__ terminated,
    uchar *__restrict__ truncated, const typename Env::Params *__restrict__ p, const float *__restrict__ policy,
    int policy_kind, int hidden, REAL *__restrict__ out_obs, typename Env::Act *__restrict__ out_actions,
    REAL *__restrict__ out_rewards, uchar *__restrict__ out_terminated, uchar *__restrict__ out_truncated,
    REAL *__restrict__ out_final_obs, uint seed, int max_steps, int autoreset_mode, int t0, int t_count, int n,
    int i) {
    if (t_count <= 0) return;
    REAL st[Env::D], o[Env::O], fo[Env::O], r = (REAL)0.0;
    pk_load_state<Env>(state, i, n, st);
#pragma unroll
    for (int k = 0; k < Env::O; ++k) o[k] = obs[(size_t)i * Env::O + k];
    int t = steps[i];
    uint ep = episodes[i];
    bool nr = needs_reset[i] != 0, term = false, trunc = false;
    for (int tt = t0; tt < t0 + t_count; ++tt) {
        // On AMD GPUs (HIP) clang otherwise turns every output's address into a per-thread 64-bit pointer
        // carried across steps (2 VGPRs a buffer, live through the policy): pinned, i is one VGPR each step.
        PK_PIN(i);
        const size_t at = (size_t)tt * (size_t)n + (size_t)i;
        // the obs stored before the policy runs: with an MLP, o need not stay in registers beside it
        pk_store_row<Env>(out_obs, at, o);
        const pk_action_t<Env> a = pk_env_act<Env>(policy, policy_kind, hidden, o, seed, i, ep, t);
        pk_store_action<Env>(out_actions, at, a);
        pk_env_advance<Env>(st, t, ep, nr, a, o, fo, r, term, trunc, p, seed, max_steps, autoreset_mode, i);
        out_rewards[at] = r;
        out_terminated[at] = term ? 1 : 0;
        out_truncated[at] = trunc ? 1 : 0;
        pk_store_row<Env>(out_final_obs, at, fo);
    }
    pk_env_store<Env>(state, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, st, t, ep, nr,
                      o, fo, r, term, trunc, true, true, n, i);
}

// An env's three entry points, generated from the templates above by one line in its file,
// PK_ENV_KERNELS(cartpole, PkCartPole). They are extern "C", so the documented names
// pk_<env>_reset / _step / _rollout (the OpenCL names too) are the symbols of every build: NVRTC,
// nvcc's cubin and PTX, and a host compiler's shared library alike, with no C++ mangling to map.
// One thread per env; the argument lists are kernels/README.md's.
#define PK_ENV_RESET_STEP_KERNELS(name, Env)                                                                                     \
    extern "C" __global__ void pk_##name##_reset(                                                                     \
        REAL *__restrict__ state, int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset, \
        REAL *__restrict__ obs, const pk_##name##_params *__restrict__ params, uint seed, int fresh, int n) {         \
        const int i = blockIdx.x * blockDim.x + threadIdx.x;                                                          \
        if (i < n) pk_env_reset<Env>(state, steps, episodes, needs_reset, obs, params, seed, fresh, n, i);            \
    }                                                                                                                 \
    extern "C" __global__ void pk_##name##_step(                                                                      \
        REAL *__restrict__ state, int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset, \
        const Env::Act *__restrict__ actions, REAL *__restrict__ obs, REAL *__restrict__ final_obs,                   \
        REAL *__restrict__ reward, uchar *__restrict__ terminated, uchar *__restrict__ truncated,                     \
        const pk_##name##_params *__restrict__ params, uint seed, int max_steps, int autoreset_mode, int n) {         \
        const int i = blockIdx.x * blockDim.x + threadIdx.x;                                                          \
        if (i < n)                                                                                                    \
            pk_env_step<Env>(state, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated,        \
                             truncated, params, seed, max_steps, autoreset_mode, n, i);                               \
    }

#define PK_ENV_ROLLOUT_KERNEL(name, Env)                                                                              \
    extern "C" __global__ PK_MLP_KERNEL void pk_##name##_rollout(                                                     \
        REAL *__restrict__ state, int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset, \
        REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward,                              \
        uchar *__restrict__ terminated, uchar *__restrict__ truncated, const pk_##name##_params *__restrict__ params, \
        const float *__restrict__ policy, int policy_kind, int hidden, REAL *__restrict__ out_obs,                    \
        Env::Act *__restrict__ out_actions, REAL *__restrict__ out_rewards, uchar *__restrict__ out_terminated,       \
        uchar *__restrict__ out_truncated, REAL *__restrict__ out_final_obs, uint seed, int max_steps,                \
        int autoreset_mode, int t0, int t_count, int n) {                                                             \
        const int i = blockIdx.x * blockDim.x + threadIdx.x;                                                          \
        if (i < n)                                                                                                    \
            pk_env_rollout<Env>(state, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params, \
                                policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,       \
                                out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n, i);    \
    }

// -DPK_ROLLOUT_ONLY: the rollout kernel alone (portkern port-check's MLP builds: the reset and step kernels are
// those of the random policy's build, so compiling them again would measure nothing new).
#ifdef PK_ROLLOUT_ONLY
#define PK_ENV_KERNELS(name, Env) PK_ENV_ROLLOUT_KERNEL(name, Env)
#else
#define PK_ENV_KERNELS(name, Env) PK_ENV_RESET_STEP_KERNELS(name, Env) PK_ENV_ROLLOUT_KERNEL(name, Env)
#endif

#endif  // PK_COMMON_CUH
