# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 103501, level post_grad, dynamic=False, features ['no_grad', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 103501, level post_grad, dynamic=False, features ['no_grad', 'view_outputs']
import torch

def f(x0, x1):
    v1 = x0.detach()
    with torch.no_grad():
        v2 = (x0 * 3)
    v3 = torch.stack([v1], 1)
    v4 = v1.detach()
    v5 = v3.unsqueeze(0)
    v6 = v3[1:]
    return (v4, v5, v6, v4,)

def make_inputs():
    g = torch.Generator().manual_seed(1850286820)
    x0 = torch.randn((3,), generator=g).to(torch.float32)
    x1 = torch.randn((1, 6), generator=g).to(torch.float32).permute((1, 0))
    return [x0, x1], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
