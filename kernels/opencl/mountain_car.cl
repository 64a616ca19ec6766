/* MountainCar-v0: Gymnasium's under-powered car, discrete push, as portkern/envs/mountain_car.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 2
#define ACT int

/* params: min_position, max_position, max_speed, goal_position, goal_velocity, force, gravity,
 * reset_center, reset_half */
inline void env_reset(REAL *s, __global const REAL *p, uint4 b)
{
    s[0] = p[7] + p[8] * pk_sym(b.x);
    s[1] = (REAL)(0.0);
}

inline int env_physics(REAL *s, ACT action, __global const REAL *p, REAL *reward)
{
    const REAL min_pos = p[0], max_pos = p[1], max_speed = p[2], goal_pos = p[3];
    const REAL goal_vel = p[4], force = p[5], gravity = p[6];
    REAL position = s[0], velocity = s[1];
    const REAL push = (REAL)(action - 1) * force;
    velocity = velocity + (push + cos((REAL)(3.0) * position) * (-gravity));
    velocity = fmin(fmax(velocity, -max_speed), max_speed);
    position = position + velocity;
    position = fmin(fmax(position, min_pos), max_pos);
    if (position == min_pos && velocity < (REAL)(0.0))
        velocity = (REAL)(0.0);
    s[0] = position;
    s[1] = velocity;
    *reward = (REAL)(-1.0);
    return position >= goal_pos && velocity >= goal_vel;
}

inline void env_observe(const REAL *s, __global REAL *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

#include "pk_env.h"

__kernel void pk_mountain_car_reset(__global REAL *s0, __global REAL *s1, __global int *steps,
                                    __global uint *episodes, __global uchar *needs_reset,
                                    __global REAL *obs, __global const REAL *params, uint seed,
                                    int fresh, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    REAL s[ENV_D];
    pk_env_reset_one(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
    s0[i] = s[0];
    s1[i] = s[1];
}

__kernel void pk_mountain_car_step(__global REAL *s0, __global REAL *s1, __global int *steps,
                                   __global uint *episodes, __global uchar *needs_reset,
                                   __global const ACT *actions, __global REAL *obs,
                                   __global REAL *final_obs, __global REAL *reward,
                                   __global uchar *terminated, __global uchar *truncated,
                                   __global const REAL *params, uint seed, int max_steps,
                                   int autoreset_mode, int n)
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
