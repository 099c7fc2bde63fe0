# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 109998, level post_grad, dynamic=False, features ['view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 109998, level post_grad, dynamic=False, features ['view_outputs']
import torch

def f(x0):
    v1 = torch.cat([x0], 1)
    v2 = torch.split(v1, 2, dim=0)
    v3 = v2[0]
    v4 = v1.unsqueeze(0)
    v5 = v1[1:]
    v6 = v5.flatten(0)
    v7 = torch.tanh(v3)
    v8 = v1.unsqueeze(0)
    v9 = v1[1:]
    return (v7, v8, v9, x0,)

def make_inputs():
    g = torch.Generator().manual_seed(1449404416)
    x0 = torch.randn((2, 4), generator=g).to(torch.float16)
    return [x0], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
