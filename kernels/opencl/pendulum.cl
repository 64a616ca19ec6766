/* Pendulum-v1: Gymnasium's torque-limited swing-up, operation for operation as portkern/envs/pendulum.py. */
#include "pk_common.h"

#define ENV_D 2
#define ENV_OBS 3
#define ACT float

/* params: max_speed, max_torque, dt, x_init, y_init, grav_coef, torque_coef, pi, two_pi */
inline void env_reset(REAL *s, __global const REAL *p, uint4 b)
{
    s[0] = p[3] * pk_sym(b.x);
    s[1] = p[4] * pk_sym(b.y);
}

inline int env_physics(REAL *s, ACT action, __global const REAL *p, REAL *reward)
{
    const REAL max_speed = p[0], dt = p[2], grav_coef = p[5], pi = p[7], two_pi = p[8];
    const REAL th = s[0], thdot = s[1];
    /* Gymnasium computes the torque terms in float32 (the action dtype) and promotes afterwards,
     * so they stay float even in double builds. */
    const float max_torque = (float)p[1];
    const float u = fmin(fmax(action, -max_torque), max_torque);
    const REAL u_cost = (REAL)((float)(0.001) * (u * u));
    const REAL u_acc = (REAL)((float)p[6] * u);
    const REAL an = pk_remainder(th + pi, two_pi) - pi;
    const REAL costs = an * an + (REAL)(0.1) * (thdot * thdot) + u_cost;
    REAL newthdot = thdot + (grav_coef * sin(th) + u_acc) * dt;
    newthdot = fmin(fmax(newthdot, -max_speed), max_speed);
    s[0] = th + newthdot * dt;
    s[1] = newthdot;
    *reward = -costs;
    return 0;
}

inline void env_observe(const REAL *s, __global REAL *o)
{
    o[0] = cos(s[0]);
    o[1] = sin(s[0]);
    o[2] = s[1];
}

#include "pk_env.h"

__kernel void pk_pendulum_reset(__global REAL *s0, __global REAL *s1, __global int *steps,
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

__kernel void pk_pendulum_step(__global REAL *s0, __global REAL *s1, __global int *steps,
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
