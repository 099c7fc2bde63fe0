# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 108637, level post_grad, dynamic=False, features ['view_chain', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 108637, level post_grad, dynamic=False, features ['view_chain', 'view_outputs']
import torch

def f(x0, x1):
    v1 = x1 + x1
    v2 = v1.reshape(1, -1).view(1, 8, 2, 4).reshape(1, -1)
    v3 = v2.split(1, 0)
    v4 = v3[0]
    v5 = v2[(slice(None),) * 1 + (slice(8, 12),)]
    v6 = torch.stack([v4], 2)
    v7 = v4.unsqueeze(0)
    v8 = v4.view(-1)
    return (v6, v7, v8,)

def make_inputs():
    g = torch.Generator().manual_seed(314926371)
    x0 = torch.randn((2, 6), generator=g).to(torch.bfloat16)
    x1 = torch.randn((1, 8, 2, 4), generator=g).to(torch.bfloat16)
    return [x0, x1], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
