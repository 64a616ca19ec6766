/* MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force, as
 * portkern/envs/mountain_car_continuous.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 2
#define ACT float
#define ENV_ACT_HIGH 1.0f /* EnvSpec.action_high */

/* params: min_action, max_action, min_position, max_position, max_speed, goal_position,
 * goal_velocity, power, gravity, reset_center, reset_half */
inline void env_reset(RV *s, __global const REAL *p, pk_bits b)
{
    s[0] = p[9] + p[10] * pk_sym_v(b.x);
    s[1] = (RV)(0.0);
}

inline IV env_physics(RV *s, FV action, __global const REAL *p, RV *reward)
{
    const REAL min_a = p[0], max_a = p[1], min_pos = p[2], max_pos = p[3], max_speed = p[4];
    const REAL goal_pos = p[5], goal_vel = p[6], power = p[7], gravity = p[8];
    RV position = s[0], velocity = s[1];
    const RV a = PK_CONVERT(RV, action);
    const RV force = fmin(fmax(a, min_a), max_a);
    velocity = velocity + (force * power - gravity * cos((REAL)(3.0) * position));
    velocity = fmin(velocity, max_speed);
    velocity = fmax(velocity, -max_speed);
    position = position + velocity;
    position = fmin(position, max_pos);
    position = fmax(position, min_pos);
    const MV at_wall = (position == min_pos) & (velocity < (REAL)(0.0));
    velocity = select(velocity, (RV)(0.0), at_wall);
    s[0] = position;
    s[1] = velocity;
    const MV term = (position >= goal_pos) & (velocity >= goal_vel);
    /* The action cost uses the unclipped action, as Gymnasium's does. */
    *reward = select((RV)(0.0), (RV)(100.0), PK_RMASK(term)) - a * a * (REAL)(0.1);
    return PK_IMASK(term);
}

inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

#include "pk_env.h"

/* Each work-item runs the PK_VW envs from base = global id * PK_VW. */
__kernel void pk_mountain_car_continuous_reset(__global REAL *s0, __global REAL *s1,
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

__kernel void pk_mountain_car_continuous_step(__global REAL *s0, __global REAL *s1,
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

__kernel void pk_mountain_car_continuous_rollout(__global REAL *s0, __global REAL *s1,
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
