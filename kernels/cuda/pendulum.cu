// Pendulum-v1 (envs/pendulum.py): torque terms in float32 in every build, as Gymnasium computes them.
#include "pk_common.cuh"

struct PkPendulum {
    static constexpr int D = 2, O = 3;
    using Act = float;
    static constexpr int ACTIONS = 0;  // a Box action
    // EnvSpec.action_high: the action space, fixed, not a physics param (the random policy's bound).
    static constexpr float ACT_HIGH = 2.0f;

    __device__ static void reset(const REAL sym[4], const REAL *__restrict__ p, REAL s[2]) {
        s[0] = p[3] * sym[0];
        s[1] = p[4] * sym[1];
    }

    // np.remainder(x + pi, 2 pi) - pi: fmod (exact) with NumPy's sign fix-up for Python's modulo.
    __device__ static REAL angle_normalize(REAL x, REAL pi, REAL two_pi) {
        REAL m = fmod(x + pi, two_pi);
        if (m != (REAL)0.0) {
            if ((two_pi < (REAL)0.0) != (m < (REAL)0.0)) m += two_pi;
        } else {
            m = copysign((REAL)0.0, two_pi);
        }
        return m - pi;
    }

    __device__ static void step(REAL s[2], float action, const REAL *__restrict__ p, REAL &reward, bool &term) {
        const REAL max_speed = p[0], dt = p[2], grav_coef = p[5], pi = p[7], two_pi = p[8];
        const float max_torque = (float)p[1];
        const REAL th = s[0], thdot = s[1];
        const float u = pk_clip(action, -max_torque, max_torque);
        const REAL u_cost = (REAL)(0.001f * (u * u));
        const REAL u_acc = (REAL)((float)p[6] * u);
        const REAL an = angle_normalize(th, pi, two_pi);
        const REAL costs = an * an + (REAL)(0.1) * (thdot * thdot) + u_cost;
        REAL newthdot = thdot + (grav_coef * sin(th) + u_acc) * dt;
        newthdot = pk_clip(newthdot, -max_speed, max_speed);
        s[0] = th + newthdot * dt;
        s[1] = newthdot;
        reward = -costs;
        term = false;
    }

    __device__ static void observe(const REAL s[2], REAL o[3]) {
        o[0] = cos(s[0]);
        o[1] = sin(s[0]);
        o[2] = s[1];
    }
};

extern "C" __global__ void pk_pendulum_reset(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, const REAL *__restrict__ params, uint seed, int fresh, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_reset<PkPendulum>(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
}

extern "C" __global__ void pk_pendulum_step(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    const float *__restrict__ actions, REAL *__restrict__ obs, REAL *__restrict__ final_obs,
    REAL *__restrict__ reward, uchar *__restrict__ terminated, uchar *__restrict__ truncated,
    const REAL *__restrict__ params, uint seed, int max_steps, int autoreset_mode, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_step<PkPendulum>(s, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated,
                            truncated, params, seed, max_steps, autoreset_mode, i);
}

extern "C" __global__ void pk_pendulum_rollout(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward,
    uchar *__restrict__ terminated, uchar *__restrict__ truncated, const REAL *__restrict__ params,
    const float *__restrict__ policy, int policy_kind, int hidden,
    REAL *__restrict__ out_obs, float *__restrict__ out_actions, REAL *__restrict__ out_rewards,
    uchar *__restrict__ out_terminated, uchar *__restrict__ out_truncated, REAL *__restrict__ out_final_obs,
    uint seed, int max_steps, int autoreset_mode, int t0, int t_count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_rollout<PkPendulum>(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                               policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                               out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n, i);
}
