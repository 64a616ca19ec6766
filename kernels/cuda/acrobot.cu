// Acrobot-v1 (envs/acrobot.py): Gymnasium's "book" dynamics, RK4 over one dt, wrap loop, velocity bound.
#include "pk_common.cuh"

// Params, D, O, Act, ACTIONS and ACT_HIGH: pk_<kernel>_shape, generated from the EnvSpec (pk_params.h).
struct PkAcrobot : pk_acrobot_shape {
    __device__ static void reset(const REAL sym[4], const pk_acrobot_params *__restrict__ p, REAL s[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] = p->reset_bound * sym[k];
    }

    // Gymnasium's _dsdt, operation for operation (constant products precomputed in params).
    __device__ static void dsdt(const pk_acrobot_params *__restrict__ p, REAL a, const REAL y[4], REAL out[4]) {
        const REAL theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
        const REAL cos2 = pk_cos(theta2), sin2 = pk_sin(theta2);
        const REAL d1 = p->c_a + p->m2 * (p->c_b + p->c_c * cos2) + p->i1 + p->i2;
        const REAL d2 = p->m2 * (p->c_d + p->c_e * cos2) + p->i2;
        const REAL phi2 = p->c_f * pk_cos(theta1 + theta2 - p->half_pi);
        const REAL phi1 = p->c_g * (dtheta2 * dtheta2) * sin2 - p->c_h * dtheta2 * dtheta1 * sin2
            + p->c_j * pk_cos(theta1 - p->half_pi) + phi2;
        const REAL ddtheta2 = (a + d2 / d1 * phi1 - p->c_k * (dtheta1 * dtheta1) * sin2 - phi2)
            / (p->c_l + p->i2 - (d2 * d2) / d1);
        const REAL ddtheta1 = -(d2 * ddtheta2 + phi1) / d1;
        out[0] = dtheta1;
        out[1] = dtheta2;
        out[2] = ddtheta1;
        out[3] = ddtheta2;
    }

    // Gymnasium's wrap(): one span at a time, not fmod, so results match bit for bit. The isfinite
    // guard only stops a non-finite state from hanging the GPU (the reference would loop forever).
    __device__ static REAL wrap(REAL x, REAL lo, REAL hi, REAL span) {
        if (!isfinite(x)) return x;
        while (x > hi) x = x - span;
        while (x < lo) x = x + span;
        return x;
    }

    __device__ static void step(REAL s[4], int action, const pk_acrobot_params *__restrict__ p, REAL &reward,
                                bool &term) {
        const REAL a = (REAL)(action - 1);
        REAL k1[4], k2[4], k3[4], k4[4], y[4];
        dsdt(p, a, s, k1);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + p->dt2 * k1[k];
        dsdt(p, a, y, k2);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + p->dt2 * k2[k];
        dsdt(p, a, y, k3);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + p->dt * k3[k];
        dsdt(p, a, y, k4);
#pragma unroll
        for (int k = 0; k < 4; ++k)
            s[k] = s[k] + p->dt6 * (k1[k] + (REAL)2.0 * k2[k] + (REAL)2.0 * k3[k] + k4[k]);
        s[0] = wrap(s[0], -p->pi, p->pi, p->two_pi);
        s[1] = wrap(s[1], -p->pi, p->pi, p->two_pi);
        s[2] = pk_min(pk_max(s[2], -p->max_vel_1), p->max_vel_1);
        s[3] = pk_min(pk_max(s[3], -p->max_vel_2), p->max_vel_2);
        term = -pk_cos(s[0]) - pk_cos(s[1] + s[0]) > (REAL)1.0;
        reward = term ? (REAL)0.0 : (REAL)-1.0;
    }

    __device__ static void observe(const REAL s[4], REAL o[6]) {
        o[0] = pk_cos(s[0]);
        o[1] = pk_sin(s[0]);
        o[2] = pk_cos(s[1]);
        o[3] = pk_sin(s[1]);
        o[4] = s[2];
        o[5] = s[3];
    }
};

PK_ENV_KERNELS(acrobot, PkAcrobot)
