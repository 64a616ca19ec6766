/* Pendulum-v1: Gymnasium's torque-limited swing-up, operation for operation as portkern/envs/pendulum.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 3
#define ACT float
#define ENV_ACT_HIGH 2.0f /* EnvSpec.action_high: the action space's bound, not the max_torque param */

/* params: max_speed, max_torque, dt, x_init, y_init, grav_coef, torque_coef, pi, two_pi */
inline void env_reset(RV *s, __global const REAL *p, pk_bits b)
{
    s[0] = p[3] * pk_sym_v(b.x);
    s[1] = p[4] * pk_sym_v(b.y);
}

inline IV env_physics(RV *s, FV action, __global const REAL *p, RV *reward)
{
    const REAL max_speed = p[0], dt = p[2], grav_coef = p[5], pi = p[7], two_pi = p[8];
    const RV th = s[0], thdot = s[1];
    /* Gymnasium computes the torque terms in float32 (the action dtype) and promotes afterwards,
     * so they stay float even in double builds. */
    const float max_torque = (float)p[1];
    const FV u = fmin(fmax(action, -max_torque), max_torque);
    const RV u_cost = PK_CONVERT(RV, (float)(0.001) * (u * u));
    const RV u_acc = PK_CONVERT(RV, (float)p[6] * u);
    const RV an = pk_remainder_v(th + pi, two_pi) - pi;
    const RV costs = an * an + (REAL)(0.1) * (thdot * thdot) + u_cost;
    RV newthdot = thdot + (grav_coef * sin(th) + u_acc) * dt;
    newthdot = fmin(fmax(newthdot, -max_speed), max_speed);
    s[0] = th + newthdot * dt;
    s[1] = newthdot;
    *reward = -costs;
    return (IV)(0);
}

inline void env_observe(const RV *s, RV *o)
{
    o[0] = cos(s[0]);
    o[1] = sin(s[0]);
    o[2] = s[1];
}

#include "pk_env.h"

/* Each work-item runs the PK_VW envs from base = global id * PK_VW. */
__kernel void pk_pendulum_reset(__global REAL *s0, __global REAL *s1,
    __global int *steps, __global uint *episodes, __global uchar *needs_reset, __global REAL *obs,
    __global const REAL *params, uint seed, int fresh, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    pk_env_reset_one(s, steps, episodes, needs_reset, obs, params, seed, fresh, base, n);
    pk_st_real(s0, base, n, s[0]);
    pk_st_real(s1, base, n, s[1]);
}

__kernel void pk_pendulum_step(__global REAL *s0, __global REAL *s1,
    __global int *steps, __global uint *episodes, __global uchar *needs_reset, __global const ACT *actions,
    __global REAL *obs, __global REAL *final_obs, __global REAL *reward,
    __global uchar *terminated, __global uchar *truncated, __global const REAL *params,
    uint seed, int max_steps, int autoreset_mode, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    s[0] = pk_ld_real(s0, base, n);
    s[1] = pk_ld_real(s1, base, n);
    pk_env_step_one(s, steps, episodes, needs_reset, PK_CAT(pk_ld_, ACT)(actions, base, n), obs,
                    final_obs, reward, terminated, truncated, params, seed, max_steps,
                    autoreset_mode, base, n);
    pk_st_real(s0, base, n, s[0]);
    pk_st_real(s1, base, n, s[1]);
}

__kernel void pk_pendulum_rollout(__global REAL *s0, __global REAL *s1,
    __global int *steps, __global uint *episodes, __global uchar *needs_reset, __global REAL *obs,
    __global REAL *final_obs, __global REAL *reward, __global uchar *terminated,
    __global uchar *truncated, __global const REAL *params, __global const float *policy,
    int policy_kind, int hidden, __global REAL *out_obs, __global ACT *out_actions,
    __global REAL *out_rewards, __global uchar *out_terminated, __global uchar *out_truncated,
    __global REAL *out_final_obs, uint seed, int max_steps, int autoreset_mode, int t0,
    int t_count, int n)
{
    const int base = get_global_id(0) * PK_VW;
    if (base >= n)
        return;
    RV s[ENV_D];
    s[0] = pk_ld_real(s0, base, n);
    s[1] = pk_ld_real(s1, base, n);
    pk_env_rollout_one(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated,
                       truncated, params, policy, policy_kind, hidden, out_obs, out_actions,
                       out_rewards, out_terminated, out_truncated, out_final_obs, seed, max_steps,
                       autoreset_mode, t0, t_count, base, n);
    pk_st_real(s0, base, n, s[0]);
    pk_st_real(s1, base, n, s[1]);
}
