// CartPole-v1 (envs/cartpole.py): Euler integration in Gymnasium's operation order.
#include "pk_common.cuh"

// Params, D, O, Act, ACTIONS and ACT_HIGH: pk_<kernel>_shape, generated from the EnvSpec (pk_params.h).
struct PkCartPole : pk_cartpole_shape {
    __device__ static void reset(const REAL sym[4], const pk_cartpole_params *__restrict__ p, REAL s[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] = p->reset_bound * sym[k];
    }

    __device__ static void step(REAL s[4], int action, const pk_cartpole_params *__restrict__ p, REAL &reward,
                                bool &term) {
        const REAL x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
        const REAL force = action == 1 ? p->force_mag : -p->force_mag;
        const REAL costheta = pk_cos(theta);
        const REAL sintheta = pk_sin(theta);
        const REAL temp = (force + p->polemass_length * (theta_dot * theta_dot) * sintheta) / p->total_mass;
        const REAL thetaacc = (p->gravity * sintheta - costheta * temp)
            / (p->length * ((REAL)(4.0 / 3.0) - p->masspole * (costheta * costheta) / p->total_mass));
        const REAL xacc = temp - p->polemass_length * thetaacc * costheta / p->total_mass;
        s[0] = x + p->tau * x_dot;
        s[1] = x_dot + p->tau * xacc;
        s[2] = theta + p->tau * theta_dot;
        s[3] = theta_dot + p->tau * thetaacc;
        const REAL x_thr = p->x_threshold, th_thr = p->theta_threshold_radians;
        term = s[0] < -x_thr || s[0] > x_thr || s[2] < -th_thr || s[2] > th_thr;
        reward = (REAL)1.0;
    }

    __device__ static void observe(const REAL s[4], REAL o[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) o[k] = s[k];
    }
};

PK_ENV_KERNELS(cartpole, PkCartPole)
