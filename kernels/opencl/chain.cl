/* Chain-v0: a planar chain of PK_LINKS links, articulated-body dynamics and MuJoCo's RK4, operation
 * for operation as portkern/envs/chain.py and portkern/envs/_chain_model.py (same order of sums).
 *
 * PK_LINKS (K) is a compile-time constant (EnvSpec.define_options passes -DPK_LINKS=K): every loop
 * over the links is fixed-trip and the per-link values live in private arrays. */
#include "pk_common.h"
#include "pk_params.h"

#ifndef PK_LINKS
#error "build with -DPK_LINKS=K, the number of links (EnvSpec.define_options)"
#endif
#if PK_LINKS < 2 || PK_LINKS > 16
#error "PK_LINKS must be from 2 to 16"
#endif

#define ENV_NAME chain
#define ENV_D (2 * PK_LINKS)
#define ENV_OBS (3 * PK_LINKS + 2)
#define ENV_ACT_DIM PK_LINKS
#if PK_LINKS > 3
#define ENV_MLP_OWN_WAVES 1 /* AMD: past 3 links, held to 4 waves a SIMD its MLP rollout spills (pk_policy.h) */
#endif
#define CHAIN_FRAME_SKIP 5 /* _chain_model.FRAME_SKIP: MuJoCo steps per env step */

/* qpos_j = reset_noise * U[-1, 1) of word j % 4 of the one reset block, qvel = 0 (chain.reset). */
static inline void env_reset(RV *s, __global const pk_chain_params *p, pk_bits b)
{
    const RV sym[4] = {pk_sym_v(b.x), pk_sym_v(b.y), pk_sym_v(b.z), pk_sym_v(b.w)};
    for (int j = 0; j < PK_LINKS; ++j) {
        s[j] = p->reset_noise * sym[j % 4];
        s[PK_LINKS + j] = (RV)(0.0);
    }
}

/* _kinematics: each link's unit vector (ex, ez) = (-sin phi, -cos phi) for its absolute angle phi,
 * and its absolute angular velocity w. */
static inline void chain_kinematics(const RV *q, const RV *v, RV *ex, RV *ez, RV *w)
{
    RV phi = q[0], wi = v[0];
    ex[0] = -sin(phi);
    ez[0] = -cos(phi);
    w[0] = wi;
    for (int j = 1; j < PK_LINKS; ++j) {
        phi = phi + q[j];
        wi = wi + v[j];
        ex[j] = -sin(phi);
        ez[j] = -cos(phi);
        w[j] = wi;
#ifndef PK_DOUBLE
        /* AMD: link j's sine and cosine made before the next angle exists (pk_common.h). Without it clang
         * interleaved the links' argument reductions: the MLP rollout took 130-132 VGPRs, 3 waves a SIMD on
         * gfx90a/gfx942; pinned it fits 128 with no spill and runs 4 (the step 122 -> 115). The float64
         * builds gained nothing (gfx1100's MLP rollout lost a wave): unpinned. */
        PK_PIN(ex[j]);
        PK_PIN(ez[j]);
        PK_PIN(phi);
#endif
    }
}

/* _qacc_aba: the joint accelerations by the articulated-body algorithm, tau = gear * clipped ctrl.
 * The reference's zero (0 * ex[0]) is written as 0: adding it changes nothing but the sign of a
 * zero. The child's articulated inertia (ca .. cf, symmetric 3 x 3) and bias (q0 .. q2) are
 * referred to hinge i + 1. */
static inline void chain_qacc(const RV *q, const RV *v, const RV *tau, __global const pk_chain_params *p,
                       RV *qdd)
{
    RV ex[PK_LINKS], ez[PK_LINKS], w[PK_LINKS];
    chain_kinematics(q, v, ex, ez, w);
    const REAL length = p->link_length, mass = p->link_mass, com = p->link_com;
    const REAL own = p->link_inertia + mass * com * com;
    const REAL mcom = mass * com;
    RV big_a[PK_LINKS], big_b[PK_LINKS], big_c[PK_LINKS], small_u[PK_LINKS];
    RV ca = (RV)(0.0), cb = (RV)(0.0), cc = (RV)(0.0), cd = (RV)(0.0), ce = (RV)(0.0),
       cf = (RV)(0.0), q0 = (RV)(0.0), q1 = (RV)(0.0), q2 = (RV)(0.0);
    for (int i = PK_LINKS - 1; i >= 0; --i) { /* inward: articulated inertias */
        const RV w2 = w[i] * w[i];
        const RV mdx = mcom * ex[i], mdz = mcom * ez[i];
        RV a = (RV)(own), b = mdz, c = -mdx, d = (RV)(mass), e = (RV)(0.0), f = (RV)(mass);
        RV p0 = (RV)(0.0), p1 = -w2 * mdx, p2 = -w2 * mdz;
        if (i < PK_LINKS - 1) {
            const RV rx = length * ex[i], rz = length * ez[i];
            const RV cx = -w2 * rx, cz = -w2 * rz;
            q0 = q0 + cb * cx + cc * cz;
            q1 = q1 + cd * cx + ce * cz;
            q2 = q2 + ce * cx + cf * cz;
            const RV col_a = ca + cb * rz - cc * rx;
            const RV col_b = cb + cd * rz - ce * rx;
            const RV col_c = cc + ce * rz - cf * rx;
            a = a + (col_a + rz * col_b - rx * col_c);
            b = b + col_b;
            c = c + col_c;
            d = d + cd;
            e = e + ce;
            f = f + cf;
            p0 = p0 + (q0 + rz * q1 - rx * q2);
            p1 = p1 + q1;
            p2 = p2 + q2;
        }
        const RV inv_d = (REAL)(1.0) / a;
        const RV ui = tau[i] - p0;
        big_a[i] = a;
        big_b[i] = b;
        big_c[i] = c;
        small_u[i] = ui;
        const RV ud = ui * inv_d;
        ca = a - a * a * inv_d;
        cb = b - a * b * inv_d;
        cc = c - a * c * inv_d;
        cd = d - b * b * inv_d;
        ce = e - b * c * inv_d;
        cf = f - c * c * inv_d;
        q0 = p0 + a * ud;
        q1 = p1 + b * ud;
        q2 = p2 + c * ud;
    }
    RV alpha = (RV)(0.0), ax = (RV)(0.0), az = (RV)(p->gravity); /* the base accelerates up at g */
    for (int i = 0; i < PK_LINKS; ++i) { /* outward: accelerations */
        if (i > 0) {
            const RV rx = length * ex[i - 1], rz = length * ez[i - 1];
            const RV w2 = w[i - 1] * w[i - 1];
            ax = ax + alpha * rz - w2 * rx;
            az = az - alpha * rx - w2 * rz;
        }
        const RV acc =
            (small_u[i] - (big_a[i] * alpha + big_b[i] * ax + big_c[i] * az)) / big_a[i];
        alpha = alpha + acc;
        qdd[i] = acc;
    }
}

/* _rk4: one MuJoCo RK4 step of dt on (q, v) in place, the torques held. Stage s starts from
 * X0 + dt * A[s] * (v, a) of stage s - 1; the B-weighted sums accumulate stage by stage in the
 * reference's order, so the four stages need not be kept. */
static inline void chain_rk4(RV *q, RV *v, const RV *tau, __global const pk_chain_params *p)
{
    const REAL h = p->dt;
    RV qi[PK_LINKS], vi[PK_LINKS], fi[PK_LINKS], dq[PK_LINKS], dv[PK_LINKS];
    for (int j = 0; j < PK_LINKS; ++j) {
        qi[j] = q[j];
        vi[j] = v[j];
    }
    for (int s = 0; s < 4; ++s) {
        if (s > 0) {
            const REAL a = s == 3 ? (REAL)(1.0) : (REAL)(0.5); /* _RK4_A[s - 1] */
            for (int j = 0; j < PK_LINKS; ++j) {
                const RV dqj = vi[j] * a, dvj = fi[j] * a;
                qi[j] = q[j] + h * dqj;
                vi[j] = v[j] + dvj * h;
            }
        }
        chain_qacc(qi, vi, tau, p, fi);
        /* _RK4_B[s] */
        const REAL bs = s == 0 || s == 3 ? (REAL)(1.0 / 6.0) : (REAL)(1.0 / 3.0);
        for (int j = 0; j < PK_LINKS; ++j) {
            dq[j] = s == 0 ? vi[j] * bs : dq[j] + vi[j] * bs;
            dv[j] = s == 0 ? fi[j] * bs : dv[j] + fi[j] * bs;
        }
    }
    /* mj_advance: qpos advances with the RK4 velocity, not the new qvel */
    for (int j = 0; j < PK_LINKS; ++j) {
        v[j] = v[j] + dv[j] * h;
        q[j] = q[j] + h * dq[j];
    }
}

/* chain.tip: the tip's (x, z) over the reach K * link_length. */
static inline void chain_tip(const RV *q, RV *x, RV *z)
{
    RV phi = q[0], tx = -sin(phi), tz = -cos(phi);
    for (int j = 1; j < PK_LINKS; ++j) {
        phi = phi + q[j];
        tx = tx - sin(phi);
        tz = tz - cos(phi);
    }
    *x = tx / (REAL)(PK_LINKS);
    *z = tz / (REAL)(PK_LINKS);
}

static inline IV env_physics(RV *s, const FV *action, __global const pk_chain_params *p, RV *reward)
{
    RV u[PK_LINKS], tau[PK_LINKS];
    for (int j = 0; j < PK_LINKS; ++j) {
        /* the float32 action in the state's precision, clipped as MuJoCo's ctrllimited */
        u[j] = fmin(fmax(PK_CONVERT(RV, action[j]), (REAL)(-1.0)), (REAL)(1.0));
        tau[j] = p->gear * u[j];
    }
    for (int k = 0; k < CHAIN_FRAME_SKIP; ++k)
        chain_rk4(s, s + PK_LINKS, tau, p);
    RV x, height;
    chain_tip(s, &x, &height);
    RV effort = u[0] * u[0];
    for (int j = 1; j < PK_LINKS; ++j)
        effort = effort + u[j] * u[j];
    *reward = (height - (REAL)(1.0)) - p->ctrl_cost * effort;
    return PK_IMASK(height >= p->target_height);
}

/* cos and sin of the joint angles, the joint velocities, the tip over the reach. */
static inline void env_observe(const RV *s, RV *o)
{
    for (int j = 0; j < PK_LINKS; ++j) {
        o[j] = cos(s[j]);
        o[PK_LINKS + j] = sin(s[j]);
        o[2 * PK_LINKS + j] = s[PK_LINKS + j];
    }
    chain_tip(s, &o[3 * PK_LINKS], &o[3 * PK_LINKS + 1]);
}

/* pk_chain_reset, pk_chain_step and pk_chain_rollout, generated from the functions above. */
#include "pk_env.h"
