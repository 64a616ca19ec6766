"""Chain-v0 (portkern/envs/chain.py, physics in portkern/envs/_chain_model.py) in Numba-CUDA.

State (qpos_0 .. qpos_{K-1}, qvel_0 .. qvel_{K-1}); K (``links``) is a constant of the build, so every
loop over the links is fixed-trip and the per-link values live in private arrays of K, which NVVM unrolls
into registers (sm_90 PTX: every K in float64, K <= 12 in float32; at K = 14 and 16 in float32 NVVM
leaves part of them in local memory).
One env step is FRAME_SKIP RK4 steps with the clipped controls held, each RK4 stage one articulated-body
pass (``_qacc_aba``): the reference's operations in its order, every multiply through ``mul``.
"""

from __future__ import annotations


from numba import cuda

from ...envs._chain_model import FRAME_SKIP
from .common import EnvFunctions, Toolkit, simulator


def build(k: Toolkit, links: int) -> EnvFunctions:
    T, mul, zero, one, djit, clip = k.T, k.mul, k.zero, k.one, k.djit, k.clip
    sin, cos = k.sin, k.cos
    K = int(links)
    K2 = 2 * K  # a local array's size must be a constant, not an expression of one
    # The functions that allocate the private arrays are cuda.jit (the simulator swaps in its fake cuda
    # module for them), inlined on a GPU so that, with K constant, the arrays stay in registers.
    ljit = cuda.jit(device=True) if simulator() else cuda.jit(device=True, forceinline=True)
    kf = T(K)
    # MuJoCo's RK4 tableau (_chain_model._RK4_A, _RK4_B) in T, as the reference's float literals round.
    half, sixth, third = T(0.5), T(1.0 / 6.0), T(1.0 / 3.0)

    @djit
    def kinematics(y, ex, ez, w):
        # _chain_model._kinematics: absolute angles and angular velocities summed down the chain.
        phi = y[0]
        wi = y[K]
        for j in range(K):
            if j > 0:
                phi = phi + y[j]
                wi = wi + y[K + j]
            ex[j] = -T(sin(phi))
            ez[j] = -T(cos(phi))
            w[j] = wi

    @djit
    def aba(y, p, tau, own, mcom, qdd, ex, ez, w, ua, ub, uc, uu):
        # _chain_model._qacc_aba at y = (qpos, qvel) into qdd; tau = gear * ctrl, own = the link's inertia
        # about its hinge and mcom = mass * com are the reference's per-call values, computed once.
        kinematics(y, ex, ez, w)
        length, mass = p.link_length, p.link_mass
        # The articulated inertia (6 entries) and bias force (3) of the sub-chain below hinge i + 1.
        ca = cb = cc = cd = ce = cf = zero
        pa0 = pa1 = pa2 = zero
        for n in range(K):  # inward
            i = K - 1 - n
            w2 = mul(w[i], w[i])
            mdx = mul(mcom, ex[i])
            mdz = mul(mcom, ez[i])
            a, b, c, d, e, f = own, mdz, -mdx, mass, zero, mass
            p0, p1, p2 = zero, mul(-w2, mdx), mul(-w2, mdz)
            if i < K - 1:
                rx = mul(length, ex[i])
                rz = mul(length, ez[i])
                cx = mul(-w2, rx)
                cz = mul(-w2, rz)
                pa0 = pa0 + mul(cb, cx) + mul(cc, cz)
                pa1 = pa1 + mul(cd, cx) + mul(ce, cz)
                pa2 = pa2 + mul(ce, cx) + mul(cf, cz)
                col_a = ca + mul(cb, rz) - mul(cc, rx)
                col_b = cb + mul(cd, rz) - mul(ce, rx)
                col_c = cc + mul(ce, rz) - mul(cf, rx)
                a = a + (col_a + mul(rz, col_b) - mul(rx, col_c))
                b, c, d, e, f = b + col_b, c + col_c, d + cd, e + ce, f + cf
                p0 = p0 + (pa0 + mul(rz, pa1) - mul(rx, pa2))
                p1, p2 = p1 + pa1, p2 + pa2
            inv_d = one / a
            ui = tau[i] - p0
            ua[i], ub[i], uc[i], uu[i] = a, b, c, ui
            ud = mul(ui, inv_d)
            ca = a - mul(mul(a, a), inv_d)
            cb = b - mul(mul(a, b), inv_d)
            cc = c - mul(mul(a, c), inv_d)
            cd = d - mul(mul(b, b), inv_d)
            ce = e - mul(mul(b, c), inv_d)
            cf = f - mul(mul(c, c), inv_d)
            pa0, pa1, pa2 = p0 + mul(a, ud), p1 + mul(b, ud), p2 + mul(c, ud)
        alpha, ax, az = zero, zero, p.gravity  # the base, accelerating up at g
        for i in range(K):  # outward
            if i > 0:
                rx = mul(length, ex[i - 1])
                rz = mul(length, ez[i - 1])
                w2 = mul(w[i - 1], w[i - 1])
                ax = ax + mul(alpha, rz) - mul(w2, rx)
                az = az - mul(alpha, rx) - mul(w2, rz)
            acc = (uu[i] - (mul(ua[i], alpha) + mul(ub[i], ax) + mul(uc[i], az))) / ua[i]
            alpha = alpha + acc
            qdd[i] = acc

    @djit
    def rk4(s, p, tau, own, mcom, y, f, dq, dv, ex, ez, w, ua, ub, uc, uu):
        # _chain_model._rk4 on s in place. The stage state y is (qpos, qvel) of the stage; dq and dv sum
        # B_s * (velocity, acceleration) stage by stage, the reference's order of its final sums.
        h = p.dt
        for j in range(K2):
            y[j] = s[j]
        aba(y, p, tau, own, mcom, f, ex, ez, w, ua, ub, uc, uu)
        for j in range(K):
            dq[j] = mul(y[K + j], sixth)
            dv[j] = mul(f[j], sixth)
        for stage in range(3):
            a = half if stage < 2 else one
            b = third if stage < 2 else sixth
            for j in range(K):
                # From X0 by h * A * (the previous stage's velocity, acceleration): qpos first, as it reads
                # the previous stage's velocity that the next line replaces.
                y[j] = s[j] + mul(h, mul(y[K + j], a))
                y[K + j] = s[K + j] + mul(mul(f[j], a), h)
            aba(y, p, tau, own, mcom, f, ex, ez, w, ua, ub, uc, uu)
            for j in range(K):
                dq[j] = dq[j] + mul(y[K + j], b)
                dv[j] = dv[j] + mul(f[j], b)
        for j in range(K):
            s[j] = s[j] + mul(h, dq[j])
            s[K + j] = s[K + j] + mul(dv[j], h)

    @djit
    def tip(s):
        # chain.tip: the mean of the links' unit vectors.
        phi = s[0]
        x = -T(sin(phi))
        z = -T(cos(phi))
        for j in range(1, K):
            phi = phi + s[j]
            x = x - T(sin(phi))
            z = z - T(cos(phi))
        return x / kf, z / kf

    @djit
    def reset(r, p, s):
        # One Philox block for K joints: joint j takes draw j % 4 (chain.reset).
        for j in range(K):
            s[j] = mul(p.reset_noise, r[j % 4])
            s[K + j] = zero

    @ljit
    def physics(s, action, p):
        # action: the env's row of K float32 controls, clipped in T as the reference clips them.
        tau = cuda.local.array(K, T)
        y = cuda.local.array(K2, T)
        f = cuda.local.array(K, T)
        dq = cuda.local.array(K, T)
        dv = cuda.local.array(K, T)
        ex = cuda.local.array(K, T)
        ez = cuda.local.array(K, T)
        w = cuda.local.array(K, T)
        ua = cuda.local.array(K, T)
        ub = cuda.local.array(K, T)
        uc = cuda.local.array(K, T)
        uu = cuda.local.array(K, T)
        effort = zero
        for j in range(K):
            u = clip(T(action[j]), -one, one)
            effort = effort + mul(u, u)
            tau[j] = mul(p.gear, u)
        mass, com = p.link_mass, p.link_com
        own = p.link_inertia + mul(mul(mass, com), com)
        mcom = mul(mass, com)
        for _ in range(FRAME_SKIP):
            rk4(s, p, tau, own, mcom, y, f, dq, dv, ex, ez, w, ua, ub, uc, uu)
        _, height = tip(s)
        reward = (height - one) - mul(p.ctrl_cost, effort)
        return reward, height >= p.target_height

    @djit
    def observe(s, out, row):
        for j in range(K):
            out[row, j] = T(cos(s[j]))
            out[row, K + j] = T(sin(s[j]))
            out[row, 2 * K + j] = s[K + j]
        x, z = tip(s)
        out[row, 3 * K] = x
        out[row, 3 * K + 1] = z

    return EnvFunctions(reset=reset, physics=physics, observe=observe)
