# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 2), ('out', 0, 3), ('out', 2, 4), ('out', 3, 4)]
# optimus-eq fuzz program: seed 105432, level post_grad, dynamic=False, features ['view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 2), ('out', 0, 3), ('out', 2, 4), ('out', 3, 4)]
# optimus-eq fuzz program: seed 105432, level post_grad, dynamic=False, features ['view_outputs']
import torch

def f(x0):
    v1 = torch.stack([x0], -4)
    v2 = v1.unsqueeze(0)
    v3 = v1[4:]
    v4 = torch.chunk(v1, 1, -4)
    v5 = v4[0]
    v6 = v3.transpose(0, -1)
    v7 = torch.cat([v5, v3], 0)
    v8 = torch.split(v5, [7, 1], 0)
    v9 = v8[0]
    v10 = v8[1]
    return (v6, v7, v9, v10, v6,)

def make_inputs():
    g = torch.Generator().manual_seed(93955918)
    x0 = torch.randn((8, 8, 1, 1), generator=g).to(torch.float16)
    return [x0], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
