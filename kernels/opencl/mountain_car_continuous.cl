/* MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force, as
 * portkern/envs/mountain_car_continuous.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 2
#define ACT float

/* params: min_action, max_action, min_position, max_position, max_speed, goal_position,
 * goal_velocity, power, gravity, reset_center, reset_half */
inline void env_reset(REAL *s, __global const REAL *p, uint4 b)
{
    s[0] = p[9] + p[10] * pk_sym(b.x);
    s[1] = (REAL)(0.0);
}

inline int env_physics(REAL *s, ACT action, __global const REAL *p, REAL *reward)
{
    const REAL min_a = p[0], max_a = p[1], min_pos = p[2], max_pos = p[3], max_speed = p[4];
    const REAL goal_pos = p[5], goal_vel = p[6], power = p[7], gravity = p[8];
    REAL position = s[0], velocity = s[1];
    const REAL a = (REAL)action;
    const REAL force = fmin(fmax(a, min_a), max_a);
    velocity = velocity + (force * power - gravity * cos((REAL)(3.0) * position));
    velocity = fmin(velocity, max_speed);
    velocity = fmax(velocity, -max_speed);
    position = position + velocity;
    position = fmin(position, max_pos);
    position = fmax(position, min_pos);
    if (position == min_pos && velocity < (REAL)(0.0))
        velocity = (REAL)(0.0);
    s[0] = position;
    s[1] = velocity;
    const int term = position >= goal_pos && velocity >= goal_vel;
    /* The action cost uses the unclipped action, as Gymnasium's does. */
    *reward = (term ? (REAL)(100.0) : (REAL)(0.0)) - a * a * (REAL)(0.1);
    return term;
}

inline void env_observe(const REAL *s, __global REAL *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

#include "pk_env.h"

__kernel void pk_mountain_car_continuous_reset(__global REAL *s0, __global REAL *s1,
                                               __global int *steps, __global uint *episodes,
                                               __global uchar *needs_reset, __global REAL *obs,
                                               __global const REAL *params, uint seed, int fresh,
                                               int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    REAL s[ENV_D];
    pk_env_reset_one(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
    s0[i] = s[0];
    s1[i] = s[1];
}

__kernel void pk_mountain_car_continuous_step(__global REAL *s0, __global REAL *s1,
                                              __global int *steps, __global uint *episodes,
                                              __global uchar *needs_reset,
                                              __global const ACT *actions, __global REAL *obs,
                                              __global REAL *final_obs, __global REAL *reward,
                                              __global uchar *terminated,
                                              __global uchar *truncated,
                                              __global const REAL *params, uint seed,
                                              int max_steps, int autoreset_mode, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    REAL s[ENV_D] = {s0[i], s1[i]};
    pk_env_step_one(s, steps, episodes, needs_reset, actions[i], obs, final_obs, reward,
                    terminated, truncated, params, seed, max_steps, autoreset_mode, i);
    s0[i] = s[0];
    s1[i] = s[1];
}
