# wrong under: greedy
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 3, 6)]
# optimus-eq fuzz program: seed 101757, level post_grad, dynamic=False, features ['aliased_inputs', 'casts', 'mixed_dtypes', 'mutation', 'view_chain']
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7, x8):
    v1 = torch.sigmoid(x5)
    x1.add_(1)
    v2 = x0.to(torch.float16)
    v3 = x3.split(1, 0)[0]
    x5.mul_(-2)
    v4 = x3.split(1, 0)[0]
    v5 = torch.split(v3, 2, dim=1)
    v6 = v5[0]
    v7 = v5[1]
    v8 = torch.nn.functional.linear(v6, x6, x7)
    v9 = torch.nn.functional.linear(v7, x8, None)
    v10 = v4.reshape(1, 4)
    v11 = v6.reshape(1, -1).view(1, 2).reshape(1, -1)
    v12 = torch.sigmoid(v6)
    v13 = torch.sigmoid(v7)
    v14 = v12.contiguous()
    v15 = torch.tanh(x5)
    x4.mul_(-2)
    v16 = torch.tanh(x5)
    v17 = v12.clamp(min=0.1)
    v18 = v13.clamp(min=0.1)
    v19 = v15.flatten(0)
    return (v16, v17, v18, v19, v3, v4, v15,)

def make_inputs():
    g = torch.Generator().manual_seed(916869275)
    x0 = torch.randn((2, 4), generator=g).to(torch.float32).permute((1, 0))
    x1 = torch.randn((2, 4), generator=g).to(torch.float16)
    x2 = torch.randn((4, 6), generator=g).to(torch.bfloat16)
    b0 = torch.randn((3, 4), generator=g).to(torch.bfloat16)
    x3 = b0
    x4 = b0[0]
    x5 = b0[:, 2:]
    x6 = torch.randn((2, 2), generator=g).to(torch.bfloat16)
    x7 = torch.randn((2,), generator=g).to(torch.bfloat16)
    x8 = torch.randn((2, 2), generator=g).to(torch.bfloat16)
    return [x0, x1, x2, x3, x4, x5, x6, x7, x8], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
