# wrong under: greedy
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2), ('out', 1, 3), ('out', 2, 3)]
# optimus-eq fuzz program: seed 103223, level post_grad, dynamic=False, features ['aliased_inputs', 'mutation', 'some_requires_grad', 'view_chain', 'view_outputs']
import torch

def f(x0, x1, x2, x3, x4, x5):
    v1 = x0 - x0
    v2 = x0.reshape(2, -1).view(2, 0, 1).reshape(2, -1)
    v3 = (x4 * 2)
    x5.mul_(-2)
    v4 = (x4 * 2)
    v5 = torch.tanh(v2)
    v6 = (x5 * 2)
    x3.relu_()
    v7 = (x5 * 2)
    v8 = v7.unsqueeze(0)
    v9 = v7.view(-1)
    return (v6, v7, v8, v9, v3, v4,)

def make_inputs():
    g = torch.Generator().manual_seed(51403201)
    x0 = torch.randn((2, 0, 1), generator=g).to(torch.float32).requires_grad_()
    x1 = torch.randn((6, 8), generator=g).to(torch.float32).permute((1, 0)).requires_grad_()
    x2 = torch.randn((2, 4, 4), generator=g).to(torch.float32).requires_grad_()
    b0 = torch.randn((2, 2), generator=g).to(torch.float32)
    x3 = b0.t()
    x4 = b0[:, :1]
    x5 = b0[1:]
    return [x0, x1, x2, x3, x4, x5], [x0, x1, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
