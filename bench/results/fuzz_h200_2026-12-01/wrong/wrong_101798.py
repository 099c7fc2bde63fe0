# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 3), ('out', 3, 4)]
# optimus-eq fuzz program: seed 101798, level post_grad, dynamic=True, features ['casts', 'dynamic', 'mixed_dtypes', 'mutation', 'some_requires_grad', 'view_chain', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 3), ('out', 3, 4)]
# optimus-eq fuzz program: seed 101798, level post_grad, dynamic=True, features ['casts', 'dynamic', 'mixed_dtypes', 'mutation', 'some_requires_grad', 'view_chain', 'view_outputs']
import torch

def f(x0, x1, x2):
    v1 = torch.movedim(x0, -1, -2)
    v2 = v1.to(torch.bfloat16)
    v3 = v2.unsqueeze(0)
    v4 = v2[1:]
    v5 = x2.reshape(x2.shape[0], -1).view(x2.shape[0], x2.shape[1], x2.shape[2], x2.shape[3]).reshape(x2.shape[0], -1)
    v6 = x2.to(torch.float16) * 1
    v7 = (v6 - 1)
    v6.select(0, 0).fill_(3.0)
    v8 = v4 + v4
    v9 = torch.unbind(v8, -2)
    v10 = v9[0]
    v11 = v9[1]
    v12 = x2.reshape(x2.shape[0], -1).view(x2.shape[0], x2.shape[1], x2.shape[2], x2.shape[3]).reshape(x2.shape[0], -1)
    v13 = v2 * v2
    v14 = torch.split(v11, 3, dim=-1)
    v15 = v14[0]
    return (v11, v12, v13, v15, v11,)

def make_inputs():
    g = torch.Generator().manual_seed(2065336773)
    x0 = torch.randn((3, 3), generator=g).to(torch.float32)
    x1 = torch.randn((4,), generator=g).to(torch.float32).requires_grad_()
    x2 = torch.randn((1, 6, 3, 1), generator=g).to(torch.bfloat16).requires_grad_()
    return [x0, x1, x2], [x1, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=True, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
