# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: requires_grad (class 4)
# requires_grad: output 2: requires_grad True, eager's False
# optimus-eq fuzz program: seed 108775, level post_grad, dynamic=False, features []
# --- greedy ---
# wrong: requires_grad (class 4)
# requires_grad: output 2: requires_grad True, eager's False
# optimus-eq fuzz program: seed 108775, level post_grad, dynamic=False, features []
import torch

def f(x0):
    v1 = x0[(slice(1, 5),)]
    v2 = torch.cat([x0], -1)
    v3 = torch.stack([x0, x0], 2)
    v4 = x0.detach()
    v5 = v2.detach()
    return (v3, v4, v5, x0,)

def make_inputs():
    g = torch.Generator().manual_seed(1054953760)
    x0 = torch.randn((6, 0), generator=g).to(torch.float32).requires_grad_()
    return [x0], [x0]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
