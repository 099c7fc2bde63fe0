# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 112801, level post_grad, dynamic=False, features ['view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 112801, level post_grad, dynamic=False, features ['view_outputs']
import torch

def f(x0, x1, x2):
    v1 = torch.concat([x2], -1)
    v2 = torch.split(x0, [2], 3)
    v3 = v2[0]
    v4 = torch.nan_to_num(v3)
    v5 = v4.split(1, 1)
    v6 = v5[0]
    v7 = v5[1]
    v8 = v1.unsqueeze(0)
    v9 = v1[2:]
    return (v6, v7, v8, v9,)

def make_inputs():
    g = torch.Generator().manual_seed(1165554225)
    x0 = torch.randn((2, 2, 4, 2), generator=g).to(torch.float32)
    x1 = torch.randn((8, 2, 4, 8), generator=g).to(torch.float32)
    x2 = torch.randn((4,), generator=g).to(torch.float32)
    return [x0, x1, x2], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
