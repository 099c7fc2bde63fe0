"""Dynamo tracing alone (backend="eager": the captured graph runs as is) of launch_bound's training step."""
import sys, time, copy, json
import torch
from optimus_bench.models import build
from optimus_bench.measure import TrainStep
torch.set_num_threads(1)
b = int(sys.argv[1])
case = build("launch_bound", "cpu", overrides={"branches": b, "batch": 64, "optimizer": "none"})
m = TrainStep(copy.deepcopy(case.model).train(), case.loss_fn)
f = torch.compile(m, backend="eager")
t = time.perf_counter()
loss, _ = f(*case.inputs, case.labels)
t1 = time.perf_counter()
loss.backward()
t2 = time.perf_counter()
ts = []
for _ in range(10):
    for p in m.parameters():
        p.grad = None
    s = time.perf_counter(); loss, _ = f(*case.inputs, case.labels); loss.backward(); ts.append((time.perf_counter() - s) * 1e3)
ts.sort()
print(json.dumps({"branches": b, "dynamo_eager_backend_first_forward_s": round(t1 - t, 2), "first_backward_s": round(t2 - t1, 2),
                  "step_ms_median": round(ts[5], 2)}))
