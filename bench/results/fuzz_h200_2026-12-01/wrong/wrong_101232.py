# wrong under: greedy
# --- greedy ---
# wrong: values (class 1)
# values: output 2 (against eager: no reference given): Tensor-likes are not close!
# 
# Mismatched elements: 1 / 32 (3.1%)
# Greatest absolute difference: 0.0001068115234375 at index (0, 3, 1, 1) (up to 1e-05 allowed)
# Greatest relative difference: 0.004940032958984375 at index (0, 3, 1, 1) (up to 0.001 allowed)
# optimus-eq fuzz program: seed 101232, level pre_grad, dynamic=False, features ['aliased_inputs', 'casts', 'detach', 'mixed_dtypes', 'no_grad', 'view_outputs']
import torch

def f(x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18, x19):
    v1 = x5.to(torch.float16)
    v2 = torch.chunk(x0, 2, 0)
    v3 = v2[0]
    v4 = v2[1]
    v5 = torch.unbind(x1, 0)
    v6 = v5[0]
    v7 = v5[1]
    v8 = v5[2]
    with torch.no_grad():
        v9 = torch.tanh(x1)
    v10 = torch.cat([v4], 1)
    v11 = torch.nn.functional.linear(v3, x6, None)
    v12 = torch.nn.functional.linear(v4, x7, x8)
    v13 = torch.unbind(v11, 2)
    v14 = v13[0]
    v15 = v13[1]
    v16 = v13[2]
    v17 = v13[3]
    v18 = torch.nn.functional.linear(v3, x9, x10)
    v19 = torch.nn.functional.linear(v4, x11, x12)
    v20 = v19.detach()
    v21 = v16.unsqueeze(-2)
    v22 = v9.unsqueeze(0)
    v23 = v9[1:]
    v24 = torch.nn.functional.linear(v3, x13, x14)
    v25 = torch.nn.functional.linear(v4, x15, x16)
    v26 = v25.detach()
    v27 = torch.nn.functional.linear(v24, x17, None)
    v28 = torch.nn.functional.linear(v26, x18, x19)
    v29 = (v19 * 2.0)
    return (v26, v27, v28, v29,)

def make_inputs():
    g = torch.Generator().manual_seed(2121240611)
    x0 = torch.randn((3, 4, 4, 1), generator=g).to(torch.float16)
    x1 = torch.randn((3, 6), generator=g).to(torch.float32)
    x2 = torch.randn((8, 4), generator=g).to(torch.float16)
    b0 = torch.randn((4, 6), generator=g).to(torch.bfloat16)
    x3 = b0[:, 3:]
    x4 = b0[:, :3]
    x5 = b0
    x6 = torch.randn((1, 1), generator=g).to(torch.float16)
    x7 = torch.randn((1, 1), generator=g).to(torch.float16)
    x8 = torch.randn((1,), generator=g).to(torch.float16)
    x9 = torch.randn((2, 1), generator=g).to(torch.float16)
    x10 = torch.randn((2,), generator=g).to(torch.float16)
    x11 = torch.randn((2, 1), generator=g).to(torch.float16)
    x12 = torch.randn((2,), generator=g).to(torch.float16)
    x13 = torch.randn((4, 1), generator=g).to(torch.float16)
    x14 = torch.randn((4,), generator=g).to(torch.float16)
    x15 = torch.randn((4, 1), generator=g).to(torch.float16)
    x16 = torch.randn((4,), generator=g).to(torch.float16)
    x17 = torch.randn((2, 4), generator=g).to(torch.float16)
    x18 = torch.randn((2, 4), generator=g).to(torch.float16)
    x19 = torch.randn((2,), generator=g).to(torch.float16)
    return [x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15, x16, x17, x18, x19], []

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='pre_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
