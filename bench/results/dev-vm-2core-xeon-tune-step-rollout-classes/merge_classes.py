"""Merge per-class bests of the step/rollout searches into the shipped table's classes (small, medium).

usage: merge.py ROW FILE.json [FILE.json ...]   (ROW: pocl-cpu | intel-cpu)
Class-free entries are untouched. Families are derived from every kernel the files timed (Chain-v0's
step included, which has no entry of its own in the table and so runs the family's). Only the kernels the row already has class-free entries for are
added (the five classic envs; Chain-v0 is left out). A class family entry is written only for a family
whose every class-free kernel in the row has a class entry now (else a family entry at the class would
shadow those kernels' own class-free entries, which resolution reads after the class's families).
"""
import json
import sys
from pathlib import Path

from portkern import tuning
from portkern.runs import load_run

PATH = str(Path(tuning.__file__).parent / 'data' / 'tuned_defaults.json')
row_name, files = sys.argv[1], sys.argv[2:]
data = json.loads(Path(PATH).read_text())
row = data['rows'][row_name]
recs, every = [], []
for f in files:
    got = [r for r in load_run(f).records if r.kernel != 'copy']
    every += got
    recs += [r for r in got if r.kernel in row['kernels']]
new = tuning.class_entries(recs)
# Families from every kernel measured (Chain-v0's step too): a family entry is what a kernel without
# its own entry runs (Chain-v0 has none in the table), so it has to serve the kernels measured.
fam_of = tuning.class_entries(every)
for cls in new:
    new[cls]['families'] = fam_of.get(cls, {}).get('families', {})
for cls in ('small', 'medium'):
    if cls not in new:
        continue
    e = new[cls]
    part = row.setdefault('classes', {}).setdefault(cls, {'kernels': {}, 'families': {}, 'sizes': []})
    for k, c in e['kernels'].items():
        part['kernels'][k] = tuning._strip(c)
    have = set(part['kernels'])
    for fam, c in e['families'].items():
        # the kernels whose launches read this family after their own entry: tuning.family's, and for
        # "fused" the device-path rollouts too (OpenCL's env_rollout reads family "fused" for both)
        members = [k for k in row['kernels'] if tuning.family(k) == fam
                   or (fam == 'fused' and k.startswith('rollout:') and k.split(':')[2] == 'device')]
        if all(k in have for k in members):
            part['families'][fam] = dict(c)
        else:
            print(f'{row_name} {cls}: family {fam} not written (class entries missing for '
                  f'{sorted(set(members) - have)})')
    part['kernels'] = dict(sorted(part['kernels'].items()))
    part['families'] = dict(sorted(part['families'].items()))
    part['sizes'] = sorted(set(part['sizes']) | set(e['sizes']))
    print(row_name, cls, 'kernels', sorted(e['kernels']), 'families', {f: c for f, c in part['families'].items() if f in e['families']}, 'sizes', part['sizes'])
Path(PATH).write_text(json.dumps(data, indent=1) + '\n')
