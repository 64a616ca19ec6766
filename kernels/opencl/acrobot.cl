/* Acrobot-v1: Gymnasium's two-link pendulum ("book" dynamics), RK4 over one dt, as envs/acrobot.py. */
#include "pk_common.h"

#define ENV_D 4
#define ENV_OBS 6
#define ACT int
#define ENV_ACTIONS 3

/* params: dt, dt2, dt6, c_a, m2, c_b, c_c, i1, c_d, c_e, i2, c_f, c_g, c_h, c_j, c_k, c_l,
 * half_pi, pi, two_pi, max_vel_1, max_vel_2, reset_bound */
inline void env_reset(RV *s, __global const REAL *p, pk_bits b)
{
    s[0] = p[22] * pk_sym_v(b.x);
    s[1] = p[22] * pk_sym_v(b.y);
    s[2] = p[22] * pk_sym_v(b.z);
    s[3] = p[22] * pk_sym_v(b.w);
}

/* Gymnasium's AcrobotEnv._dsdt with its constant products precomputed on the host (same order). */
inline void acrobot_dsdt(__global const REAL *p, RV a, const RV *y, RV *dy)
{
    const REAL c_a = p[3], m2 = p[4], c_b = p[5], c_c = p[6], i1 = p[7], c_d = p[8], c_e = p[9];
    const REAL i2 = p[10], c_f = p[11], c_g = p[12], c_h = p[13], c_j = p[14], c_k = p[15];
    const REAL c_l = p[16], half_pi = p[17];
    const RV theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    const RV d1 = c_a + m2 * (c_b + c_c * cos(theta2)) + i1 + i2;
    const RV d2 = m2 * (c_d + c_e * cos(theta2)) + i2;
    const RV phi2 = c_f * cos(theta1 + theta2 - half_pi);
    const RV phi1 = c_g * (dtheta2 * dtheta2) * sin(theta2)
        - c_h * dtheta2 * dtheta1 * sin(theta2)
        + c_j * cos(theta1 - half_pi)
        + phi2;
    const RV ddtheta2 = (a + d2 / d1 * phi1 - c_k * (dtheta1 * dtheta1) * sin(theta2) - phi2)
        / (c_l + i2 - (d2 * d2) / d1);
    const RV ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1;
    dy[1] = dtheta2;
    dy[2] = ddtheta1;
    dy[3] = ddtheta2;
}

/* Gymnasium's wrap(): subtract/add the span one at a time (not fmod) so results match bit for bit;
 * each lane loops as long as it needs. The finiteness test keeps an infinite angle from looping
 * forever on the device. */
inline RV acrobot_wrap(RV x, REAL lo, REAL hi, REAL span)
{
    const MV finite = PK_RMASK(PK_IMASK(isfinite(x)) != (IV)(0));
    MV more = finite & (x > hi);
    while (PK_ANY(more)) {
        x = select(x, x - span, more);
        more = finite & (x > hi);
    }
    more = finite & (x < lo);
    while (PK_ANY(more)) {
        x = select(x, x + span, more);
        more = finite & (x < lo);
    }
    return x;
}

inline IV env_physics(RV *s, IV action, __global const REAL *p, RV *reward)
{
    const REAL dt = p[0], dt2 = p[1], dt6 = p[2], pi = p[18], two_pi = p[19];
    const REAL max_vel_1 = p[20], max_vel_2 = p[21];
    const RV a = PK_CONVERT(RV, action - 1); /* AVAIL_TORQUE = [-1, 0, +1] */
    RV k1[4], k2[4], k3[4], k4[4], y[4];
    acrobot_dsdt(p, a, s, k1);
    for (int j = 0; j < 4; ++j)
        y[j] = s[j] + dt2 * k1[j];
    acrobot_dsdt(p, a, y, k2);
    for (int j = 0; j < 4; ++j)
        y[j] = s[j] + dt2 * k2[j];
    acrobot_dsdt(p, a, y, k3);
    for (int j = 0; j < 4; ++j)
        y[j] = s[j] + dt * k3[j];
    acrobot_dsdt(p, a, y, k4);
    for (int j = 0; j < 4; ++j)
        s[j] = s[j] + dt6 * (k1[j] + (REAL)(2.0) * k2[j] + (REAL)(2.0) * k3[j] + k4[j]);
    s[0] = acrobot_wrap(s[0], -pi, pi, two_pi);
    s[1] = acrobot_wrap(s[1], -pi, pi, two_pi);
    s[2] = fmin(fmax(s[2], -max_vel_1), max_vel_1);
    s[3] = fmin(fmax(s[3], -max_vel_2), max_vel_2);
    const MV term = -cos(s[0]) - cos(s[1] + s[0]) > (REAL)(1.0);
    *reward = select((RV)(-1.0), (RV)(0.0), PK_RMASK(term));
    return PK_IMASK(term);
}

inline void env_observe(const RV *s, RV *o)
{
    o[0] = cos(s[0]);
    o[1] = sin(s[0]);
    o[2] = cos(s[1]);
    o[3] = sin(s[1]);
    o[4] = s[2];
    o[5] = s[3];
}

#include "pk_env.h"

/* Each work-item runs the PK_VW envs from base = global id * PK_VW. */
__kernel void pk_acrobot_reset(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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

__kernel void pk_acrobot_step(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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

__kernel void pk_acrobot_rollout(__global REAL *s0, __global REAL *s1, __global REAL *s2, __global REAL *s3,
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
