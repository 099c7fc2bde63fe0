# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 103040, level pre_grad, dynamic=False, features ['some_requires_grad', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 103040, level pre_grad, dynamic=False, features ['some_requires_grad', 'view_outputs']
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18):
    v1 = x1 * x1
    v2 = torch.cat([v1], 1)
    v3 = torch.sigmoid(x1)
    v4 = torch.sigmoid(v1)
    v5 = torch.sigmoid(v2)
    v6 = v3.clamp(-0.3, 0.4)
    v7 = v4.clamp(-0.3, 0.4)
    v8 = v5.clamp(-0.3, 0.4)
    v9 = torch.nn.functional.layer_norm(v3, [3, 2], None, None, 1e-05)
    v10 = torch.nn.functional.layer_norm(v4, [2], x2, x3, 1e-05)
    v11 = torch.nn.functional.layer_norm(v5, [2], x4, x5, 1e-05)
    v12 = torch.cat([v6, v7], 1)
    v13 = torch.nn.functional.linear(v3, x6, None)
    v14 = torch.nn.functional.linear(v4, x7, x8)
    v15 = torch.nn.functional.linear(v5, x9, None)
    v16 = x4.squeeze()
    v17 = torch.sigmoid(x0)
    v18 = torch.nn.functional.linear(v9, x10, None)
    v19 = torch.nn.functional.linear(v10, x11, x12)
    v20 = torch.nn.functional.linear(v11, x13, None)
    v21 = v2.permute([0, 2, 1])
    v22 = torch.nn.functional.linear(v9, x14, x15)
    v23 = torch.nn.functional.linear(v10, x16, x17)
    v24 = torch.nn.functional.linear(v11, x18, None)
    v25 = v5.unsqueeze(0)
    v26 = v5[3:]
    return (v25, v26,)

def make_inputs():
    g = torch.Generator().manual_seed(1948116071)
    x0 = torch.randn((8, 4, 3), generator=g).to(torch.float32).permute((2, 1, 0)).requires_grad_()
    x1 = torch.randn((2, 3, 6), generator=g).to(torch.float32).permute((2, 1, 0))
    x2 = torch.randn((2,), generator=g).to(torch.float32)
    x3 = torch.randn((2,), generator=g).to(torch.float32).requires_grad_()
    x4 = torch.randn((2,), generator=g).to(torch.float32)
    x5 = torch.randn((2,), generator=g).to(torch.float32)
    x6 = torch.randn((2, 2), generator=g).to(torch.float32)
    x7 = torch.randn((2, 2), generator=g).to(torch.float32).requires_grad_()
    x8 = torch.randn((2,), generator=g).to(torch.float32).requires_grad_()
    x9 = torch.randn((2, 2), generator=g).to(torch.float32)
    x10 = torch.randn((3, 2), generator=g).to(torch.float32).requires_grad_()
    x11 = torch.randn((3, 2), generator=g).to(torch.float32).requires_grad_()
    x12 = torch.randn((3,), generator=g).to(torch.float32)
    x13 = torch.randn((3, 2), generator=g).to(torch.float32).requires_grad_()
    x14 = torch.randn((3, 2), generator=g).to(torch.float32).requires_grad_()
    x15 = torch.randn((3,), generator=g).to(torch.float32).requires_grad_()
    x16 = torch.randn((3, 2), generator=g).to(torch.float32)
    x17 = torch.randn((3,), generator=g).to(torch.float32)
    x18 = torch.randn((3, 2), generator=g).to(torch.float32).requires_grad_()
    return [x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18], [x0, x3, x7, x8, x10, x11, x13, x14, x15, x18]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='pre_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
