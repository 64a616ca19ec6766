/* Generalised advantage estimation over a time-major [T, N] rollout, one work-item per env (buffer.gae). */
#include "pk_common.h"

/* The trace is cut at terminated or truncated; only a non-terminated step bootstraps from
 * next_values (the value of its final obs). Multiplying by 0/1 masks, rather than branching,
 * keeps the reference's roundings and its NaN/inf behaviour. */
__kernel void pk_gae(__global const REAL *rewards, __global const REAL *values,
                     __global const REAL *next_values, __global const uchar *terminated,
                     __global const uchar *truncated, __global REAL *advantages,
                     __global REAL *returns, REAL gamma, REAL gamma_lam, int T, int N)
{
    const int i = get_global_id(0);
    if (i >= N)
        return;
    REAL last = (REAL)(0.0);
    for (int t = T - 1; t >= 0; --t) {
        const size_t k = (size_t)t * (size_t)N + (size_t)i;
        const REAL nonterminal = terminated[k] ? (REAL)(0.0) : (REAL)(1.0);
        const REAL notdone = (terminated[k] || truncated[k]) ? (REAL)(0.0) : (REAL)(1.0);
        const REAL delta = rewards[k] + gamma * next_values[k] * nonterminal - values[k];
        last = delta + gamma_lam * notdone * last;
        advantages[k] = last;
        returns[k] = last + values[k];
    }
}
