# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 112598, level post_grad, dynamic=False, features ['view_chain', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 112598, level post_grad, dynamic=False, features ['view_chain', 'view_outputs']
import torch

def f(x0):
    v1 = torch.concat([x0], -3)
    v2 = torch.concat([x0], -1)
    v3 = v2.expand(1, 6, 3)
    v4 = (v2 - 1)
    v5 = v4.reshape(1, -1).view(1, 6, 1).reshape(1, -1)
    v6 = v2.unsqueeze(0)
    v7 = v2.view(-1)
    return (v6, v7,)

def make_inputs():
    g = torch.Generator().manual_seed(485551380)
    x0 = torch.randn((1, 6, 1), generator=g).to(torch.float16)
    return [x0], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
