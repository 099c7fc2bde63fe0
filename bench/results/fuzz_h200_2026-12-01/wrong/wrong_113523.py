# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 113523, level post_grad, dynamic=False, features ['some_requires_grad']
# --- greedy ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 113523, level post_grad, dynamic=False, features ['some_requires_grad']
import torch

def f(x0, x1, x2):
    v1 = torch.unbind(x0, 1)
    v2 = v1[0]
    v3 = v1[1]
    v4 = v1[2]
    v5 = torch.cat([v4], 0)
    v6 = torch.stack([v2, v3, v4], -1)
    v7 = v2.clamp(-0.3, 0.4)
    v8 = v3.clamp(-0.3, 0.4)
    v9 = v4.clamp(-0.3, 0.4)
    v10 = torch.split(v8, [0], 0)
    v11 = v10[0]
    v12 = torch.sigmoid(x0)
    v13 = torch.cat([v4, v3], 0)
    v14 = torch.concat([v9], 0)
    v16 = x0.detach()
    v17 = v6.detach()
    v18 = v12.detach()
    return (v17, v18, x0,)

def make_inputs():
    g = torch.Generator().manual_seed(281311073)
    x0 = torch.randn((0, 3), generator=g).to(torch.float16).requires_grad_()
    x1 = torch.randn((6, 8), generator=g).to(torch.float16).requires_grad_()
    x2 = torch.randn((8,), generator=g).to(torch.float16)
    return [x0, x1, x2], [x0, x1]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
