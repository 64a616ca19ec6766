/* Discounted returns over a time-major [T, N] rollout (buffer.discounted_returns).
 *
 * Layout knob (pk_scan.h): each work-item owns PK_SCAN_ENVS = PK_VW * PK_NV consecutive envs;
 * PK_VW = PK_NV = 1 is the GPU shape, one env per work-item. */
#include "pk_common.h"
#include "pk_scan.h"

/* bootstrap is [N] (value after the last step; truncation mid-rollout restarts from 0) or, with
 * per_step_bootstrap, [T, N] (the value of each step's final obs, used where truncated).
 * PK_PICK (a select) moves values without arithmetic, so every layout gives the scalar code's bits. */
PK_SCAN_KERNEL void pk_discounted_returns(__global const REAL *rewards,
                                          __global const uchar *terminated,
                                          __global const uchar *truncated,
                                          __global const REAL *bootstrap, __global REAL *out,
                                          REAL gamma, int per_step_bootstrap, int T, int N)
{
    const size_t base = get_global_id(0) * (size_t)PK_SCAN_ENVS;
    if (base >= (size_t)N)
        return;
    if (base + PK_SCAN_ENVS <= (size_t)N) {
        RV running[PK_NV];
        const size_t last_row = (size_t)(T - 1) * (size_t)N + base;
        for (int j = 0; j < PK_NV; ++j) {
            const size_t k = last_row + (size_t)(j * PK_VW);
            const RV nxt = PK_SCAN_LD(bootstrap + (per_step_bootstrap ? k : base + (size_t)(j * PK_VW)));
            const MV term = PK_SCAN_FLAG(terminated + k);
            const RV nonterminal = PK_PICK((RV)(1.0), (RV)(0.0), term);
            running[j] = PK_SCAN_LD(rewards + k) + gamma * nxt * nonterminal;
            PK_SCAN_ST(running[j], out + k);
        }
        for (int t = T - 2; t >= 0; --t) {
            const size_t row = (size_t)t * (size_t)N + base;
            for (int j = 0; j < PK_NV; ++j) {
                const size_t k = row + (size_t)(j * PK_VW);
                const RV boot = per_step_bootstrap ? PK_SCAN_LD(bootstrap + k) : (RV)(0.0);
                const MV trunc = PK_SCAN_FLAG(truncated + k), term = PK_SCAN_FLAG(terminated + k);
                const RV nxt = PK_PICK(running[j], boot, trunc);
                const RV nonterminal = PK_PICK((RV)(1.0), (RV)(0.0), term);
                running[j] = PK_SCAN_LD(rewards + k) + gamma * nxt * nonterminal;
                PK_SCAN_ST(running[j], out + k);
            }
        }
        return;
    }
    /* The last, partial block (N not a multiple of PK_SCAN_ENVS): the same recursion, env by env. */
    for (size_t i = base; i < (size_t)N; ++i) {
        REAL running = (REAL)(0.0);
        for (int t = T - 1; t >= 0; --t) {
            const size_t k = (size_t)t * (size_t)N + i;
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
}
