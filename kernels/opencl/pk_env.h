/* The entry points of one env, generated from its physics (kernels/README.md): reset, step with
 * in-kernel autoreset, and the fused rollout. Each work-item runs PK_VW envs (pk_vec.h).
 *
 * The env file includes this header last, after defining ENV_NAME (its kernel stem: the entry
 * points are pk_<ENV_NAME>_reset, _step and _rollout, and its params the struct
 * pk_<ENV_NAME>_params of the generated pk_params.h). Its sizes and action space come from the
 * same generated header (pk_<ENV_NAME>_D, _OBS, _ACT, _ACTIONS, _ACT_HIGH, from its EnvSpec):
 * ENV_D (state variables), ENV_OBS (obs width), ACT (action element type), ENV_ACTIONS (the
 * number of discrete actions, 0 for a Box) and ENV_ACT_HIGH (a Box's symmetric bound). An env
 * whose sizes depend on its structure (Chain-v0's links) defines ENV_D and ENV_OBS itself, and
 * for a Box of several components ENV_ACT_DIM, their number (1 when not defined). The env file
 * defines, over the vector types of pk_vec.h (AV = PK_V(ACT)):
 *   void env_reset(RV *s, __global const pk_<ENV_NAME>_params *p, pk_bits bits);
 *   IV   env_physics(RV *s, AV a, __global const pk_<ENV_NAME>_params *p, RV *reward);
 *        (returns the terminated mask; with ENV_ACT_DIM > 1 the action is const AV *a, the
 *        ENV_ACT_DIM components' vectors)
 *   void env_observe(const RV *s, RV *o);
 */
#ifndef PK_ENV_H
#define PK_ENV_H

#ifndef ENV_NAME
#error "define ENV_NAME (the env's kernel stem) before including pk_env.h"
#endif

/* pk_<ENV_NAME><what>: the env's entry points and its generated sizes (pk_params.h) */
#define PK_ENV_ENTRY(what) PK_CAT(PK_CAT(pk_, ENV_NAME), what)
#ifndef ENV_D
#define ENV_D PK_ENV_ENTRY(_D)
#endif
#ifndef ENV_OBS
#define ENV_OBS PK_ENV_ENTRY(_OBS)
#endif
#define ACT PK_ENV_ENTRY(_ACT)
#define ENV_ACTIONS PK_ENV_ENTRY(_ACTIONS)
#define ENV_ACT_HIGH PK_ENV_ENTRY(_ACT_HIGH)

/* Box actions of ENV_ACT_DIM components: [n, ENV_ACT_DIM] row-major in the step's actions buffer,
 * [T, n, ENV_ACT_DIM] in a rollout's out_actions, one AV per component in registers. With 1 (every
 * discrete env and 1-wide Box) an action is one AV, loaded and stored as an [n] array. */
#ifndef ENV_ACT_DIM
#define ENV_ACT_DIM 1
#endif

/* The MLP policy's outputs: one logit per discrete action, or the Box's components (one pass, pk_policy.h) */
#define PK_MLP_OUTS (ENV_ACTIONS > 0 ? ENV_ACTIONS : ENV_ACT_DIM)
#include "pk_policy.h"
#if ENV_ACT_DIM < 1 || ENV_ACT_DIM > PK_ROWS_MAX
#error "ENV_ACT_DIM must be from 1 to PK_ROWS_MAX"
#endif
#if ENV_ACT_DIM > 1 && ENV_ACTIONS > 0
#error "a discrete env takes one action index per env: ENV_ACT_DIM is for Box actions"
#endif
#if ENV_ACT_DIM == 1
#define PK_ACTION AV action
#else
#define PK_ACTION const AV *action
#endif

#define PK_SAME_STEP 0
#define PK_NEXT_STEP 1
#define AV PK_V(ACT)
#define ENV_PARAMS PK_CAT(PK_CAT(pk_, ENV_NAME), _params)

static inline UV pk_env_index(int base)
{
    return (UV)((uint)base) + PK_LANES;
}

/* The state is one [ENV_D, n] array, variable-major: variable j of env i at j * n + i, so each
 * variable is a contiguous row and the PK_VW lanes of a work-item load and store as vectors. */
static inline void pk_ld_state(__global const REAL *state, int base, int n, RV *s)
{
    for (int j = 0; j < ENV_D; ++j)
        s[j] = pk_ld_real(state + (size_t)j * (size_t)n, base, n);
}

static inline void pk_st_state(__global REAL *state, int base, int n, const RV *s)
{
    for (int j = 0; j < ENV_D; ++j)
        pk_st_real(state + (size_t)j * (size_t)n, base, n, s[j]);
}

static inline void pk_select_state(RV *s, const RV *other, IV take)
{
    for (int j = 0; j < ENV_D; ++j)
        s[j] = select(s[j], other[j], PK_RMASK(take));
}

/* Reset the envs at base: a fresh reset restarts the episode counter at 0, else it advances by one. */
static inline void pk_env_reset_one(RV *s, __global int *steps, __global uint *episodes,
                             __global uchar *needs_reset, __global REAL *obs,
                             __global const ENV_PARAMS *params, uint seed, int fresh, int base,
                             int n)
{
    const UV ep = fresh ? (UV)(0u) : pk_ld_uint(episodes, base, n) + 1u;
    pk_st_uint(episodes, base, n, ep);
    env_reset(s, params, pk_philox_v(ep, (UV)(0u), PK_STREAM_RESET, seed, pk_env_index(base)));
    pk_st_int(steps, base, n, (IV)(0));
    pk_st_uchar(needs_reset, base, n, (PK_V(uchar))(0));
    RV o[ENV_OBS];
    env_observe(s, o);
    pk_st_rows(obs, ENV_OBS, base, n, o);
}

/* One step of the envs at base on state and counters held in registers, with the autoreset of
 * either mode: the one code path of pk_<env>_step and pk_<env>_rollout. o is the obs each env is at
 * afterwards, fo the obs the step reached before any autoreset. Every lane runs the physics and
 * the reset draw is made only when some lane resets; per lane the result is the scalar algorithm's. */
/* *reset: the lanes that reset on this call. */
static inline void pk_env_advance(RV *s, IV *nsteps, UV *ep, IV *needs_reset, PK_ACTION, RV *o, RV *fo,
                           RV *reward, IV *term, IV *trunc, IV *reset, __global const ENV_PARAMS *params,
                           uint seed, int max_steps, int autoreset_mode, int base)
{
    const IV waiting = autoreset_mode == PK_NEXT_STEP ? *needs_reset : (IV)(0);
    RV next[ENV_D];
    for (int j = 0; j < ENV_D; ++j)
        next[j] = s[j];
    RV r;
    IV te = env_physics(next, action, params, &r);
    IV ns = *nsteps + 1;
    /* Both flags may be set at once, as Gymnasium's TimeLimit does. */
    IV tr = ns >= (IV)(max_steps);
    IV done = te | tr;
    if (autoreset_mode == PK_SAME_STEP) {
        env_observe(next, fo);
        for (int j = 0; j < ENV_D; ++j)
            s[j] = next[j];
        for (int k = 0; k < ENV_OBS; ++k)
            o[k] = fo[k];
        *reset = done;
        if (PK_ANY(done)) {
            const UV ep1 = *ep + 1u;
            RV fresh[ENV_D], fresh_obs[ENV_OBS];
            env_reset(fresh, params,
                      pk_philox_v(ep1, (UV)(0u), PK_STREAM_RESET, seed, pk_env_index(base)));
            env_observe(fresh, fresh_obs);
            pk_select_state(s, fresh, done);
            for (int k = 0; k < ENV_OBS; ++k)
                o[k] = select(o[k], fresh_obs[k], PK_RMASK(done));
            *ep = select(*ep, ep1, done);
            ns = select(ns, (IV)(0), done);
        }
    } else {
        /* next_step: an env that finished on the previous call only resets on this one. */
        te = select(te, (IV)(0), waiting);
        tr = select(tr, (IV)(0), waiting);
        r = select(r, (RV)(0.0), PK_RMASK(waiting));
        *needs_reset = select(te | tr, (IV)(0), waiting);
        for (int j = 0; j < ENV_D; ++j)
            s[j] = next[j];
        *reset = waiting;
        if (PK_ANY(waiting)) {
            const UV ep1 = *ep + 1u;
            RV fresh[ENV_D];
            env_reset(fresh, params,
                      pk_philox_v(ep1, (UV)(0u), PK_STREAM_RESET, seed, pk_env_index(base)));
            pk_select_state(s, fresh, waiting);
            *ep = select(*ep, ep1, waiting);
            ns = select(ns, (IV)(0), waiting);
        }
        env_observe(s, o);
        for (int k = 0; k < ENV_OBS; ++k)
            fo[k] = o[k];
    }
    *nsteps = ns;
    *reward = r;
    *term = te;
    *trunc = tr;
}

/* v's lanes where mask is set: the episode counters, which change only at a reset. */
static inline void pk_st_uint_where(__global uint *a, int base, int n, UV v, IV mask)
{
#if PK_VW == 1
    if (mask)
        a[base] = v;
#else
    if (!PK_ANY(mask))
        return;
    uint t[PK_VW];
    int m[PK_VW];
    PK_CAT(vstore, PK_VW)(v, 0, t);
    PK_CAT(vstore, PK_VW)(mask, 0, m);
    for (int l = 0; l < PK_VW && base + l < n; ++l)
        if (m[l])
            a[base + l] = t[l];
#endif
}

/* What a step leaves in the env's own buffers, after pk_<env>_step and at the end of a rollout
 * launch: the counters, the obs it is at and the obs it reached, the reward and the flags. The episode
 * counters go only to the lanes in ep_write, needs_reset only with nr_write (a step: the lanes that reset,
 * and next_step mode; a rollout launch: every lane, always). */
static inline void pk_env_store(__global int *steps, __global uint *episodes, __global uchar *needs_reset,
                         __global REAL *obs, __global REAL *final_obs, __global REAL *reward,
                         __global uchar *terminated, __global uchar *truncated, IV nsteps, UV ep,
                         IV nr, const RV *o, const RV *fo, RV r, IV te, IV tr, IV ep_write, int nr_write,
                         int base, int n)
{
    pk_st_int(steps, base, n, nsteps);
    pk_st_uint_where(episodes, base, n, ep, ep_write);
    if (nr_write)
        pk_st_uchar(needs_reset, base, n, PK_FLAG(nr));
    pk_st_rows(obs, ENV_OBS, base, n, o);
    pk_st_rows(final_obs, ENV_OBS, base, n, fo);
    pk_st_real(reward, base, n, r);
    pk_st_uchar(terminated, base, n, PK_FLAG(te));
    pk_st_uchar(truncated, base, n, PK_FLAG(tr));
}

/* One step of the envs at base (kernels/README.md, "Bytes per env-step"): the state, action, step and
 * episode counters in; the state, step counter, obs, final obs, reward and flags out. The episode counters
 * are written only by the lanes that reset, and needs_reset is read and written only in next_step mode
 * (same_step never sets it). Reading the episode counters only where a lane resets would save 4 bytes
 * more, but on Intel's CPU runtime that load in a branch changed how the step was vectorised, and with it
 * the last bit of Pendulum's cos/sin against the fused rollout's (tests/test_rollout.py). */
static inline void pk_env_step_one(RV *s, __global int *steps, __global uint *episodes,
                            __global uchar *needs_reset, PK_ACTION, __global REAL *obs,
                            __global REAL *final_obs, __global REAL *reward,
                            __global uchar *terminated, __global uchar *truncated,
                            __global const ENV_PARAMS *params, uint seed, int max_steps,
                            int autoreset_mode, int base, int n)
{
    IV nsteps = pk_ld_int(steps, base, n), te, tr, reset;
    const int next_step = autoreset_mode == PK_NEXT_STEP;
    IV nr = next_step ? PK_CONVERT(IV, pk_ld_uchar(needs_reset, base, n)) != (IV)(0) : (IV)(0);
    UV ep = pk_ld_uint(episodes, base, n);
    RV o[ENV_OBS], fo[ENV_OBS], r;
    pk_env_advance(s, &nsteps, &ep, &nr, action, o, fo, &r, &te, &tr, &reset, params, seed, max_steps,
                   autoreset_mode, base);
    pk_env_store(steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, nsteps, ep, nr,
                 o, fo, r, te, tr, reset, next_step, base, n);
}

/* The policy's actions at obs o: Philox key (seed, env), counter (episode, steps before the step,
 * policy stream, 0), as policy.sample_actions; a wider Box also draws blocks 1, 2, ... */
#if ENV_ACT_DIM == 1
static inline AV pk_env_act(__global const float *policy, int policy_kind, int hidden, const RV *o,
                     uint seed, int base, UV ep, IV nsteps)
{
    const pk_bits b =
        pk_philox_v(ep, PK_CONVERT(UV, nsteps), PK_STREAM_POLICY, seed, pk_env_index(base));
    FV x[ENV_OBS];
    for (int k = 0; k < ENV_OBS; ++k)
        x[k] = PK_CONVERT(FV, o[k]);
#if ENV_ACTIONS > 0
    return pk_policy_discrete(policy, policy_kind, hidden, x, ENV_OBS, ENV_ACTIONS, b);
#else
    return pk_policy_continuous(policy, policy_kind, hidden, x, ENV_OBS, ENV_ACT_HIGH, b);
#endif
}
#else
static inline void pk_env_act(__global const float *policy, int policy_kind, int hidden, const RV *o,
                       uint seed, int base, UV ep, IV nsteps, AV *a)
{
    FV x[ENV_OBS];
    for (int k = 0; k < ENV_OBS; ++k)
        x[k] = PK_CONVERT(FV, o[k]);
    pk_policy_box(policy, policy_kind, hidden, x, ENV_OBS, ENV_ACT_DIM, ENV_ACT_HIGH, ep,
                  PK_CONVERT(UV, nsteps), seed, pk_env_index(base), a);
}
#endif

/* Steps t0 .. t0 + t_count - 1 of a fused rollout for the envs at base, their state s already in
 * registers; the counters stay in registers too and everything the env's step buffers hold is
 * stored at the end, so the next launch, or env.step, continues where this one stopped. The obs
 * acted on first is the env's obs buffer (not observe(s)), as on the host path: set_state()
 * leaves that buffer as it was. */
/* On a CPU driver (the host builds with PK_CPU_DEVICE) this body is a real call per work-item: inlined
 * into the kernel, its private arrays (the MLP policy's activations, 64 values per hidden layer, per
 * lane) are what PoCL's work-group loops keep for every work-item of a group at once, and at the
 * driver's own work-group size (local_size auto) with 8 or 16 lanes that overran the worker thread's
 * stack and crashed the process (CartPole, 20,000 envs, MLP policy). As a call, the arrays live in the
 * callee's frame, one work-item at a time; the fused rollout runs as fast as inlined on PoCL and
 * Intel's runtime (N = 65,536, T = 32, three alternated rounds). On a GPU a call would put them in
 * scratch memory: there it is inlined. */
#ifdef PK_CPU_DEVICE
#define PK_ROLLOUT_ONE static __attribute__((noinline))
#else
/* always: clang left Chain-v0's rollout body a real call on AMD GPUs (arguments on the stack, 84 bytes of
 * scratch, the call's 248 VGPRs) */
#define PK_ROLLOUT_ONE static inline __attribute__((always_inline))
#endif
PK_ROLLOUT_ONE void pk_env_rollout_one(RV *s, __global int *steps, __global uint *episodes,
                               __global uchar *needs_reset, __global REAL *obs,
                               __global REAL *final_obs, __global REAL *reward,
                               __global uchar *terminated, __global uchar *truncated,
                               __global const ENV_PARAMS *params, __global const float *policy,
                               int policy_kind, int hidden, __global REAL *out_obs,
                               __global ACT *out_actions, __global REAL *out_rewards,
                               __global uchar *out_terminated, __global uchar *out_truncated,
                               __global REAL *out_final_obs, uint seed, int max_steps,
                               int autoreset_mode, int t0, int t_count, int base, int n)
{
    if (t_count <= 0)
        return;
    IV nsteps = pk_ld_int(steps, base, n), te = (IV)(0), tr = (IV)(0);
    IV nr = PK_CONVERT(IV, pk_ld_uchar(needs_reset, base, n)) != (IV)(0);
    UV ep = pk_ld_uint(episodes, base, n);
    RV o[ENV_OBS], fo[ENV_OBS], r = (RV)(0.0);
    pk_ld_rows(obs, ENV_OBS, base, n, o);
    for (int t = t0; t < t0 + t_count; ++t) {
        /* On AMD GPUs clang otherwise turned every output's address into a per-lane 64-bit pointer carried
         * across steps (2 VGPRs a buffer, live through the policy): pinned, base is one VGPR each step. */
        PK_PIN(base);
        const size_t row = (size_t)t * (size_t)n;
        /* the obs stored before the policy runs: with an MLP, o need not stay in registers beside it */
        pk_st_rows(out_obs + row * ENV_OBS, ENV_OBS, base, n, o);
#if ENV_ACT_DIM == 1
        const AV a = pk_env_act(policy, policy_kind, hidden, o, seed, base, ep, nsteps);
        PK_CAT(pk_st_, ACT)(out_actions + row, base, n, a);
#else
        AV a[ENV_ACT_DIM];
        pk_env_act(policy, policy_kind, hidden, o, seed, base, ep, nsteps, a);
        PK_CAT(pk_st_rows_, ACT)(out_actions + row * ENV_ACT_DIM, ENV_ACT_DIM, base, n, a);
#endif
        IV reset;
        pk_env_advance(s, &nsteps, &ep, &nr, a, o, fo, &r, &te, &tr, &reset, params, seed, max_steps,
                       autoreset_mode, base);
        pk_st_real(out_rewards + row, base, n, r);
        pk_st_uchar(out_terminated + row, base, n, PK_FLAG(te));
        pk_st_uchar(out_truncated + row, base, n, PK_FLAG(tr));
        pk_st_rows(out_final_obs + row * ENV_OBS, ENV_OBS, base, n, fo);
    }
    pk_env_store(steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, nsteps,
                 ep, nr, o, fo, r, te, tr, (IV)(-1), 1, base, n);
}

/* ---- the entry points (kernels/README.md has the ABI); each work-item runs the PK_VW envs
 * from base = global id * PK_VW ---------------------------------------------------------------- */

/* -DPK_ROLLOUT_ONLY: the rollout kernel alone (portkern port-check's MLP builds for compilers that generate
 * each kernel on its own: the reset and step kernels are those of the random policy's build). */
#ifndef PK_ROLLOUT_ONLY
__kernel void PK_ENV_ENTRY(_reset)(__global REAL *state, __global int *steps,
    __global uint *episodes, __global uchar *needs_reset, __global REAL *obs,
    __global const ENV_PARAMS *params, uint seed, int fresh, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    pk_env_reset_one(s, steps, episodes, needs_reset, obs, params, seed, fresh, base, n);
    pk_st_state(state, base, n, s);
}

__kernel PK_XEHPC_SIMD16 void PK_ENV_ENTRY(_step)(__global REAL *state, __global int *steps,
    __global uint *episodes, __global uchar *needs_reset, __global const ACT *actions,
    __global REAL *obs, __global REAL *final_obs, __global REAL *reward,
    __global uchar *terminated, __global uchar *truncated, __global const ENV_PARAMS *params,
    uint seed, int max_steps, int autoreset_mode, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    pk_ld_state(state, base, n, s);
#if ENV_ACT_DIM == 1
    pk_env_step_one(s, steps, episodes, needs_reset, PK_CAT(pk_ld_, ACT)(actions, base, n), obs,
                    final_obs, reward, terminated, truncated, params, seed, max_steps,
                    autoreset_mode, base, n);
#else
    AV a[ENV_ACT_DIM];
    PK_CAT(pk_ld_rows_, ACT)(actions, ENV_ACT_DIM, base, n, a);
    pk_env_step_one(s, steps, episodes, needs_reset, a, obs, final_obs, reward, terminated,
                    truncated, params, seed, max_steps, autoreset_mode, base, n);
#endif
    pk_st_state(state, base, n, s);
}

#endif

/* the Intel SIMD width of the MLP build, and of the random policy's on Xe-HPC (pk_policy.h) */
#ifdef PK_HAS_MLP
#define PK_ROLLOUT_SIMD PK_MLP_SIMD
#else
#define PK_ROLLOUT_SIMD PK_XEHPC_SIMD16
#endif

__kernel PK_ROLLOUT_SIMD PK_MLP_AMD_WAVES void PK_ENV_ENTRY(_rollout)(__global REAL *state, __global int *steps,
    __global uint *episodes, __global uchar *needs_reset, __global REAL *obs,
    __global REAL *final_obs, __global REAL *reward, __global uchar *terminated,
    __global uchar *truncated, __global const ENV_PARAMS *restrict params,
    __global const float *restrict policy, int policy_kind, int hidden, __global REAL *out_obs, __global ACT *out_actions,
    __global REAL *out_rewards, __global uchar *out_terminated, __global uchar *out_truncated,
    __global REAL *out_final_obs, uint seed, int max_steps, int autoreset_mode, int t0,
    int t_count, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    pk_ld_state(state, base, n, s);
    pk_env_rollout_one(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated,
                       truncated, params, policy, policy_kind, hidden, out_obs, out_actions,
                       out_rewards, out_terminated, out_truncated, out_final_obs, seed, max_steps,
                       autoreset_mode, t0, t_count, base, n);
    pk_st_state(state, base, n, s);
}

#endif
