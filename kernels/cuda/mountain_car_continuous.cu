// MountainCarContinuous-v0 (envs/mountain_car_continuous.py): float32 action, computed in REAL.
#include "pk_common.cuh"

// Params, D, O, Act, ACTIONS and ACT_HIGH: pk_<kernel>_shape, generated from the EnvSpec (pk_params.h).
struct PkMountainCarContinuous : pk_mountain_car_continuous_shape {
    __device__ static void reset(const REAL sym[4], const pk_mountain_car_continuous_params *__restrict__ p,
                                 REAL s[2]) {
        s[0] = p->reset_center + p->reset_half * sym[0];
        s[1] = (REAL)0.0;
    }

    __device__ static void step(REAL s[2], float action, const pk_mountain_car_continuous_params *__restrict__ p,
                                REAL &reward, bool &term) {
        REAL position = s[0], velocity = s[1];
        const REAL a = (REAL)action;
        const REAL force = pk_min(pk_max(a, p->min_action), p->max_action);
        velocity = velocity + (force * p->power - p->gravity * pk_cos((REAL)3.0 * position));
        velocity = pk_min(velocity, p->max_speed);
        velocity = pk_max(velocity, -p->max_speed);
        position = position + velocity;
        position = pk_min(position, p->max_position);
        position = pk_max(position, p->min_position);
        if (position == p->min_position && velocity < (REAL)0.0) velocity = (REAL)0.0;
        term = position >= p->goal_position && velocity >= p->goal_velocity;
        // The action cost uses the unclipped action, as Gymnasium's does.
        reward = (term ? (REAL)100.0 : (REAL)0.0) - a * a * (REAL)0.1;
        s[0] = position;
        s[1] = velocity;
    }

    __device__ static void observe(const REAL s[2], REAL o[2]) {
        o[0] = s[0];
        o[1] = s[1];
    }
};

PK_ENV_KERNELS(mountain_car_continuous, PkMountainCarContinuous)
