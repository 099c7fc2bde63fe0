# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 110162, level post_grad, dynamic=False, features []
# --- greedy ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 110162, level post_grad, dynamic=False, features []
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7):
    v1 = torch.stack([x0], 3)
    v2 = torch.cat([v1], -3)
    v3 = x0.transpose(0, -1)
    v4 = v1.detach()
    v5 = v2.detach()
    v6 = torch.nn.functional.layer_norm(v4, [1], x2, x3, 0.1)
    v7 = torch.nn.functional.layer_norm(v5, [1], None, None, 0.1)
    v8 = torch.nn.functional.linear(v4, x4, x5)
    v9 = torch.nn.functional.linear(v5, x6, x7)
    v10 = torch.cat([v6, v7], 2)
    v11 = v6 * v6
    v12 = v4[(slice(None),) * 2 + (slice(3, 3),)]
    return (v12, v12,)

def make_inputs():
    g = torch.Generator().manual_seed(436935716)
    x0 = torch.randn((3, 0, 4), generator=g).to(torch.bfloat16).requires_grad_()
    x1 = torch.randn((2, 1, 8, 2), generator=g).to(torch.bfloat16).requires_grad_()
    x2 = torch.randn((1,), generator=g).to(torch.bfloat16).requires_grad_()
    x3 = torch.randn((1,), generator=g).to(torch.bfloat16).requires_grad_()
    x4 = torch.randn((1, 1), generator=g).to(torch.bfloat16).requires_grad_()
    x5 = torch.randn((1,), generator=g).to(torch.bfloat16).requires_grad_()
    x6 = torch.randn((1, 1), generator=g).to(torch.bfloat16).requires_grad_()
    x7 = torch.randn((1,), generator=g).to(torch.bfloat16).requires_grad_()
    return [x0, x1, x2, x3, x4, x5, x6, x7], [x0, x1, x2, x3, x4, x5, x6, x7]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
