"""New class default vs the old class-free default, through the public calls (make, env.step, env.rollout).

usage: public_check.py DEVICE_SUBSTRING ROW N ROUNDS
Interleaved rounds: each round times a block of calls with the knobs at tuning.TUNED (the table's
size-class entry) and a block with the old class-free default set as attributes, order alternating.
"""
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

import portkern
from portkern import tuning
from portkern.backends import get_backend
from portkern.policy import RandomPolicy

dev, row_name, N, ROUNDS = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
table = json.loads((Path(portkern.__file__).parent / 'data' / 'tuned_defaults.json').read_text())['rows'][row_name]
be = get_backend('opencl', dev)
print('device', be.device_name, '| class', tuning.size_class(N), '| tuned defaults:', be.tuned_defaults.origin()[:160])

def cap(vw):  # the width the device builds (PoCL here: 8 floats); set by hand above it is refused
    return vw if be.max_vector_bytes is None else min(vw, be.max_vector_bytes // 4)

cases = [(k.split(':')[0], k.split(':')[1], k) for k in sys.argv[5:]]
T = 32
for kind, env_id, k in cases:
    env = portkern.step.make(env_id, N, backend=be)
    env.reset(seed=1)
    spec = env.spec
    old_entry = dict(table['families'][tuning.family(k)], **table['kernels'][k])
    old = {'env_vector_width': cap(old_entry['env_vector_width'])}
    if kind == 'step':
        old['local_size'] = old_entry['local_size']
    new_res = {kn: be.knob_in_force(kn, k, N) for kn in old}
    new = {kn: r.value for kn, r in new_res.items()}
    src = {kn: f'{r.source}/{r.size_class}' for kn, r in new_res.items()}
    rng = np.random.default_rng(0)
    if spec.is_discrete:
        acts = be.from_host(rng.integers(0, spec.discrete_actions, N).astype(np.int32))
    else:
        acts = be.from_host(rng.uniform(-1, 1, N).astype(np.float32))
    pol = RandomPolicy()
    calls = 50 if kind == "step" else 10
    def block(kind=kind, k=k, env=env, acts=acts, pol=pol, calls=calls):
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(calls):
            if kind == 'step':
                env.step(acts)
            else:
                env.rollout(T, pol, steps_per_launch=1 if k.endswith(':device') else None)
        be.synchronize()
        return time.perf_counter() - t0, time.process_time() - c0
    override = json.loads(os.environ.get('PK_NEW', 'null'))  # the new arm's values set by hand (else TUNED)
    if override:
        new, src = override, 'set by hand (PK_NEW)'
    def setk(vals, old=old, override=override):
        for kn in old:
            setattr(be, kn, vals[kn] if vals is not None else (override[kn] if override else tuning.TUNED))
    for vals in (None, old, None, old):  # warm up: build both programs
        setk(vals); block()
    wn, wo, cn, co = [], [], [], []
    for r in range(ROUNDS):
        for arm in ((0, 1) if r % 2 == 0 else (1, 0)):
            setk(None if arm == 0 else old)
            w, c = block()
            (wn if arm == 0 else wo).append(w); (cn if arm == 0 else co).append(c)
    setk(None)
    items = N * calls * (T if kind == 'rollout' else 1)
    rw = np.asarray(wo) / np.asarray(wn); rc = np.asarray(co) / np.asarray(cn)
    q = lambda a: f'{np.median(a):.2f}x [{np.percentile(a, 10):.2f}-{np.percentile(a, 90):.2f}]'
    print(f'{row_name} {k} N={N}: new {new} ({src}) {items/np.median(wn):.3g} env-steps/s; old {old} '
          f'{items/np.median(wo):.3g}; new/old wall {q(rw)}; cpu time {q(rc)}; rounds {ROUNDS} x {calls} calls')
