# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 110873, level post_grad, dynamic=False, features ['casts', 'detach', 'mixed_dtypes', 'view_chain']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 1, 2)]
# optimus-eq fuzz program: seed 110873, level post_grad, dynamic=False, features ['casts', 'detach', 'mixed_dtypes', 'view_chain']
import torch

def f(x0, x1):
    v1 = x1.flatten(1)
    v2 = torch.stack([v1], 2)
    v3 = torch.concat([x1], -3)
    v4 = v1.to(torch.float32)
    v5 = x0.detach()
    v6 = v5.unsqueeze(0).squeeze(0)
    v7 = v3.reshape(1, -1).view(1, 8, 2).reshape(1, -1)
    v8 = torch.unbind(v3, 0)
    v9 = v8[0]
    v10 = v1.reshape(1, -1).view(1, 16).reshape(1, -1)
    return (v6, v7, v9, v10,)

def make_inputs():
    g = torch.Generator().manual_seed(1793416059)
    x0 = torch.randn((3,), generator=g).to(torch.float32).requires_grad_()
    x1 = torch.randn((1, 8, 2), generator=g).to(torch.bfloat16).requires_grad_()
    return [x0, x1], [x0, x1]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options=None))
