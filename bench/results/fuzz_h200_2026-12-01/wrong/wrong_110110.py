# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 110110, level post_grad, dynamic=False, features ['aliased_inputs', 'mutation', 'some_requires_grad', 'view_chain']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 110110, level post_grad, dynamic=False, features ['aliased_inputs', 'mutation', 'some_requires_grad', 'view_chain']
import torch

def f(x0, x1, x2, x3, x4, x5):
    v1 = (x5 * 2)
    x4.mul_(-2)
    v2 = (x5 * 2)
    v3 = v2.reshape(6, -1).view(6, 2).reshape(6, -1)
    v4 = x2 - x2
    v5 = x0[(slice(0, 1),)]
    v6 = x0 + x3
    v7 = torch.concat([x4], -1)
    v8 = v7.squeeze()
    return (v5, v6, v7, v8, v1, v2,)

def make_inputs():
    g = torch.Generator().manual_seed(872387844)
    x0 = torch.randn((2,), generator=g).to(torch.float32).requires_grad_()
    x1 = torch.randn((8, 6), generator=g).to(torch.float32).requires_grad_()
    x2 = torch.randn((4, 3), generator=g).to(torch.float32).permute((1, 0)).requires_grad_()
    b0 = torch.randn((6, 2), generator=g).to(torch.float32)
    x3 = b0[0]
    x4 = b0[1:]
    x5 = b0
    return [x0, x1, x2, x3, x4, x5], [x0, x1, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
