// Acrobot-v1 (envs/acrobot.py): Gymnasium's "book" dynamics, RK4 over one dt, wrap loop, velocity bound.
#include "pk_common.cuh"

struct PkAcrobot {
    static constexpr int D = 4, O = 6;
    using Act = int;
    static constexpr int ACTIONS = 3;  // Discrete(3)
    static constexpr float ACT_HIGH = 0.0f;

    __device__ static void reset(const REAL sym[4], const REAL *__restrict__ p, REAL s[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] = p[22] * sym[k];
    }

    // Gymnasium's _dsdt, operation for operation (constant products precomputed in params).
    __device__ static void dsdt(const REAL *__restrict__ p, REAL a, const REAL y[4], REAL out[4]) {
        const REAL c_a = p[3], m2 = p[4], c_b = p[5], c_c = p[6], i1 = p[7], c_d = p[8], c_e = p[9];
        const REAL i2 = p[10], c_f = p[11], c_g = p[12], c_h = p[13], c_j = p[14], c_k = p[15];
        const REAL c_l = p[16], half_pi = p[17];
        const REAL theta1 = y[0], theta2 = y[1], dtheta1 = y[2], dtheta2 = y[3];
        const REAL cos2 = cos(theta2), sin2 = sin(theta2);
        const REAL d1 = c_a + m2 * (c_b + c_c * cos2) + i1 + i2;
        const REAL d2 = m2 * (c_d + c_e * cos2) + i2;
        const REAL phi2 = c_f * cos(theta1 + theta2 - half_pi);
        const REAL phi1 = c_g * (dtheta2 * dtheta2) * sin2 - c_h * dtheta2 * dtheta1 * sin2
            + c_j * cos(theta1 - half_pi) + phi2;
        const REAL ddtheta2 = (a + d2 / d1 * phi1 - c_k * (dtheta1 * dtheta1) * sin2 - phi2)
            / (c_l + i2 - (d2 * d2) / d1);
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

    __device__ static void step(REAL s[4], int action, const REAL *__restrict__ p, REAL &reward, bool &term) {
        const REAL dt = p[0], dt2 = p[1], dt6 = p[2], pi = p[18], two_pi = p[19];
        const REAL max_vel_1 = p[20], max_vel_2 = p[21];
        const REAL a = (REAL)(action - 1);
        REAL k1[4], k2[4], k3[4], k4[4], y[4];
        dsdt(p, a, s, k1);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + dt2 * k1[k];
        dsdt(p, a, y, k2);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + dt2 * k2[k];
        dsdt(p, a, y, k3);
#pragma unroll
        for (int k = 0; k < 4; ++k) y[k] = s[k] + dt * k3[k];
        dsdt(p, a, y, k4);
#pragma unroll
        for (int k = 0; k < 4; ++k)
            s[k] = s[k] + dt6 * (k1[k] + (REAL)2.0 * k2[k] + (REAL)2.0 * k3[k] + k4[k]);
        s[0] = wrap(s[0], -pi, pi, two_pi);
        s[1] = wrap(s[1], -pi, pi, two_pi);
        s[2] = pk_min(pk_max(s[2], -max_vel_1), max_vel_1);
        s[3] = pk_min(pk_max(s[3], -max_vel_2), max_vel_2);
        term = -cos(s[0]) - cos(s[1] + s[0]) > (REAL)1.0;
        reward = term ? (REAL)0.0 : (REAL)-1.0;
    }

    __device__ static void observe(const REAL s[4], REAL o[6]) {
        o[0] = cos(s[0]);
        o[1] = sin(s[0]);
        o[2] = cos(s[1]);
        o[3] = sin(s[1]);
        o[4] = s[2];
        o[5] = s[3];
    }
};

extern "C" __global__ void pk_acrobot_reset(
    REAL *__restrict__ s0, REAL *__restrict__ s1, REAL *__restrict__ s2, REAL *__restrict__ s3,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, const REAL *__restrict__ params, uint seed, int fresh, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[4] = {s0, s1, s2, s3};
    pk_env_reset<PkAcrobot>(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
}

extern "C" __global__ void pk_acrobot_step(
    REAL *__restrict__ s0, REAL *__restrict__ s1, REAL *__restrict__ s2, REAL *__restrict__ s3,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    const int *__restrict__ actions, REAL *__restrict__ obs, REAL *__restrict__ final_obs,
    REAL *__restrict__ reward, uchar *__restrict__ terminated, uchar *__restrict__ truncated,
    const REAL *__restrict__ params, uint seed, int max_steps, int autoreset_mode, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[4] = {s0, s1, s2, s3};
    pk_env_step<PkAcrobot>(s, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated,
                           truncated, params, seed, max_steps, autoreset_mode, i);
}

extern "C" __global__ void pk_acrobot_rollout(
    REAL *__restrict__ s0, REAL *__restrict__ s1, REAL *__restrict__ s2, REAL *__restrict__ s3,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward,
    uchar *__restrict__ terminated, uchar *__restrict__ truncated, const REAL *__restrict__ params,
    const float *__restrict__ policy, int policy_kind, int hidden,
    REAL *__restrict__ out_obs, int *__restrict__ out_actions, REAL *__restrict__ out_rewards,
    uchar *__restrict__ out_terminated, uchar *__restrict__ out_truncated, REAL *__restrict__ out_final_obs,
    uint seed, int max_steps, int autoreset_mode, int t0, int t_count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[4] = {s0, s1, s2, s3};
    pk_env_rollout<PkAcrobot>(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                              policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                              out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n, i);
}
