/* CartPole-v1: Gymnasium's cart-pole, Euler integration, operation for operation as envs/cartpole.py. */
#include "pk_common.h"
#include "pk_params.h"

#define ENV_NAME cartpole

static inline void env_reset(RV *s, __global const pk_cartpole_params *p, pk_bits b)
{
    pk_reset_sym4(s, p->reset_bound, b);
}

static inline IV env_physics(RV *s, IV action, __global const pk_cartpole_params *p, RV *reward)
{
    const REAL total_mass = p->total_mass, polemass_length = p->polemass_length, tau = p->tau;
    const REAL force_mag = p->force_mag, x_thr = p->x_threshold, th_thr = p->theta_threshold_radians;
    RV x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
    const RV force = select((RV)(-force_mag), (RV)(force_mag), PK_RMASK(action == (IV)(1)));
    const RV costheta = cos(theta);
    const RV sintheta = sin(theta);
    const RV temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
    const RV thetaacc = (p->gravity * sintheta - costheta * temp)
        / (p->length * ((REAL)(4.0 / 3.0) - p->masspole * (costheta * costheta) / total_mass));
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

static inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
    o[2] = s[2];
    o[3] = s[3];
}

/* pk_cartpole_reset, pk_cartpole_step and pk_cartpole_rollout, generated from the functions above. */
#include "pk_env.h"
