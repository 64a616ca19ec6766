/* CartPole-v1: Gymnasium's cart-pole, Euler integration, operation for operation as envs/cartpole.py. */
#include "pk_common.h"

#define ENV_D 4
#define ENV_OBS 4
#define ACT int

/* params: gravity, masscart, masspole, total_mass, length, polemass_length, force_mag, tau,
 * theta_threshold_radians, x_threshold, reset_bound */
inline void env_reset(REAL *s, __global const REAL *p, uint4 b)
{
    s[0] = p[10] * pk_sym(b.x);
    s[1] = p[10] * pk_sym(b.y);
    s[2] = p[10] * pk_sym(b.z);
    s[3] = p[10] * pk_sym(b.w);
}

inline int env_physics(REAL *s, ACT action, __global const REAL *p, REAL *reward)
{
    const REAL gravity = p[0], masspole = p[2], total_mass = p[3], length = p[4];
    const REAL polemass_length = p[5], force_mag = p[6], tau = p[7];
    const REAL th_thr = p[8], x_thr = p[9];
    REAL x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const REAL force = action == 1 ? force_mag : -force_mag;
    const REAL costheta = cos(theta);
    const REAL sintheta = sin(theta);
    const REAL temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const REAL thetaacc = (gravity * sintheta - costheta * temp)
        / (length * ((REAL)(4.0 / 3.0) - masspole * (costheta * costheta) / total_mass));
    const REAL xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
    s[0] = x;
    s[1] = x_dot;
    s[2] = theta;
    s[3] = theta_dot;
    *reward = (REAL)(1.0);
    return x < -x_thr || x > x_thr || theta < -th_thr || theta > th_thr;
}

inline void env_observe(const REAL *s, __global REAL *o)
{
    o[0] = s[0];
    o[1] = s[1];
    o[2] = s[2];
    o[3] = s[3];
}

#include "pk_env.h"

__kernel void pk_cartpole_reset(__global REAL *s0, __global REAL *s1, __global REAL *s2,
                                __global REAL *s3, __global int *steps, __global uint *episodes,
                                __global uchar *needs_reset, __global REAL *obs,
                                __global const REAL *params, uint seed, int fresh, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    REAL s[ENV_D];
    pk_env_reset_one(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
    s0[i] = s[0];
    s1[i] = s[1];
    s2[i] = s[2];
    s3[i] = s[3];
}

__kernel void pk_cartpole_step(__global REAL *s0, __global REAL *s1, __global REAL *s2,
                               __global REAL *s3, __global int *steps, __global uint *episodes,
                               __global uchar *needs_reset, __global const ACT *actions,
                               __global REAL *obs, __global REAL *final_obs, __global REAL *reward,
                               __global uchar *terminated, __global uchar *truncated,
                               __global const REAL *params, uint seed, int max_steps,
                               int autoreset_mode, int n)
{
    const int i = get_global_id(0);
    if (i >= n)
        return;
    REAL s[ENV_D] = {s0[i], s1[i], s2[i], s3[i]};
    pk_env_step_one(s, steps, episodes, needs_reset, actions[i], obs, final_obs, reward,
                    terminated, truncated, params, seed, max_steps, autoreset_mode, i);
    s0[i] = s[0];
    s1[i] = s[1];
    s2[i] = s[2];
    s3[i] = s[3];
}
