# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 3)]
# optimus-eq fuzz program: seed 102947, level post_grad, dynamic=False, features []
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 3)]
# optimus-eq fuzz program: seed 102947, level post_grad, dynamic=False, features []
import torch

def f(x0):
    v1 = x0.permute([3, 0, 2, 1])
    v2 = torch.stack([x0], -4)
    v3 = v2.clamp(min=0.1)
    v4 = torch.split(v2, 6, dim=3)
    v5 = v4[0]
    return (v1, v2, v3, v5,)

def make_inputs():
    g = torch.Generator().manual_seed(804357760)
    x0 = torch.randn((8, 4, 6, 1), generator=g).to(torch.float32).requires_grad_()
    return [x0], [x0]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
