// GAE over a time-major [T, N] rollout (buffer.py's reference): one thread per env, reverse loop over t.
#include "pk_common.cuh"

extern "C" __global__ void pk_gae(
    const REAL *__restrict__ rewards, const REAL *__restrict__ values, const REAL *__restrict__ next_values,
    const uchar *__restrict__ terminated, const uchar *__restrict__ truncated,
    REAL *__restrict__ advantages, REAL *__restrict__ returns, REAL gamma, REAL gamma_lam, int T, int N) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= N) return;
    REAL last = (REAL)0.0;
    for (int t = T - 1; t >= 0; --t) {
        const size_t j = (size_t)t * N + i;
        const uchar term = terminated[j];
        // The flags multiply, as in the reference, so a non-finite value propagates the same way.
        const REAL nonterminal = term ? (REAL)0.0 : (REAL)1.0;
        const REAL notdone = (term | truncated[j]) ? (REAL)0.0 : (REAL)1.0;
        const REAL v = values[j];
        const REAL delta = rewards[j] + gamma * next_values[j] * nonterminal - v;
        last = delta + gamma_lam * notdone * last;
        advantages[j] = last;
        returns[j] = last + v;
    }
}
