import dataclasses, json
import gemm_fit as gf
from optimus_eq.cost import GPUCostModel
R = 'bench/results/h200_2026-12-02e/lb/gemm/gemm_rate.json'; A = 'bench/results/h200_2026-12-02c/gemm_accuracy.json'
base = GPUCostModel.cudagraph()
def mk(**kw): return dataclasses.replace(base, **kw)
models = {
 'before (52/40/96/0.8)': mk(gemm_flops_per_us=52e6, gemm_half_mn=40, gemm_half_k=96, bmm_efficiency=0.8, bmm_half_tiles=0),
 '02e recorded (54/96/0/1.0)': mk(gemm_flops_per_us=54e6, gemm_half_mn=96, gemm_half_k=0, bmm_efficiency=1.0, bmm_half_tiles=0),
 'rate-only refit': mk(gemm_flops_per_us=42e6, gemm_half_mn=48, gemm_half_k=16, bmm_efficiency=1.4, bmm_tile=128, bmm_half_tiles=33),
 'joint refit (new default)': base,
}
rr, L = gf.load([R], 20.0, 100.0); ar, _ = gf.load([A], 20.0, 100.0)
dr = gf.decisions(rr, models, L); da = gf.decisions(ar, models, L)
print('| model | rms log err, gemm_rate.json (122) | rms log err, gemm_accuracy.json (45) | wrong choices, models\' groups (30) | wrong choices, eager groups (%d) |' % len(da))
print('|---|---:|---:|---:|---:|')
for n, m in models.items():
    print(f"| {n} | {gf.rms_log_error(m, rr, L):.3f} | {gf.rms_log_error(m, ar, L):.3f} | {sum(not d['models'][n]['agrees'] for d in dr)} | {sum(not d['models'][n]['agrees'] for d in da)} |")
print()
G = json.load(open(R))['groups']
names = {0: 'DLRM gates+V on one input (8 linears, N 4x64+4x1, K 415): wide', 2: 'DLRM `c` experts (4 x [4096,64]@[64,64]): bmm', 3: 'DLRM `U` experts (4 x [4096,64]@[64,415]): bmm', 6: 'DHEN 32 linears [2048,64]@[64,64]: bmm', 8: 'launch_bound 32 linears [2048,32]@[32,32]: bmm'}
print('| group (twins: same figures) | direction | separate us | batched us (form) | measured ratio | ' + ' | '.join(models) + ' |')
print('|---|---|---:|---:|---:|' + '---:|' * len(models))
for d in sorted(dr, key=lambda d: (d['group'][2], ['forward','backward','train'].index(d['phase']))):
    gi = d['group'][2]
    if gi not in names: continue
    cells = ' | '.join(f"{d['models'][n]['ratio']:.2f}{'' if d['models'][n]['agrees'] else ' **wrong**'}" for n in models)
    print(f"| {names[gi]} | {d['phase']} | {d['separate_us']:.1f} | {d['batched_us']:.1f} ({d['batched_form']}) | {d['measured_ratio']:.2f} | {cells} |")
print()
print('eager groups where any model is wrong:')
for d in sorted(da, key=lambda d: str(d['group'])):
    if all(x['agrees'] for x in d['models'].values()): continue
    cells = ' | '.join(f"{d['models'][n]['ratio']:.2f}{'' if d['models'][n]['agrees'] else ' **wrong**'}" for n in models)
    print(f"| K {d['group'][1]}, {d['group'][2]} | forward | {d['separate_us']:.1f} | {d['batched_us']:.1f} ({d['batched_form']}) | {d['measured_ratio']:.2f} | {cells} |")
