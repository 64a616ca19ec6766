/* MountainCar-v0: Gymnasium's under-powered car, discrete push, as portkern/envs/mountain_car.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 2
#define ACT int
#define ENV_ACTIONS 3

/* params: min_position, max_position, max_speed, goal_position, goal_velocity, force, gravity,
 * reset_center, reset_half */
inline void env_reset(RV *s, __global const REAL *p, pk_bits b)
{
    s[0] = p[7] + p[8] * pk_sym_v(b.x);
    s[1] = (RV)(0.0);
}

inline IV env_physics(RV *s, IV action, __global const REAL *p, RV *reward)
{
    const REAL min_pos = p[0], max_pos = p[1], max_speed = p[2], goal_pos = p[3];
    const REAL goal_vel = p[4], force = p[5], gravity = p[6];
    RV position = s[0], velocity = s[1];
    const RV push = PK_CONVERT(RV, action - 1) * force;
    velocity = velocity + (push + cos((REAL)(3.0) * position) * (-gravity));
    velocity = fmin(fmax(velocity, -max_speed), max_speed);
    position = position + velocity;
    position = fmin(fmax(position, min_pos), max_pos);
    const MV at_wall = (position == min_pos) & (velocity < (REAL)(0.0));
    velocity = select(velocity, (RV)(0.0), at_wall);
    s[0] = position;
    s[1] = velocity;
    *reward = (RV)(-1.0);
    return PK_IMASK((position >= goal_pos) & (velocity >= goal_vel));
}

inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

#include "pk_env.h"

/* Each work-item runs the PK_VW envs from base = global id * PK_VW. */
__kernel void pk_mountain_car_reset(__global REAL *s0, __global REAL *s1,
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

__kernel void pk_mountain_car_step(__global REAL *s0, __global REAL *s1,
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

__kernel void pk_mountain_car_rollout(__global REAL *s0, __global REAL *s1,
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
