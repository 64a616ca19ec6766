/* CartPole-v1: Gymnasium's cart-pole, Euler integration, operation for operation as envs/cartpole.py. */
#include "pk_common.h"

#define ENV_D 4
#define ENV_OBS 4
#define ACT int
#define ENV_ACTIONS 2

/* params: gravity, masscart, masspole, total_mass, length, polemass_length, force_mag, tau,
 * theta_threshold_radians, x_threshold, reset_bound */
inline void env_reset(RV *s, __global const REAL *p, pk_bits b)
{
    s[0] = p[10] * pk_sym_v(b.x);
    s[1] = p[10] * pk_sym_v(b.y);
    s[2] = p[10] * pk_sym_v(b.z);
    s[3] = p[10] * pk_sym_v(b.w);
}

inline IV env_physics(RV *s, IV action, __global const REAL *p, RV *reward)
{
    const REAL gravity = p[0], masspole = p[2], total_mass = p[3], length = p[4];
    const REAL polemass_length = p[5], force_mag = p[6], tau = p[7];
    const REAL th_thr = p[8], x_thr = p[9];
    RV x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const RV force = select((RV)(-force_mag), (RV)(force_mag), PK_RMASK(action == (IV)(1)));
    const RV costheta = cos(theta);
    const RV sintheta = sin(theta);
    const RV temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const RV thetaacc = (gravity * sintheta - costheta * temp)
        / (length * ((REAL)(4.0 / 3.0) - masspole * (costheta * costheta) / total_mass));
    const RV xacc = temp - polemass_length * thetaacc * costheta / total_mass;
    x = x + tau * x_dot;
    x_dot = x_dot + tau * xacc;
    theta = theta + tau * theta_dot;
    theta_dot = theta_dot + tau * thetaacc;
    s[0] = x;
    s[1] = x_dot;
    s[2] = theta;
    s[3] = theta_dot;
    *reward = (RV)(1.0);
    return PK_IMASK((x < -x_thr) | (x > x_thr) | (theta < -th_thr) | (theta > th_thr));
}

inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
    o[2] = s[2];
    o[3] = s[3];
}

#include "pk_env.h"

/* Each work-item runs the PK_VW envs from base = global id * PK_VW. */
__kernel void pk_cartpole_reset(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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
    pk_st_real(s2, base, n, s[2]);
    pk_st_real(s3, base, n, s[3]);
}

__kernel void pk_cartpole_step(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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
    s[2] = pk_ld_real(s2, base, n);
    s[3] = pk_ld_real(s3, base, n);
    pk_env_step_one(s, steps, episodes, needs_reset, PK_CAT(pk_ld_, ACT)(actions, base, n), obs,
                    final_obs, reward, terminated, truncated, params, seed, max_steps,
                    autoreset_mode, base, n);
    pk_st_real(s0, base, n, s[0]);
    pk_st_real(s1, base, n, s[1]);
    pk_st_real(s2, base, n, s[2]);
    pk_st_real(s3, base, n, s[3]);
}

__kernel void pk_cartpole_rollout(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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
    s[2] = pk_ld_real(s2, base, n);
    s[3] = pk_ld_real(s3, base, n);
    pk_env_rollout_one(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated,
                       truncated, params, policy, policy_kind, hidden, out_obs, out_actions,
                       out_rewards, out_terminated, out_truncated, out_final_obs, seed, max_steps,
                       autoreset_mode, t0, t_count, base, n);
    pk_st_real(s0, base, n, s[0]);
    pk_st_real(s1, base, n, s[1]);
    pk_st_real(s2, base, n, s[2]);
    pk_st_real(s3, base, n, s[3]);
}
