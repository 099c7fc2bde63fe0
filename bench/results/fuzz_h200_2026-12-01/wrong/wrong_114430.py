# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 114430, level post_grad, dynamic=False, features ['aliased_inputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 114430, level post_grad, dynamic=False, features ['aliased_inputs']
import torch

def f(x0, x1, x2, x3):
    v1 = (x1 - 1)
    v2 = torch.stack([x2], 1)
    v3 = v2[(slice(None),) * 1 + (slice(0, 1),)]
    v4 = torch.split(v2, 1, dim=1)
    v5 = v4[0]
    return (v3, v5,)

def make_inputs():
    g = torch.Generator().manual_seed(991998328)
    x0 = torch.randn((4, 8, 8), generator=g).to(torch.float32).permute((2, 1, 0))
    x1 = torch.randn((4, 3), generator=g).to(torch.float32).permute((1, 0))
    b0 = torch.randn((3, 6), generator=g).to(torch.float32)
    x2 = b0[0]
    x3 = b0
    return [x0, x1, x2, x3], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
