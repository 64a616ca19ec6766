/* Reset and in-kernel autoreset shared by every env kernel (kernels/README.md); include after the physics.
 *
 * The including file defines ENV_D (state variables), ENV_OBS (obs width), ACT (action type) and
 *   void env_reset(REAL *s, __global const REAL *p, uint4 bits);
 *   int  env_physics(REAL *s, ACT a, __global const REAL *p, REAL *reward);   returns terminated
 *   void env_observe(const REAL *s, __global REAL *o);
 */
#ifndef PK_ENV_H
#define PK_ENV_H

#define PK_SAME_STEP 0
#define PK_NEXT_STEP 1

/* Reset env i: a fresh reset restarts the episode counter at 0, otherwise it advances by one. */
inline void pk_env_reset_one(REAL *s, __global int *steps, __global uint *episodes,
                             __global uchar *needs_reset, __global REAL *obs,
                             __global const REAL *params, uint seed, int fresh, int i)
{
    const uint ep = fresh ? 0u : episodes[i] + 1u;
    episodes[i] = ep;
    env_reset(s, params, pk_draw(seed, (uint)i, ep, PK_STREAM_RESET));
    steps[i] = 0;
    needs_reset[i] = 0;
    env_observe(s, obs + (size_t)i * ENV_OBS);
}

/* One step of env i on its state s (in/out), with the autoreset of either mode. */
inline void pk_env_step_one(REAL *s, __global int *steps, __global uint *episodes,
                            __global uchar *needs_reset, ACT action,
                            __global REAL *obs, __global REAL *final_obs,
                            __global REAL *reward, __global uchar *terminated,
                            __global uchar *truncated, __global const REAL *params,
                            uint seed, int max_steps, int autoreset_mode, int i)
{
    __global REAL *o = obs + (size_t)i * ENV_OBS;
    __global REAL *fo = final_obs + (size_t)i * ENV_OBS;
    int nsteps = steps[i];
    uint ep = episodes[i];
    REAL r = (REAL)(0.0);
    int term = 0, trunc = 0;
    if (autoreset_mode == PK_NEXT_STEP && needs_reset[i]) {
        /* next_step: the env finished on the previous call, so this call only resets it. */
        ep += 1u;
        env_reset(s, params, pk_draw(seed, (uint)i, ep, PK_STREAM_RESET));
        nsteps = 0;
        needs_reset[i] = 0;
    } else {
        term = env_physics(s, action, params, &r);
        nsteps += 1;
        /* Both flags may be set at once, as Gymnasium's TimeLimit does. */
        trunc = nsteps >= max_steps;
        if (autoreset_mode == PK_SAME_STEP) {
            env_observe(s, fo);
            if (term || trunc) {
                ep += 1u;
                env_reset(s, params, pk_draw(seed, (uint)i, ep, PK_STREAM_RESET));
                nsteps = 0;
            }
        } else {
            needs_reset[i] = (uchar)(term || trunc);
        }
    }
    steps[i] = nsteps;
    episodes[i] = ep;
    env_observe(s, o);
    if (autoreset_mode == PK_NEXT_STEP)
        env_observe(s, fo);
    reward[i] = r;
    terminated[i] = (uchar)term;
    truncated[i] = (uchar)trunc;
}

#endif
