/* Generalised advantage estimation over a time-major [T, N] rollout (buffer.gae).
 *
 * Layout knob (pk_scan.h): each work-item owns PK_SCAN_ENVS = PK_VW * PK_NV consecutive envs and
 * walks t backwards over them. PK_VW = PK_NV = 1 is the GPU shape (one env per work-item; the
 * work-items of a warp read a row together). On a CPU, where one core runs a work-group's items one
 * after another, a block of envs per work-item turns each row access into one contiguous run of
 * PK_SCAN_ENVS elements, read as PK_VW-wide vectors (see pk_scan.h).
 */
#include "pk_common.h"
#include "pk_scan.h"

/* The trace is cut at terminated or truncated; only a non-terminated step bootstraps from
 * next_values (the value of its final obs). Multiplying by 0/1 masks, rather than branching,
 * keeps the reference's roundings and its NaN/inf behaviour. Vector lanes round exactly as the
 * scalar code (FP_CONTRACT is off), so every layout gives the same bits. */
PK_SCAN_KERNEL void pk_gae(__global const REAL *rewards, __global const REAL *values,
                           __global const REAL *next_values, __global const uchar *terminated,
                           __global const uchar *truncated, __global REAL *advantages,
                           __global REAL *returns, REAL gamma, REAL gamma_lam, int T, int N)
{
    const size_t base = get_global_id(0) * (size_t)PK_SCAN_ENVS;
    if (base >= (size_t)N)
        return;
    if (base + PK_SCAN_ENVS <= (size_t)N) {
        RV last[PK_NV];
        for (int j = 0; j < PK_NV; ++j)
            last[j] = (RV)(0.0);
        for (int t = T - 1; t >= 0; --t) {
            const size_t row = (size_t)t * (size_t)N + base;
            for (int j = 0; j < PK_NV; ++j) {
                const size_t k = row + (size_t)(j * PK_VW);
                const MV term = PK_SCAN_FLAG(terminated + k);
                const MV done = term | PK_SCAN_FLAG(truncated + k);
                const RV nonterminal = PK_PICK((RV)(1.0), (RV)(0.0), term);
                const RV notdone = PK_PICK((RV)(1.0), (RV)(0.0), done);
                const RV v = PK_SCAN_LD(values + k);
                const RV delta = PK_SCAN_LD(rewards + k) + gamma * PK_SCAN_LD(next_values + k) * nonterminal - v;
                last[j] = delta + gamma_lam * notdone * last[j];
                const RV adv = last[j], ret = adv + v;
                PK_SCAN_ST(adv, advantages + k);
                PK_SCAN_ST(ret, returns + k);
            }
        }
        return;
    }
    /* The last, partial block (N not a multiple of PK_SCAN_ENVS): the same recursion, env by env. */
    for (size_t i = base; i < (size_t)N; ++i) {
        REAL last = (REAL)(0.0);
        for (int t = T - 1; t >= 0; --t) {
            const size_t k = (size_t)t * (size_t)N + i;
            const REAL nonterminal = terminated[k] ? (REAL)(0.0) : (REAL)(1.0);
            const REAL notdone = (terminated[k] || truncated[k]) ? (REAL)(0.0) : (REAL)(1.0);
            const REAL delta = rewards[k] + gamma * next_values[k] * nonterminal - values[k];
            last = delta + gamma_lam * notdone * last;
            advantages[k] = last;
            returns[k] = last + values[k];
        }
    }
}
