# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: grad_values (new)
# grad_values: leaf 0: Tensor-likes are not close!
# 
# Mismatched elements: 12 / 32 (37.5%)
# Greatest absolute difference: 0.015625 at index (3, 1) (up to 1e-05 allowed)
# Greatest relative difference: 0.007092198356986046 at index (0, 3) (up to 1.3e-06 allowed)
# optimus-eq fuzz program: seed 102597, level pre_grad, dynamic=False, features ['casts', 'mixed_dtypes', 'some_requires_grad', 'view_chain']
# --- greedy ---
# wrong: grad_values (new)
# grad_values: leaf 0: Tensor-likes are not close!
# 
# Mismatched elements: 12 / 32 (37.5%)
# Greatest absolute difference: 0.015625 at index (3, 1) (up to 1e-05 allowed)
# Greatest relative difference: 0.007092198356986046 at index (0, 3) (up to 1.3e-06 allowed)
# optimus-eq fuzz program: seed 102597, level pre_grad, dynamic=False, features ['casts', 'mixed_dtypes', 'some_requires_grad', 'view_chain']
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7, x8):
    v1 = x0.to(torch.bfloat16)
    v2 = torch.cat([v1], 0)
    v3 = torch.tanh(v1)
    v4 = torch.tanh(v2)
    v5 = torch.nn.functional.layer_norm(v3, [4], x2, x3, 1e-05)
    v6 = torch.nn.functional.layer_norm(v4, [4], x4, x5, 1e-05)
    v7 = v1.reshape(8, -1).view(8, 4).reshape(8, -1)
    v8 = torch.nan_to_num(v5)
    v9 = torch.nan_to_num(v6)
    v10 = (x4 - 1)
    v11 = torch.nn.functional.linear(v3, x6, None)
    v12 = torch.nn.functional.linear(v4, x7, x8)
    return (v10, v11, v12, v10,)

def make_inputs():
    g = torch.Generator().manual_seed(1349043758)
    x0 = torch.randn((4, 8), generator=g).to(torch.float32).permute((1, 0)).requires_grad_()
    x1 = torch.randn((4, 2), generator=g).to(torch.float16).requires_grad_()
    x2 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x3 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x4 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x5 = torch.randn((4,), generator=g).to(torch.bfloat16)
    x6 = torch.randn((4, 4), generator=g).to(torch.bfloat16)
    x7 = torch.randn((4, 4), generator=g).to(torch.bfloat16).requires_grad_()
    x8 = torch.randn((4,), generator=g).to(torch.bfloat16).requires_grad_()
    return [x0, x1, x2, x3, x4, x5, x6, x7, x8], [x0, x1, x7, x8]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='pre_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
