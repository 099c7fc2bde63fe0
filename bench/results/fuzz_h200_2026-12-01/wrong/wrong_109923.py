# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 109923, level post_grad, dynamic=False, features ['mutation', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 109923, level post_grad, dynamic=False, features ['mutation', 'view_outputs']
import torch

def f(x0, x1, x2):
    v1 = torch.stack([x1], -2)
    x1.select(0, 0).fill_(3.0)
    v2 = x1 + x1
    v3 = v1.unsqueeze(0)
    v4 = v1.view(-1)
    v5 = torch.stack([x2], 2)
    x1.copy_(v2)
    return (v2, v3, v4, v5,)

def make_inputs():
    g = torch.Generator().manual_seed(1006337896)
    x0 = torch.randn((2, 2, 2, 1), generator=g).to(torch.float32)
    x1 = torch.randn((2,), generator=g).to(torch.float32)
    x2 = torch.randn((0, 8), generator=g).to(torch.float32)
    return [x0, x1, x2], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
