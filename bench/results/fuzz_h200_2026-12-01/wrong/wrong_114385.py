# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: values (new)
# values: output 0 (against eager: no reference given): Tensor-likes are not close!
# 
# Mismatched elements: 3 / 80 (3.8%)
# Greatest absolute difference: 0.009765625 at index (2, 1, 1) (up to 1e-05 allowed)
# Greatest relative difference: 0.0322265625 at index (3, 4, 3) (up to 0.016 allowed)
# optimus-eq fuzz program: seed 114385, level pre_grad, dynamic=False, features ['casts', 'some_requires_grad', 'view_chain']
# --- greedy ---
# wrong: values (new)
# values: output 0 (against eager: no reference given): Tensor-likes are not close!
# 
# Mismatched elements: 3 / 80 (3.8%)
# Greatest absolute difference: 0.009765625 at index (2, 1, 1) (up to 1e-05 allowed)
# Greatest relative difference: 0.0322265625 at index (3, 4, 3) (up to 0.016 allowed)
# optimus-eq fuzz program: seed 114385, level pre_grad, dynamic=False, features ['casts', 'some_requires_grad', 'view_chain']
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18):
    v1 = x0.reshape(8, -1).view(8, 8, 4).reshape(8, -1)
    v2 = torch.concat([x0, x0], 0)
    v3 = torch.stack([v1], -2)
    v4 = torch.split(v2, [8, 7, 1], 0)
    v5 = v4[0]
    v6 = v4[1]
    v7 = v4[2]
    v8 = torch.nn.functional.linear(v5, x1, x2)
    v9 = torch.nn.functional.linear(v6, x3, x4)
    v10 = torch.nn.functional.linear(v7, x5, x6)
    v11 = torch.split(v8, 5, dim=1)
    v12 = v11[0]
    v13 = v11[1]
    v14 = torch.nn.functional.linear(v12, x7, x8)
    v15 = torch.nn.functional.linear(v13, x7, x9)
    v16 = torch.nn.functional.linear(v14, x10, None)
    v17 = torch.nn.functional.linear(v15, x10, None)
    v18 = v7.squeeze()
    v19 = torch.nn.functional.relu(v16)
    v20 = torch.nn.functional.relu(v17)
    v21 = torch.chunk(v14, 2, 0)
    v22 = v21[0]
    v23 = v21[1]
    v24 = x7.to(torch.float16)
    v25 = torch.nn.functional.linear(v16, x11, x12)
    v26 = torch.nn.functional.linear(v17, x13, x14)
    v27 = torch.nn.functional.layer_norm(v22, [4], x15, x16, 1e-05)
    v28 = torch.nn.functional.layer_norm(v23, [4], x17, x18, 1e-05)
    return (v27, v28,)

def make_inputs():
    g = torch.Generator().manual_seed(1247777855)
    x0 = torch.randn((4, 8, 8), generator=g).to(torch.bfloat16).permute((2, 1, 0))
    x1 = torch.randn((3, 4), generator=g).to(torch.bfloat16).requires_grad_()
    x2 = torch.randn((3,), generator=g).to(torch.bfloat16).requires_grad_()
    x3 = torch.randn((3, 4), generator=g).to(torch.bfloat16).requires_grad_()
    x4 = torch.randn((3,), generator=g).to(torch.bfloat16)
    x5 = torch.randn((3, 4), generator=g).to(torch.bfloat16).requires_grad_()
    x6 = torch.randn((3,), generator=g).to(torch.bfloat16).requires_grad_()
    x7 = torch.randn((4, 3), generator=g).to(torch.bfloat16).requires_grad_()
    x8 = torch.randn((4,), generator=g).to(torch.bfloat16).requires_grad_()
    x9 = torch.randn((4,), generator=g).to(torch.bfloat16).requires_grad_()
    x10 = torch.randn((2, 4), generator=g).to(torch.bfloat16)
    x11 = torch.randn((2, 2), generator=g).to(torch.bfloat16).requires_grad_()
    x12 = torch.randn((2,), generator=g).to(torch.bfloat16)
    x13 = torch.randn((2, 2), generator=g).to(torch.bfloat16)
    x14 = torch.randn((2,), generator=g).to(torch.bfloat16).requires_grad_()
    x15 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x16 = torch.randn((4,), generator=g).to(torch.bfloat16).requires_grad_()
    x17 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x18 = torch.randn((4,), generator=g).to(torch.bfloat16).requires_grad_()
    return [x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18], [x1, x2, x3, x5, x6, x7, x8, x9, x11, x14, x16, x18]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='pre_grad', dynamic=False, pattern_options=None))
