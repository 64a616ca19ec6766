// MountainCar-v0 (envs/mountain_car.py): discrete push, velocity and position clipped.
#include "pk_common.cuh"

// Params, D, O, Act, ACTIONS and ACT_HIGH: pk_<kernel>_shape, generated from the EnvSpec (pk_params.h).
struct PkMountainCar : pk_mountain_car_shape {
    __device__ static void reset(const REAL sym[4], const pk_mountain_car_params *__restrict__ p, REAL s[2]) {
        s[0] = p->reset_center + p->reset_half * sym[0];
        s[1] = (REAL)0.0;
    }

    __device__ static void step(REAL s[2], int action, const pk_mountain_car_params *__restrict__ p, REAL &reward,
                                bool &term) {
        REAL position = s[0], velocity = s[1];
        const REAL push = (REAL)(action - 1) * p->force;
        velocity = velocity + (push + pk_cos((REAL)3.0 * position) * (-p->gravity));
        velocity = pk_clip(velocity, -p->max_speed, p->max_speed);
        position = position + velocity;
        position = pk_clip(position, p->min_position, p->max_position);
        if (position == p->min_position && velocity < (REAL)0.0) velocity = (REAL)0.0;
        term = position >= p->goal_position && velocity >= p->goal_velocity;
        reward = (REAL)-1.0;
        s[0] = position;
        s[1] = velocity;
    }

    __device__ static void observe(const REAL s[2], REAL o[2]) {
        o[0] = s[0];
        o[1] = s[1];
    }
};

PK_ENV_KERNELS(mountain_car, PkMountainCar)
