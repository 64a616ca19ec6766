// Shared helpers for portkern's CUDA kernels: dtype macro, Philox4x32-10 and the reset draw.
#ifndef PK_COMMON_CUH
#define PK_COMMON_CUH

#ifndef REAL
#define REAL float
#endif

typedef unsigned int uint;
typedef unsigned char uchar;

#define PK_STREAM_RESET 0u
#define PK_STREAM_POLICY 1u

#include "pk_policy.cuh"

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

// NumPy's maximum / minimum / clip on non-NaN values (clip is minimum(maximum(x, lo), hi)).
template <class F> __device__ __forceinline__ F pk_max(F a, F b) { return a > b ? a : b; }
template <class F> __device__ __forceinline__ F pk_min(F a, F b) { return a < b ? a : b; }
template <class F> __device__ __forceinline__ F pk_clip(F x, F lo, F hi) { return pk_min(pk_max(x, lo), hi); }

// The env kernels' shared body. An env is a struct with D (state size), O (obs size), its action
// space (Act: int or float; ACTIONS: the number of discrete actions, 0 for a Box; ACT_HIGH: the Box
// bound, EnvSpec.action_high) and static device functions reset(sym, params, s),
// step(s, action, params, reward, term), observe(s, o).
template <class Env>
__device__ __forceinline__ void pk_store_row(REAL *__restrict__ dst, size_t row, const REAL o[Env::O]) {
#pragma unroll
    for (int k = 0; k < Env::O; ++k) dst[row * Env::O + k] = o[k];
}

template <class Env>
__device__ __forceinline__ void pk_store_obs(REAL *__restrict__ dst, int i, const REAL s[Env::D]) {
    REAL o[Env::O];
    Env::observe(s, o);
    pk_store_row<Env>(dst, (size_t)i, o);
}

template <class Env>
__device__ __forceinline__ void pk_redraw(REAL s[Env::D], const REAL *__restrict__ params, uint seed, int i, uint ep) {
    REAL sym[4];
    pk_reset_draw(seed, (uint)i, ep, sym);
    Env::reset(sym, params, s);
}

template <class Env>
__device__ __forceinline__ void pk_env_reset(REAL *const s[Env::D], int *__restrict__ steps, uint *__restrict__ episodes,
                                             uchar *__restrict__ needs_reset, REAL *__restrict__ obs,
                                             const REAL *__restrict__ params, uint seed, int fresh, int i) {
    const uint ep = fresh ? 0u : episodes[i] + 1u;
    episodes[i] = ep;
    REAL st[Env::D];
    pk_redraw<Env>(st, params, seed, i, ep);
#pragma unroll
    for (int k = 0; k < Env::D; ++k) s[k][i] = st[k];
    steps[i] = 0;
    needs_reset[i] = 0;
    pk_store_obs<Env>(obs, i, st);
}

// One step of env i on state and counters held in registers, with the autoreset of either mode: the
// one code path of pk_<env>_step and pk_<env>_rollout. o is the obs the env is at afterwards, fo the
// obs the step reached before any autoreset.
template <class Env>
__device__ __forceinline__ void pk_env_advance(REAL st[Env::D], int &t, uint &ep, bool &nr, typename Env::Act action,
                                               REAL o[Env::O], REAL fo[Env::O], REAL &r, bool &term, bool &trunc,
                                               const REAL *__restrict__ params, uint seed, int max_steps,
                                               int autoreset_mode, int i) {
    r = (REAL)0.0;
    term = trunc = false;
    if (autoreset_mode != 0 && nr) {
        // next_step: an env that finished on the previous call resets now instead of stepping.
        ep += 1u;
        pk_redraw<Env>(st, params, seed, i, ep);
        t = 0;
        nr = false;
    } else {
        Env::step(st, action, params, r, term);
        t += 1;
        trunc = t >= max_steps;  // both flags may be set, as Gymnasium's TimeLimit does
        if (autoreset_mode == 0) {
            // same_step: fo keeps the obs the step reached; o is the reset obs where it finished.
            Env::observe(st, fo);
            if (term || trunc) {
                ep += 1u;
                pk_redraw<Env>(st, params, seed, i, ep);
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

template <class Env>
__device__ __forceinline__ void pk_env_step(REAL *const s[Env::D], int *__restrict__ steps, uint *__restrict__ episodes,
                                            uchar *__restrict__ needs_reset,
                                            const typename Env::Act *__restrict__ actions, REAL *__restrict__ obs,
                                            REAL *__restrict__ final_obs, REAL *__restrict__ reward,
                                            uchar *__restrict__ terminated, uchar *__restrict__ truncated,
                                            const REAL *__restrict__ params, uint seed, int max_steps,
                                            int autoreset_mode, int i) {
    REAL st[Env::D], o[Env::O], fo[Env::O], r;
#pragma unroll
    for (int k = 0; k < Env::D; ++k) st[k] = s[k][i];
    int t = steps[i];
    uint ep = episodes[i];
    bool nr = needs_reset[i] != 0, term, trunc;
    pk_env_advance<Env>(st, t, ep, nr, actions[i], o, fo, r, term, trunc, params, seed, max_steps, autoreset_mode, i);
#pragma unroll
    for (int k = 0; k < Env::D; ++k) s[k][i] = st[k];
    steps[i] = t;
    episodes[i] = ep;
    needs_reset[i] = nr ? 1 : 0;
    pk_store_row<Env>(obs, (size_t)i, o);
    pk_store_row<Env>(final_obs, (size_t)i, fo);
    reward[i] = r;
    terminated[i] = term ? 1 : 0;
    truncated[i] = trunc ? 1 : 0;
}

// The policy's action at obs o: Philox key (seed, env), counter (episode, steps before the step,
// policy stream, 0), as policy.sample_actions.
template <class Env>
__device__ __forceinline__ typename Env::Act pk_env_act(const float *__restrict__ policy, int policy_kind, int hidden,
                                                        const REAL o[Env::O], uint seed, int i, uint ep, int t) {
    uint c[4] = {ep, (uint)t, PK_STREAM_POLICY, 0u};
    pk_philox4x32_10(c, seed, (uint)i);
    float x[Env::O];
#pragma unroll
    for (int k = 0; k < Env::O; ++k) x[k] = (float)o[k];
    if constexpr (Env::ACTIONS > 0)
        return pk_policy_discrete(policy, policy_kind, hidden, x, Env::O, Env::ACTIONS, c[0]);
    else
        return pk_policy_continuous(policy, policy_kind, hidden, x, Env::O, Env::ACT_HIGH, c[0], c[1]);
}

// Steps t0 .. t0 + t_count - 1 of a fused rollout for env i. State and counters stay in registers;
// everything the env's step buffers hold is stored at the end, so the next launch, or env.step,
// continues where this one stopped. The obs acted on first is the env's obs buffer (not observe(s)),
// as on the host path: set_state() leaves that buffer as it was.
template <class Env>
__device__ __forceinline__ void pk_env_rollout(
    REAL *const s[Env::D], int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward, uchar *__restrict__ terminated,
    uchar *__restrict__ truncated, const REAL *__restrict__ params, const float *__restrict__ policy, int policy_kind,
    int hidden, REAL *__restrict__ out_obs, typename Env::Act *__restrict__ out_actions,
    REAL *__restrict__ out_rewards, uchar *__restrict__ out_terminated, uchar *__restrict__ out_truncated,
    REAL *__restrict__ out_final_obs, uint seed, int max_steps, int autoreset_mode, int t0, int t_count, int n,
    int i) {
    if (t_count <= 0) return;
    REAL st[Env::D], o[Env::O], fo[Env::O], r = (REAL)0.0;
#pragma unroll
    for (int k = 0; k < Env::D; ++k) st[k] = s[k][i];
#pragma unroll
    for (int k = 0; k < Env::O; ++k) o[k] = obs[(size_t)i * Env::O + k];
    int t = steps[i];
    uint ep = episodes[i];
    bool nr = needs_reset[i] != 0, term = false, trunc = false;
    for (int tt = t0; tt < t0 + t_count; ++tt) {
        const size_t at = (size_t)tt * (size_t)n + (size_t)i;
        const typename Env::Act a = pk_env_act<Env>(policy, policy_kind, hidden, o, seed, i, ep, t);
        pk_store_row<Env>(out_obs, at, o);
        out_actions[at] = a;
        pk_env_advance<Env>(st, t, ep, nr, a, o, fo, r, term, trunc, params, seed, max_steps, autoreset_mode, i);
        out_rewards[at] = r;
        out_terminated[at] = term ? 1 : 0;
        out_truncated[at] = trunc ? 1 : 0;
        pk_store_row<Env>(out_final_obs, at, fo);
    }
#pragma unroll
    for (int k = 0; k < Env::D; ++k) s[k][i] = st[k];
    steps[i] = t;
    episodes[i] = ep;
    needs_reset[i] = nr ? 1 : 0;
    pk_store_row<Env>(obs, (size_t)i, o);
    pk_store_row<Env>(final_obs, (size_t)i, fo);
    reward[i] = r;
    terminated[i] = term ? 1 : 0;
    truncated[i] = trunc ? 1 : 0;
}

#endif  // PK_COMMON_CUH
