// Discounted returns over a time-major [T, N] rollout; bootstrap is [N] or, per step, [T, N].
#include "pk_common.cuh"

extern "C" __global__ void pk_discounted_returns(
    const REAL *__restrict__ rewards, const uchar *__restrict__ terminated, const uchar *__restrict__ truncated,
    const REAL *__restrict__ bootstrap, REAL *__restrict__ out, REAL gamma, int per_step_bootstrap, int T, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    REAL running = (REAL)0.0;
    for (int t = T - 1; t >= 0; --t) {
        const size_t j = (size_t)t * N + i;
        REAL nxt;
        if (per_step_bootstrap) {
            // Where an episode was truncated, bootstrap from the value of its final obs.
            nxt = (t == T - 1 || truncated[j]) ? bootstrap[j] : running;
        } else {
            nxt = t == T - 1 ? bootstrap[i] : (truncated[j] ? (REAL)0.0 : running);
        }
        running = rewards[j] + gamma * nxt * (terminated[j] ? (REAL)0.0 : (REAL)1.0);
        out[j] = running;
    }
}
