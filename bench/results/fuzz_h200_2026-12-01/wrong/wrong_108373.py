# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 108373, level post_grad, dynamic=False, features ['casts', 'detach', 'no_grad', 'view_chain', 'view_outputs']
# --- greedy ---
# wrong: requires_grad (class 4)
# requires_grad: output 0: requires_grad True, eager's False
# optimus-eq fuzz program: seed 108373, level post_grad, dynamic=False, features ['casts', 'detach', 'no_grad', 'view_chain', 'view_outputs']
import torch

def f(x0):
    v1 = x0.reshape(8, 6)
    v2 = torch.cat([v1], 1)
    v3 = v1 * v1
    v4 = x0.permute([1, 0])
    v5 = torch.split(v2, [6], 1)
    v6 = v5[0]
    v7 = v2.reshape(8, -1).view(8, 6).reshape(8, -1)
    v8 = v6.unsqueeze(1)
    v9 = torch.stack([v6, v3], -3)
    v10 = v1.unsqueeze(0)
    v11 = v1[4:]
    v12 = v7.to(torch.bfloat16)
    with torch.no_grad():
        v13 = torch.sigmoid(v4)
    v14 = v12.detach()
    return (v14,)

def make_inputs():
    g = torch.Generator().manual_seed(604651662)
    x0 = torch.randn((8, 6), generator=g).to(torch.float16).requires_grad_()
    return [x0], [x0]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options={'batch_linear_lhs': {'min_fuse_set_size': 2}, 'batch_linear': {'min_fuse_set_size': 2}, 'batch_layernorm': {'min_fuse_set_size': 2}, 'batch_tanh': {'min_fuse_set_size': 2}, 'batch_sigmoid': {'min_fuse_set_size': 2}, 'batch_relu': {'min_fuse_set_size': 2}, 'batch_detach': {'min_fuse_set_size': 2}, 'batch_nan_to_num': {'min_fuse_set_size': 2}, 'batch_clamp': {'min_fuse_set_size': 2}, 'batch_dropout': {'min_fuse_set_size': 2}}))
