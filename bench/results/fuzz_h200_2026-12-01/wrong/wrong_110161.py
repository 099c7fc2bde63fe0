# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 3)]
# optimus-eq fuzz program: seed 110161, level post_grad, dynamic=False, features ['mutation', 'view_chain']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 3)]
# optimus-eq fuzz program: seed 110161, level post_grad, dynamic=False, features ['mutation', 'view_chain']
import torch

def f(x0, x1):
    x0.add_(1)
    v1 = torch.concat([x1], 0)
    x0.relu_()
    v2 = torch.split(v1, 4, dim=0)
    v3 = v2[0]
    v4 = torch.cat([v3], 2)
    v5 = torch.concat([v3], 1)
    v6 = v4.reshape(4, -1).view(4, 4, 2).reshape(4, -1)
    return (v3, v4, v5, v6,)

def make_inputs():
    g = torch.Generator().manual_seed(558334437)
    x0 = torch.randn((1,), generator=g).to(torch.float16)
    x1 = torch.randn((4, 4, 2), generator=g).to(torch.float16)
    return [x0, x1], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
