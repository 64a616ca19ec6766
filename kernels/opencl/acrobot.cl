/* Acrobot-v1: Gymnasium's two-link pendulum ("book" dynamics), RK4 over one dt, as envs/acrobot.py. */
#include "pk_common.h"
#include "pk_params.h"

#define ENV_NAME acrobot

static inline void env_reset(RV *s, __global const pk_acrobot_params *p, pk_bits b)
{
    pk_reset_sym4(s, p->reset_bound, b);
}

/* Gymnasium's AcrobotEnv._dsdt with its constant products precomputed on the host (same order). */
static inline void acrobot_dsdt(__global const pk_acrobot_params *p, RV a, const RV *y, RV *dy)
{
    const REAL m2 = p->m2, i2 = p->i2, half_pi = p->half_pi;
    const RV theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
    const RV d1 = p->c_a + m2 * (p->c_b + p->c_c * cos(theta2)) + p->i1 + i2;
    const RV d2 = m2 * (p->c_d + p->c_e * cos(theta2)) + i2;
    const RV phi2 = p->c_f * cos(theta1 + theta2 - half_pi);
    const RV phi1 = p->c_g * (dtheta2 * dtheta2) * sin(theta2)
        - p->c_h * dtheta2 * dtheta1 * sin(theta2)
        + p->c_j * cos(theta1 - half_pi)
        + phi2;
    const RV ddtheta2 = (a + d2 / d1 * phi1 - p->c_k * (dtheta1 * dtheta1) * sin(theta2) - phi2)
        / (p->c_l + i2 - (d2 * d2) / d1);
    const RV ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
    dy[0] = dtheta1;
    dy[1] = dtheta2;
    dy[2] = ddtheta1;
    dy[3] = ddtheta2;
}

/* Gymnasium's wrap(): subtract/add the span one at a time (not fmod) so results match bit for bit;
 * each lane loops as long as it needs. The finiteness test keeps an infinite angle from looping
 * forever on the device. */
static inline RV acrobot_wrap(RV x, REAL lo, REAL hi, REAL span)
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

static inline IV env_physics(RV *s, IV action, __global const pk_acrobot_params *p, RV *reward)
{
    const REAL dt = p->dt, dt2 = p->dt2, dt6 = p->dt6, pi = p->pi, two_pi = p->two_pi;
    const REAL max_vel_1 = p->max_vel_1, max_vel_2 = p->max_vel_2;
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

static inline void env_observe(const RV *s, RV *o)
{
    o[0] = cos(s[0]);
    o[1] = sin(s[0]);
    o[2] = cos(s[1]);
    o[3] = sin(s[1]);
    o[4] = s[2];
    o[5] = s[3];
}

/* pk_acrobot_reset, pk_acrobot_step and pk_acrobot_rollout, generated from the functions above. */
#include "pk_env.h"
