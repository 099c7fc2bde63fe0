# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: grad_values (new)
# grad_values: leaf 0: Tensor-likes are not close!
# 
# Mismatched elements: 2 / 48 (4.2%)
# Greatest absolute difference: 0.0009765625 at index (0, 0, 0, 3) (up to 1e-05 allowed)
# Greatest relative difference: 0.0008097165846265852 at index (1, 0, 0, 3) (up to 1.3e-06 allowed)
# optimus-eq fuzz program: seed 102970, level pre_grad, dynamic=False, features ['casts', 'view_chain', 'view_outputs']
# --- greedy ---
# wrong: grad_values (new)
# grad_values: leaf 0: Tensor-likes are not close!
# 
# Mismatched elements: 2 / 48 (4.2%)
# Greatest absolute difference: 0.0009765625 at index (0, 0, 0, 3) (up to 1e-05 allowed)
# Greatest relative difference: 0.0008097165846265852 at index (1, 0, 0, 3) (up to 1.3e-06 allowed)
# optimus-eq fuzz program: seed 102970, level pre_grad, dynamic=False, features ['casts', 'view_chain', 'view_outputs']
import torch

def f(x0, x1):
    v1 = x0.to(torch.float16)
    v2 = x0[(slice(None),) * 2 + (slice(0, 0),)]
    v3 = v1.contiguous(memory_format=torch.channels_last)
    v4 = x0.reshape(2, -1).view(2, 6, 1, 4).reshape(2, -1)
    v5 = x1.to(torch.bfloat16)
    v6 = v1.transpose(0, -1)
    v7 = torch.stack([x0], 0)
    v8 = x0.detach()
    v9 = v6 * v6
    v10 = v6.unsqueeze(0)
    v11 = v6[2:]
    v12 = torch.unbind(v9, 1)
    v13 = v12[0]
    v14 = v12[1]
    v15 = v12[2]
    v16 = v12[3]
    v17 = v12[4]
    v18 = v12[5]
    v19 = torch.unbind(v6, -1)
    v20 = v19[0]
    v21 = v19[1]
    v22 = v11.reshape(2, -1).view(2, 6, 1, 2).reshape(2, -1)
    return (v22, v13,)

def make_inputs():
    g = torch.Generator().manual_seed(80918176)
    x0 = torch.randn((2, 6, 1, 4), generator=g).to(torch.float32).requires_grad_()
    x1 = torch.randn((1, 3, 1, 4), generator=g).to(torch.float32).permute((3, 2, 1, 0)).requires_grad_()
    return [x0, x1], [x0, x1]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='pre_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
