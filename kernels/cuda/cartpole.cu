// CartPole-v1 (envs/cartpole.py): Euler integration in Gymnasium's operation order.
#include "pk_common.cuh"

struct PkCartPole {
    static constexpr int D = 4, O = 4;
    using Act = int;
    static constexpr int ACTIONS = 2;  // Discrete(2)
    static constexpr float ACT_HIGH = 0.0f;

    __device__ static void reset(const REAL sym[4], const REAL *__restrict__ p, REAL s[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) s[k] = p[10] * sym[k];
    }

    __device__ static void step(REAL s[4], int action, const REAL *__restrict__ p, REAL &reward, bool &term) {
        const REAL gravity = p[0], masspole = p[2], total_mass = p[3], length = p[4];
        const REAL polemass_length = p[5], force_mag = p[6], tau = p[7], th_thr = p[8], x_thr = p[9];
        const REAL x = s[0], x_dot = s[1], theta = s[2], theta_dot = s[3];
        const REAL force = action == 1 ? force_mag : -force_mag;
        const REAL costheta = cos(theta);
        const REAL sintheta = sin(theta);
        const REAL temp = (force + polemass_length * (theta_dot * theta_dot) * sintheta) / total_mass;
        const REAL thetaacc = (gravity * sintheta - costheta * temp)
            / (length * ((REAL)(4.0 / 3.0) - masspole * (costheta * costheta) / total_mass));
        const REAL xacc = temp - polemass_length * thetaacc * costheta / total_mass;
        s[0] = x + tau * x_dot;
        s[1] = x_dot + tau * xacc;
        s[2] = theta + tau * theta_dot;
        s[3] = theta_dot + tau * thetaacc;
        term = s[0] < -x_thr || s[0] > x_thr || s[2] < -th_thr || s[2] > th_thr;
        reward = (REAL)1.0;
    }

    __device__ static void observe(const REAL s[4], REAL o[4]) {
#pragma unroll
        for (int k = 0; k < 4; ++k) o[k] = s[k];
    }
};

extern "C" __global__ void pk_cartpole_reset(
    REAL *__restrict__ s0, REAL *__restrict__ s1, REAL *__restrict__ s2, REAL *__restrict__ s3,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, const REAL *__restrict__ params, uint seed, int fresh, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[4] = {s0, s1, s2, s3};
    pk_env_reset<PkCartPole>(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
}

extern "C" __global__ void pk_cartpole_step(
    REAL *__restrict__ s0, REAL *__restrict__ s1, REAL *__restrict__ s2, REAL *__restrict__ s3,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    const int *__restrict__ actions, REAL *__restrict__ obs, REAL *__restrict__ final_obs,
    REAL *__restrict__ reward, uchar *__restrict__ terminated, uchar *__restrict__ truncated,
    const REAL *__restrict__ params, uint seed, int max_steps, int autoreset_mode, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[4] = {s0, s1, s2, s3};
    pk_env_step<PkCartPole>(s, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated,
                            truncated, params, seed, max_steps, autoreset_mode, i);
}

extern "C" __global__ void pk_cartpole_rollout(
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
    pk_env_rollout<PkCartPole>(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                               policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                               out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n, i);
}
