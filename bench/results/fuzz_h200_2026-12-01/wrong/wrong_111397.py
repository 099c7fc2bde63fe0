# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1), ('out', 0, 3), ('out', 1, 3)]
# optimus-eq fuzz program: seed 111397, level post_grad, dynamic=False, features ['mutation', 'some_requires_grad', 'view_chain', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1), ('out', 0, 3), ('out', 1, 3)]
# optimus-eq fuzz program: seed 111397, level post_grad, dynamic=False, features ['mutation', 'some_requires_grad', 'view_chain', 'view_outputs']
import torch

def f(x0, x1):
    v1 = x1.unsqueeze(2)
    v2 = torch.cat([v1], 3)
    v1.copy_(v2)
    v3 = torch.cat([v2], -3)
    v4 = x0.reshape(1, -1).view(1, 2, 1, 3).reshape(1, -1)
    v5 = torch.cat([v2], 2)
    v6 = v2.unsqueeze(0)
    v7 = v2[3:]
    v8 = v5.unsqueeze(0)
    v9 = v5[3:]
    v3.copy_(v5)
    v2.copy_(v1)
    v10 = torch.stack([v4], 0)
    v11 = v5.reshape(6, -1).view(6, 1, 1, 3).reshape(6, -1)
    return (v8, v9, v10, v11,)

def make_inputs():
    g = torch.Generator().manual_seed(1578757902)
    x0 = torch.randn((1, 2, 1, 3), generator=g).to(torch.bfloat16).requires_grad_()
    x1 = torch.randn((6, 1, 3), generator=g).to(torch.bfloat16)
    return [x0, x1], [x0]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
