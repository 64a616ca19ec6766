// MountainCar-v0 (envs/mountain_car.py): discrete push, velocity and position clipped.
#include "pk_common.cuh"

struct PkMountainCar {
    static constexpr int D = 2, O = 2;
    using Act = int;
    static constexpr int ACTIONS = 3;  // Discrete(3)
    static constexpr float ACT_HIGH = 0.0f;

    __device__ static void reset(const REAL sym[4], const REAL *__restrict__ p, REAL s[2]) {
        s[0] = p[7] + p[8] * sym[0];
        s[1] = (REAL)0.0;
    }

    __device__ static void step(REAL s[2], int action, const REAL *__restrict__ p, REAL &reward, bool &term) {
        const REAL min_pos = p[0], max_pos = p[1], max_speed = p[2], goal_pos = p[3], goal_vel = p[4];
        const REAL force = p[5], gravity = p[6];
        REAL position = s[0], velocity = s[1];
        const REAL push = (REAL)(action - 1) * force;
        velocity = velocity + (push + cos((REAL)3.0 * position) * (-gravity));
        velocity = pk_clip(velocity, -max_speed, max_speed);
        position = position + velocity;
        position = pk_clip(position, min_pos, max_pos);
        if (position == min_pos && velocity < (REAL)0.0) velocity = (REAL)0.0;
        term = position >= goal_pos && velocity >= goal_vel;
        reward = (REAL)-1.0;
        s[0] = position;
        s[1] = velocity;
    }

    __device__ static void observe(const REAL s[2], REAL o[2]) {
        o[0] = s[0];
        o[1] = s[1];
    }
};

extern "C" __global__ void pk_mountain_car_reset(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, const REAL *__restrict__ params, uint seed, int fresh, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_reset<PkMountainCar>(s, steps, episodes, needs_reset, obs, params, seed, fresh, i);
}

extern "C" __global__ void pk_mountain_car_step(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    const int *__restrict__ actions, REAL *__restrict__ obs, REAL *__restrict__ final_obs,
    REAL *__restrict__ reward, uchar *__restrict__ terminated, uchar *__restrict__ truncated,
    const REAL *__restrict__ params, uint seed, int max_steps, int autoreset_mode, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_step<PkMountainCar>(s, steps, episodes, needs_reset, actions, obs, final_obs, reward, terminated,
                               truncated, params, seed, max_steps, autoreset_mode, i);
}

extern "C" __global__ void pk_mountain_car_rollout(
    REAL *__restrict__ s0, REAL *__restrict__ s1,
    int *__restrict__ steps, uint *__restrict__ episodes, uchar *__restrict__ needs_reset,
    REAL *__restrict__ obs, REAL *__restrict__ final_obs, REAL *__restrict__ reward,
    uchar *__restrict__ terminated, uchar *__restrict__ truncated, const REAL *__restrict__ params,
    const float *__restrict__ policy, int policy_kind, int hidden,
    REAL *__restrict__ out_obs, int *__restrict__ out_actions, REAL *__restrict__ out_rewards,
    uchar *__restrict__ out_terminated, uchar *__restrict__ out_truncated, REAL *__restrict__ out_final_obs,
    uint seed, int max_steps, int autoreset_mode, int t0, int t_count, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    REAL *const s[2] = {s0, s1};
    pk_env_rollout<PkMountainCar>(s, steps, episodes, needs_reset, obs, final_obs, reward, terminated, truncated, params,
                                  policy, policy_kind, hidden, out_obs, out_actions, out_rewards, out_terminated,
                                  out_truncated, out_final_obs, seed, max_steps, autoreset_mode, t0, t_count, n, i);
}
