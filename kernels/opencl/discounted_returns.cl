/* Discounted returns over a time-major [T, N] rollout, one work-item per env (buffer.discounted_returns). */
#include "pk_common.h"

/* bootstrap is [N] (value after the last step; truncation mid-rollout restarts from 0) or, with
 * per_step_bootstrap, [T, N] (the value of each step's final obs, used where truncated). */
__kernel void pk_discounted_returns(__global const REAL *rewards, __global const uchar *terminated,
                                    __global const uchar *truncated,
                                    __global const REAL *bootstrap, __global REAL *out, REAL gamma,
                                    int per_step_bootstrap, int T, int N)
{
    const int i = get_global_id(0);
    if (i >= N)
        return;
    REAL running = (REAL)(0.0);
    for (int t = T - 1; t >= 0; --t) {
        const size_t k = (size_t)t * (size_t)N + (size_t)i;
        const REAL boot = per_step_bootstrap ? bootstrap[k] : (REAL)(0.0);
        REAL nxt;
        if (t == T - 1)
            nxt = per_step_bootstrap ? bootstrap[k] : bootstrap[i];
        else
            nxt = truncated[k] ? boot : running;
        running = rewards[k] + gamma * nxt * (terminated[k] ? (REAL)(0.0) : (REAL)(1.0));
        out[k] = running;
    }
}
