/* MountainCarContinuous-v0: Gymnasium's mountain car with a continuous force, as
 * portkern/envs/mountain_car_continuous.py. */
#include "pk_common.h"
#include "pk_params.h"

#define ENV_NAME mountain_car_continuous

static inline void env_reset(RV *s, __global const pk_mountain_car_continuous_params *p, pk_bits b)
{
    s[0] = p->reset_center + p->reset_half * pk_sym_v(b.x);
    s[1] = (RV)(0.0);
}

static inline IV env_physics(RV *s, FV action, __global const pk_mountain_car_continuous_params *p,
                      RV *reward)
{
    const REAL max_speed = p->max_speed, min_pos = p->min_position;
    RV position = s[0], velocity = s[1];
    const RV a = PK_CONVERT(RV, action);
    const RV force = fmin(fmax(a, p->min_action), p->max_action);
    velocity = velocity + (force * p->power - p->gravity * cos((REAL)(3.0) * position));
    velocity = fmin(velocity, max_speed);
    velocity = fmax(velocity, -max_speed);
    position = position + velocity;
    position = fmin(position, p->max_position);
    position = fmax(position, min_pos);
    const MV at_wall = (position == min_pos) & (velocity < (REAL)(0.0));
    velocity = select(velocity, (RV)(0.0), at_wall);
    s[0] = position;
    s[1] = velocity;
    const MV term = (position >= p->goal_position) & (velocity >= p->goal_velocity);
    /* The action cost uses the unclipped action, as Gymnasium's does. */
    *reward = select((RV)(0.0), (RV)(100.0), PK_RMASK(term)) - a * a * (REAL)(0.1);
    return PK_IMASK(term);
}

static inline void env_observe(const RV *s, RV *o)
{
    o[0] = s[0];
    o[1] = s[1];
}

/* pk_mountain_car_continuous_reset, _step and _rollout, generated from the functions above. */
#include "pk_env.h"
