# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: requires_grad (class 4)
# requires_grad: output 2: requires_grad True, eager's False
# optimus-eq fuzz program: seed 101063, level post_grad, dynamic=False, features ['aliased_inputs', 'casts', 'mixed_dtypes', 'some_requires_grad', 'view_outputs']
# --- greedy ---
# wrong: requires_grad (class 4)
# requires_grad: output 2: requires_grad True, eager's False
# optimus-eq fuzz program: seed 101063, level post_grad, dynamic=False, features ['aliased_inputs', 'casts', 'mixed_dtypes', 'some_requires_grad', 'view_outputs']
import torch

def f(x0, x1, x2, x3, x4, x5):
    v1 = x3.narrow(1, 1, 1)
    v2 = x5.to(torch.bfloat16) * 1
    v3 = torch.tanh(x2)
    v4 = v3.squeeze()
    v5 = v4.unsqueeze(0)
    v6 = v4[1:]
    v7 = torch.cat([v3], 1)
    v8 = v1 + v1
    v9 = v6.detach()
    v10 = torch.stack([v3, v3], 1)
    return (v7, v8, v9, v10, x0,)

def make_inputs():
    g = torch.Generator().manual_seed(370573977)
    x0 = torch.randn((8, 0, 6, 4), generator=g).to(torch.float16).requires_grad_()
    x1 = torch.randn((1,), generator=g).to(torch.bfloat16)
    x2 = torch.randn((1, 2, 0, 3), generator=g).to(torch.bfloat16).permute((3, 2, 1, 0)).requires_grad_()
    b0 = torch.randn((2, 6), generator=g).to(torch.float32)
    x3 = b0
    x4 = b0[:, :3]
    x5 = b0.view(-1)
    return [x0, x1, x2, x3, x4, x5], [x0, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
