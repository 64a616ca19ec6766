/* Pendulum-v1: Gymnasium's torque-limited swing-up, operation for operation as portkern/envs/pendulum.py. */
#include "pk_common.h"
#include "pk_params.h"

#define ENV_NAME pendulum

static inline void env_reset(RV *s, __global const pk_pendulum_params *p, pk_bits b)
{
    s[0] = p->x_init * pk_sym_v(b.x);
    s[1] = p->y_init * pk_sym_v(b.y);
}

static inline IV env_physics(RV *s, FV action, __global const pk_pendulum_params *p, RV *reward)
{
    const REAL max_speed = p->max_speed, dt = p->dt, pi = p->pi;
    const RV th = s[0], thdot = s[1];
    /* Gymnasium computes the torque terms in float32 (the action dtype) and promotes afterwards,
     * so they stay float even in double builds. */
    const float max_torque = (float)p->max_torque;
    const FV u = fmin(fmax(action, -max_torque), max_torque);
    const RV u_cost = PK_CONVERT(RV, (float)(0.001) * (u * u));
    const RV u_acc = PK_CONVERT(RV, (float)p->torque_coef * u);
    const RV an = pk_remainder_v(th + pi, p->two_pi) - pi;
    const RV costs = an * an + (REAL)(0.1) * (thdot * thdot) + u_cost;
    RV newthdot = thdot + (p->grav_coef * sin(th) + u_acc) * dt;
    newthdot = fmin(fmax(newthdot, -max_speed), max_speed);
    s[0] = th + newthdot * dt;
    s[1] = newthdot;
    *reward = -costs;
    return (IV)(0);
}

static inline void env_observe(const RV *s, RV *o)
{
    o[0] = cos(s[0]);
    o[1] = sin(s[0]);
    o[2] = s[1];
}

/* pk_pendulum_reset, pk_pendulum_step and pk_pendulum_rollout, generated from the functions above. */
#include "pk_env.h"
