"""A planar chain of K rigid links on hinge joints: its MuJoCo model (MJCF) and the reference dynamics.

This is the physics of the chain env, written so that it is exactly MuJoCo's for the model that
:func:`mjcf` returns: the tests (tests/test_chain_mujoco.py) check :func:`qacc` against
``mujoco.mj_forward`` and :func:`env_step` against ``mujoco.mj_step``. The leading underscore keeps
this module out of the env registry (portkern.envs lists public modules only) until the env is
wired in.

The model
---------
K identical links (2 <= K <= 16) hang from the world origin in the x-z plane, gravity along -z.
Every joint is a hinge about +y at the top of its link; at ``qpos = 0`` every link points straight
down (-z), so the rest state is the stable equilibrium and "swing up" means leaving it. A positive
joint angle rotates the link (and everything below it) about +y, i.e. its lower end moves towards
-x. Each link is a uniform solid cylinder of length ``link_length`` and radius
``link_length * RADIUS_RATIO`` (only its inertia about the hinge axis moves anything, but MuJoCo
rejects a zero principal inertia, so the link is a cylinder rather than an ideal rod), with its
centre of mass at its middle, written as an explicit ``<inertial>`` element. No damping, armature,
friction loss, springs, joint limits or contacts (``<flag contact="disable"/>``, and every geom has
contype = conaffinity = 0); a motor at every joint, ``gear`` N m per unit of control, control clamped
to [-1, 1] (``ctrllimited``) exactly as MuJoCo clamps it. Integrator: MuJoCo's RK4, timestep ``dt``;
one env step is :data:`FRAME_SKIP` MuJoCo steps with the control held.

State: ``(qpos, qvel)`` in MuJoCo's order: K joint angles (relative to the parent link, radians,
never wrapped, as MuJoCo integrates them), then K joint velocities.

The algorithm
-------------
Articulated-body (ABA, Featherstone), in planar spatial vectors: one inward pass builds each
sub-chain's 3 x 3 articulated inertia (6 numbers) and bias force, one outward pass yields the joint
accelerations; O(K) work and O(K) live values, no K x K matrix. MuJoCo itself takes the
composite-rigid-body path (``mj_crb`` for the K x K mass matrix M, ``mj_rne`` for the bias,
``mj_factorI``/``mj_solveLD``, an L^T D L solve); :func:`qacc_crba` is that path, written the same
way, and both agree with MuJoCo in float64 (a few 1e-13 relative at K = 10: cond(M) x eps64). ABA is
the spec because of float32, the kernels' common precision: a hanging chain's M is ill-conditioned
(cond(M) ~ 3e2 at K = 3, 4e4 at K = 10, 3e5 at K = 16), and an explicit L^T D L solve in float32
loses about that factor: accelerations off by 5e-4 relative at K = 10 and 3e-3 at K = 16, against
~1e-6 for ABA at every K (measured against float64 at states near rest). ABA never forms M, so its
error does not grow with K. In a kernel, K is a compile-time constant: both passes are fixed-trip
loops that unroll into straight-line, branch-free code over ~8K private values, which is where the
per-vendor tuning will show.

Every function is written against the Python array API standard (``array_api_compat``), batched
over N envs: ``qpos``, ``qvel`` and ``ctrl`` are each K arrays of shape [N] (a tuple of them, or one
[K, N] array, variable-major like the kernels' [D, N] state; an env's [N, K] action array is passed
as ``action.T``). They compute in the arrays' dtype and return tuples of K arrays. ``params`` is
anything with the attributes of :class:`ChainParams` (its derived ``link_com`` and ``link_inertia``
included), so the same code will read an env's kernel params by name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

from ._blocks import repeated_block
from .base import namespace

#: MuJoCo steps (RK4, ``dt`` each) per env step, the control held across them.
FRAME_SKIP = 5
#: The chain lengths a model can have; in the kernels K is a compile-time constant.
MIN_LINKS, MAX_LINKS = 2, 16
#: Link radius / link length: the links are solid cylinders (see the module docstring).
RADIUS_RATIO = 0.05

# MuJoCo's RK4 tableau (engine_forward.c, RK4_A and RK4_B): stage i evaluates at X0 + h * A[i] * F[i-1].
_RK4_A = (0.5, 0.5, 1.0)
_RK4_B = (1.0 / 6.0, 1.0 / 3.0, 1.0 / 3.0, 1.0 / 6.0)


def _positive(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name}: must be a finite number > 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class ChainParams:
    """The chain's physics params (SI units), shared by every link. Defaults give a 0.5 m, 1 kg link,
    Earth gravity, 1 N m of torque per unit of control and a 10 ms MuJoCo timestep (so an env step
    is ``FRAME_SKIP * dt`` = 50 ms).

    1 N m is below the gravity torque of one horizontal link (m g L / 2 = 2.45 N m): raising the
    chain takes swinging, and a random policy keeps the joint speeds within a few tens of rad/s,
    which RK4 at 10 ms resolves. At 5 N m random controls spin a 2-link chain at ~100 rad/s
    (~1 rad per MuJoCo step), and the whip of a long chain can make RK4 itself unstable.
    """

    link_length: float = 0.5
    link_mass: float = 1.0
    gravity: float = 9.81  # along -z; 0 gives a horizontal (reacher-like) chain, negative is allowed
    gear: float = 1.0
    dt: float = 0.01

    def __post_init__(self) -> None:
        for name in ("link_length", "link_mass", "gear", "dt"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        g = self.gravity
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not math.isfinite(g):
            raise ValueError(f"gravity: must be a finite number, got {g!r}")
        object.__setattr__(self, "gravity", float(g))

    @property
    def link_com(self) -> float:
        """Distance from a link's hinge to its centre of mass (the middle of the link)."""
        return self.link_length / 2.0

    @property
    def link_radius(self) -> float:
        return self.link_length * RADIUS_RATIO

    @property
    def link_inertia(self) -> float:
        """Moment of inertia about the centre of mass, about the hinge axis (a solid cylinder's,
        about a diameter): m (3 r^2 + L^2) / 12. MJCF's diaginertia carries the same float."""
        r, length = self.link_radius, self.link_length
        return self.link_mass * (3.0 * r * r + length * length) / 12.0

    @property
    def link_inertia_axial(self) -> float:
        """About the link's own axis (m r^2 / 2): in the MJCF only, it never moves a planar chain."""
        r = self.link_radius
        return self.link_mass * r * r / 2.0


def check_links(links: Any) -> int:
    """``links`` as an int, or ValueError naming it: an int from MIN_LINKS to MAX_LINKS (not a bool,
    float or string: K is a compile-time constant of the kernels)."""
    if isinstance(links, bool) or not isinstance(links, int) or not MIN_LINKS <= links <= MAX_LINKS:
        raise ValueError(f"links: must be an int from {MIN_LINKS} to {MAX_LINKS}, got {links!r}")
    return int(links)


def mjcf(
    links: int,
    *,
    link_length: float = ChainParams.link_length,
    link_mass: float = ChainParams.link_mass,
    gravity: float = ChainParams.gravity,
    gear: float = ChainParams.gear,
    dt: float = ChainParams.dt,
) -> str:
    """The MJCF text of the K-link chain (see the module docstring), for ``mujoco.MjModel.from_xml_string``.

    Numbers are written with Python's ``repr`` (shortest round-trip), so MuJoCo parses exactly the
    floats the reference computes with.
    """
    k = check_links(links)
    p = ChainParams(link_length, link_mass, gravity, gear, dt)
    f = repr
    inertia = f"{f(p.link_inertia)} {f(p.link_inertia)} {f(p.link_inertia_axial)}"
    lines = [
        f'<mujoco model="portkern-chain-{k}">',
        # inertiafromgeom="false": the explicit <inertial> elements are the whole mass model.
        '  <compiler angle="radian" inertiafromgeom="false"/>',
        f'  <option timestep="{f(p.dt)}" integrator="RK4" gravity="0 0 {f(-p.gravity)}">',
        '    <flag contact="disable"/>',
        "  </option>",
        "  <default>",
        '    <joint type="hinge" axis="0 1 0" limited="false" damping="0" armature="0" frictionloss="0"'
        ' stiffness="0"/>',
        f'    <geom type="capsule" size="{f(p.link_radius)}" contype="0" conaffinity="0"/>',
        f'    <motor gear="{f(p.gear)}" ctrllimited="true" ctrlrange="-1 1"/>',
        "  </default>",
        "  <worldbody>",
    ]
    indent = "    "
    for i in range(1, k + 1):
        pos = "0 0 0" if i == 1 else f"0 0 {f(-p.link_length)}"
        lines += [
            f'{indent}<body name="link{i}" pos="{pos}">',
            f'{indent}  <joint name="joint{i}"/>',
            f'{indent}  <inertial pos="0 0 {f(-p.link_com)}" mass="{f(p.link_mass)}" diaginertia="{inertia}"/>',
            f'{indent}  <geom name="geom{i}" fromto="0 0 0 0 0 {f(-p.link_length)}"/>',
        ]
        indent += "  "
    # The tip of the last link, for tasks that reach with it; a site has no mass and no dynamics.
    lines.append(f'{indent}<site name="tip" pos="0 0 {f(-p.link_length)}"/>')
    for i in range(k, 0, -1):
        indent = indent[:-2]
        lines.append(f"{indent}</body>")
    lines += ["  </worldbody>", "  <actuator>"]
    lines += [f'    <motor name="motor{i}" joint="joint{i}"/>' for i in range(1, k + 1)]
    lines += ["  </actuator>", "</mujoco>", ""]
    return "\n".join(lines)


def _joints(name: str, x: Any, k: int | None = None) -> tuple:
    """``x`` (a sequence of K [N] arrays, or a [K, N] array) as a tuple of K arrays; K checked."""
    n = len(x) if isinstance(x, (tuple, list)) else (x.shape[0] if getattr(x, "ndim", 0) >= 1 else None)
    if n is None:
        raise ValueError(f"{name}: expected K arrays of shape [N] or one [K, N] array, got {type(x).__name__}")
    if k is None:
        if isinstance(n, bool) or not isinstance(n, int) or not MIN_LINKS <= n <= MAX_LINKS:
            raise ValueError(f"{name}: the chain has {n} joints here; links must be from {MIN_LINKS} to {MAX_LINKS}")
    elif n != k:
        raise ValueError(f"{name}: {n} joints, but qpos has {k}")
    return tuple(x[j] for j in range(n))


def _kinematics(q: tuple, v: tuple) -> tuple[list, list, list]:
    """Link directions and angular velocities. e_i = (ex_i, ez_i) is link i's unit vector from its
    hinge to its lower end (rotating (0, -1) about +y by the absolute angle phi gives
    (-sin phi, -cos phi)); w_i its absolute angular velocity (about +y)."""
    xp = namespace(*q, *v)
    ex, ez, w = [], [], []
    phi = wi = None
    for j in range(len(q)):
        phi = q[j] if phi is None else phi + q[j]
        wi = v[j] if wi is None else wi + v[j]
        ex.append(-xp.sin(phi))
        ez.append(-xp.cos(phi))
        w.append(wi)
    return ex, ez, w


@repeated_block  # 20 calls a step: a tracing compiler compiles it once (repeated_block)
def _qacc_aba(q: tuple, v: tuple, u: tuple, p: Any) -> tuple:
    """Forward dynamics by the articulated-body algorithm, on validated, clamped inputs.

    Planar spatial vectors, world-aligned, each link's referred to its own hinge p_i: a motion is
    (alpha, a_x, a_z) (angular acceleration, classical acceleration of p_i), a force (n, F_x, F_z)
    (torque about p_i, force). The hinge's motion subspace is s = (1, 0, 0) at p_i for every link,
    and moving the reference point by r = p_{i+1} - p_i = L e_i is X = [[1, 0, 0], [r_z, 1, 0],
    [-r_x, 0, 1]] for motions (omega x r = omega (r_z, -r_x) about +y) and X^T for forces. Gravity
    enters as an upward acceleration g of the base, as in mj_rne, and the velocity terms as each
    link's centripetal accelerations (its angular velocity is always along y).
    """
    ex, ez, w = _kinematics(q, v)
    k = len(q)
    length, mass, com = p.link_length, p.link_mass, p.link_com
    zero = 0.0 * ex[0]
    # A link's rigid-body inertia about its hinge, for d = com e_i: [[I_c + m com^2, m d_z, -m d_x],
    # [m d_z, m, 0], [-m d_x, 0, m]] (symmetric: kept as its 6 upper entries a b c / d e / f).
    own = p.link_inertia + mass * com * com
    tau = [p.gear * u[j] for j in range(k)]
    big_u, big_d, small_u = [None] * k, [None] * k, [None] * k
    child = None  # (Ia, pa) of the articulated body below hinge i+1, referred to p_{i+1}
    for i in range(k - 1, -1, -1):  # inward: articulated inertias
        w2 = w[i] * w[i]
        mdx, mdz = (mass * com) * ex[i], (mass * com) * ez[i]
        a, b, c, d, e, f = own + zero, mdz, -mdx, mass + zero, zero, mass + zero
        # The link's bias force: its centre of mass accelerates by -w^2 d relative to p_i.
        p0, p1, p2 = zero, -w2 * mdx, -w2 * mdz
        if child is not None:
            (ca, cb, cc, cd, ce, cf), (q0, q1, q2) = child
            rx, rz = length * ex[i], length * ez[i]
            # pa += Ia c_i, c_i = (0, -w^2 r): the centripetal acceleration of p_{i+1} on link i.
            cx, cz = -w2 * rx, -w2 * rz
            q0 = q0 + cb * cx + cc * cz
            q1 = q1 + cd * cx + ce * cz
            q2 = q2 + ce * cx + cf * cz
            # IA_i = I_i + X^T Ia X; pA_i = b_i + X^T pa. X only mixes alpha into (a_x, a_z) by
            # (r_z, -r_x), so only the (0, *) entries change.
            col_a = ca + cb * rz - cc * rx
            col_b = cb + cd * rz - ce * rx
            col_c = cc + ce * rz - cf * rx
            a = a + (col_a + rz * col_b - rx * col_c)
            b, c, d, e, f = b + col_b, c + col_c, d + cd, e + ce, f + cf
            p0 = p0 + (q0 + rz * q1 - rx * q2)
            p1, p2 = p1 + q1, p2 + q2
        # U = IA s, D = s^T U, u = tau - s^T pA; the body seen through hinge i by its parent:
        # Ia = IA - U U^T / D, pa = pA + U u / D.
        inv_d = 1.0 / a
        ui = tau[i] - p0
        big_u[i], big_d[i], small_u[i] = (a, b, c), a, ui
        ud = ui * inv_d
        child = (
            (a - a * a * inv_d, b - a * b * inv_d, c - a * c * inv_d, d - b * b * inv_d, e - b * c * inv_d,
             f - c * c * inv_d),
            (p0 + a * ud, p1 + b * ud, p2 + c * ud),
        )
    out = []
    alpha, ax, az = zero, zero, p.gravity + zero  # the base, accelerating up at g
    for i in range(k):  # outward: accelerations
        if i:
            rx, rz = length * ex[i - 1], length * ez[i - 1]
            w2 = w[i - 1] * w[i - 1]
            ax = ax + alpha * rz - w2 * rx
            az = az - alpha * rx - w2 * rz
        a, b, c = big_u[i]
        qdd = (small_u[i] - (a * alpha + b * ax + c * az)) / big_d[i]
        alpha = alpha + qdd
        out.append(qdd)
    return tuple(out)


def _qacc_crba(q: tuple, v: tuple, u: tuple, p: Any) -> tuple:
    """Forward dynamics by MuJoCo's own path (CRBA, RNE, L^T D L), on validated, clamped inputs."""
    k = len(q)
    length, mass, com, inertia = p.link_length, p.link_mass, p.link_com, p.link_inertia
    ex, ez, w = _kinematics(q, v)

    # Mass matrix (CRBA). For the sub-chain of links j..K-1: mc its mass, (cx, cz) its first moment
    # about hinge j (sum of m (r - p_j)), ic its inertia about hinge j. Then M[j][j] = ic_j and, for
    # i < j, M[j][i] = M[j][i+1] + L e_i . c_j, since p_j - p_i = L (e_i + ... + e_{j-1}).
    own = inertia + mass * com * com  # a link's inertia about its own hinge (parallel axis)
    mm = [[None] * k for _ in range(k)]  # lower triangle, mm[j][i] with i <= j
    cx = cz = ic = None
    mc = 0.0
    for j in range(k - 1, -1, -1):
        if cx is None:  # the last link alone
            cx, cz, ic = (mass * com) * ex[j], (mass * com) * ez[j], own + 0.0 * ex[j]
        else:
            # Moving the sub-chain below from hinge j+1 to hinge j: r - p_j = (r - p_{j+1}) + L e_j.
            ldotc = length * (ex[j] * cx + ez[j] * cz)
            ic = own + ic + 2.0 * ldotc + mc * (length * length)
            cx = (mass * com) * ex[j] + cx + (mc * length) * ex[j]
            cz = (mass * com) * ez[j] + cz + (mc * length) * ez[j]
        mc = mc + mass
        mm[j][j] = ic
        for i in range(j - 1, -1, -1):
            mm[j][i] = mm[j][i + 1] + length * (ex[i] * cx + ez[i] * cz)

    # Bias forces (planar recursive Newton-Euler with zero joint accelerations): gravity enters as
    # an upward acceleration of the base, as in mj_rne; with every angular velocity along y and
    # zero joint accelerations, every angular acceleration is zero, leaving the centripetal terms.
    ax, az = 0.0 * ex[0], p.gravity + 0.0 * ex[0]  # acceleration of hinge j, starting at the base
    acx, acz = [], []
    for j in range(k):
        w2 = w[j] * w[j]
        acx.append(ax - (w2 * com) * ex[j])
        acz.append(az - (w2 * com) * ez[j])
        ax = ax - (w2 * length) * ex[j]
        az = az - (w2 * length) * ez[j]
    bias = [None] * k
    fx = fz = n = None  # force and torque (about y) that link j exerts on link j+1's side, at hinge j+1
    for j in range(k - 1, -1, -1):
        gx, gz = mass * acx[j], mass * acz[j]
        # torque about hinge j: d x f for d in the x-z plane is d_z f_x - d_x f_z about +y.
        tj = com * (ez[j] * gx - ex[j] * gz)
        if fx is not None:
            tj = tj + length * (ez[j] * fx - ex[j] * fz) + n
            gx, gz = gx + fx, gz + fz
        fx, fz, n = gx, gz, tj
        bias[j] = tj

    # Generalised force, in mj_fwdAcceleration's order: (passive - bias) + applied + actuator.
    x = [(0.0 - bias[j]) + p.gear * u[j] for j in range(k)]

    # mj_factorI: M = L^T D L, eliminating rows from the last joint up; then mj_solveLD.
    inv_d = [None] * k
    for j in range(k - 1, -1, -1):
        inv_d[j] = 1.0 / mm[j][j]
        for i in range(j - 1, -1, -1):
            scale = -mm[j][i] * inv_d[j]
            for c in range(i + 1):
                mm[i][c] = mm[i][c] + mm[j][c] * scale
        for i in range(j):
            mm[j][i] = mm[j][i] * inv_d[j]
    for j in range(k - 1, 0, -1):  # x <- L^-T x
        for i in range(j):
            x[i] = x[i] - mm[j][i] * x[j]
    x = [x[j] * inv_d[j] for j in range(k)]  # x <- D^-1 x
    for j in range(1, k):  # x <- L^-1 x
        dot = mm[j][0] * x[0]
        for i in range(1, j):
            dot = dot + mm[j][i] * x[i]
        x[j] = x[j] - dot
    return tuple(x)


def _clamp(u: tuple) -> tuple:
    # ctrllimited: MuJoCo clamps ctrl to ctrlrange before the actuator force (mj_fwdActuation).
    xp = namespace(*u)
    return tuple(xp.clip(uj, -1.0, 1.0) for uj in u)


def qacc(qpos: Sequence[Any], qvel: Sequence[Any], ctrl: Sequence[Any], params: Any = None) -> tuple:
    """Joint accelerations, MuJoCo's ``data.qacc`` after ``mj_forward`` (K arrays of shape [N]), by
    the articulated-body algorithm (what rk4_step and env_step use).

    ``ctrl`` is the raw control (MuJoCo's ``data.ctrl``): clamped to [-1, 1], times ``gear``.
    """
    p = ChainParams() if params is None else params
    q = _joints("qpos", qpos)
    k = len(q)
    return _qacc_aba(q, _joints("qvel", qvel, k), _clamp(_joints("ctrl", ctrl, k)), p)


def qacc_crba(qpos: Sequence[Any], qvel: Sequence[Any], ctrl: Sequence[Any], params: Any = None) -> tuple:
    """:func:`qacc` by MuJoCo's own algorithm instead (CRBA mass matrix, RNE bias, ``mj_factorI``'s
    L^T D L): an independent derivation the tests hold the articulated-body one against, and the
    measure of why the kernels do not use it (its float32 error grows with cond(M); see the module
    docstring)."""
    p = ChainParams() if params is None else params
    q = _joints("qpos", qpos)
    k = len(q)
    return _qacc_crba(q, _joints("qvel", qvel, k), _clamp(_joints("ctrl", ctrl, k)), p)


def rk4_step(qpos: Sequence[Any], qvel: Sequence[Any], ctrl: Sequence[Any], params: Any = None) -> tuple:
    """One MuJoCo step with ``integrator="RK4"`` (``mj_step``, i.e. ``mj_RungeKutta(m, d, 4)``):
    ``(qpos, qvel)`` after ``dt``, as two tuples of K arrays.

    As MuJoCo does it: stage i starts from X0 + h * A[i] * (velocity, acceleration) of stage i-1,
    and the final update is qvel = v0 + h * sum(B_i a_i) while qpos = q0 + h * sum(B_i v_i): the
    positions advance with the stages' velocities, not with the new qvel.
    """
    p = ChainParams() if params is None else params
    q0 = _joints("qpos", qpos)
    k = len(q0)
    v0 = _joints("qvel", qvel, k)
    u = _clamp(_joints("ctrl", ctrl, k))
    return _rk4(q0, v0, u, p)


def _rk4(q0: tuple, v0: tuple, u: tuple, p: Any) -> tuple:
    h = p.dt
    k = len(q0)
    vs, fs = [v0], [_qacc_aba(q0, v0, u, p)]
    for a in _RK4_A:
        # dX = A * (v, a) of the previous stage (MuJoCo sums A's row, whose other entries are 0);
        # mj_integratePos adds h * dq, and the velocities add dv * h (mju_addToScl's order).
        dq = [vs[-1][j] * a for j in range(k)]
        dv = [fs[-1][j] * a for j in range(k)]
        qi = tuple(q0[j] + h * dq[j] for j in range(k))
        vi = tuple(v0[j] + dv[j] * h for j in range(k))
        vs.append(vi)
        fs.append(_qacc_aba(qi, vi, u, p))
    dq = [vs[0][j] * _RK4_B[0] for j in range(k)]
    dv = [fs[0][j] * _RK4_B[0] for j in range(k)]
    for s in range(1, 4):
        dq = [dq[j] + vs[s][j] * _RK4_B[s] for j in range(k)]
        dv = [dv[j] + fs[s][j] * _RK4_B[s] for j in range(k)]
    # mj_advance: qvel += dv * h first, then qpos += h * dq (the RK4 velocity, not the new qvel).
    return tuple(q0[j] + h * dq[j] for j in range(k)), tuple(v0[j] + dv[j] * h for j in range(k))


def env_step(qpos: Sequence[Any], qvel: Sequence[Any], ctrl: Sequence[Any], params: Any = None) -> tuple:
    """One env step: FRAME_SKIP RK4 steps with ``ctrl`` held, ``(qpos, qvel)`` as two tuples of K arrays."""
    p = ChainParams() if params is None else params
    q = _joints("qpos", qpos)
    k = len(q)
    v = _joints("qvel", qvel, k)
    u = _clamp(_joints("ctrl", ctrl, k))
    for _ in range(FRAME_SKIP):
        q, v = _rk4(q, v, u, p)
    return q, v


__all__ = ["FRAME_SKIP", "MAX_LINKS", "MIN_LINKS", "RADIUS_RATIO", "ChainParams", "check_links", "env_step",
           "mjcf", "qacc", "qacc_crba", "rk4_step"]
