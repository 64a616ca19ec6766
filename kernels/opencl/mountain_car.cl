/* MountainCar-v0: Gymnasium's under-powered car, discrete push, as portkern/envs/mountain_car.py. */
#include "pk_common.h"
#include "pk_params.h"

#define ENV_NAME mountain_car

static inline void env_reset(RV *s, __global const pk_mountain_car_params *p, pk_bits b)
{
    s[0] = p->reset_center + p->reset_half * pk_sym_v(b.x);
    s[1] = (RV)(0.0);
}

static inline IV env_physics(RV *s, IV action, __global const pk_mountain_car_params *p, RV *reward)
{
    const REAL min_pos = p->min_position, max_speed = p->max_speed;
    RV position = s[0], velocity = s[1];
    const RV push = PK_CONVERT(RV, action - 1) * p->force;
    velocity = velocity + (push + cos((REAL)(3.0) * position) * (-p->gravity));
    velocity = fmin(fmax(velocity, -max_speed), max_speed);
    position = position + velocity;
    position = fmin(fmax(position, min_pos), p->max_position);
    const MV at_wall = (position == min_pos) & (velocity < (REAL)(0.0));
    velocity = select(velocity, (RV)(0.0), at_wall);
    s[0] = position;
    s[1] = velocity;
    *reward = (RV)(-1.0);
    return PK_IMASK((position >= p->goal_position) & (velocity >= p->goal_velocity));
}

static inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

/* pk_mountain_car_reset, _step and _rollout, generated from the functions above. */
#include "pk_env.h"
