# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 108577, level post_grad, dynamic=False, features ['some_requires_grad', 'view_chain', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 0, 1)]
# optimus-eq fuzz program: seed 108577, level post_grad, dynamic=False, features ['some_requires_grad', 'view_chain', 'view_outputs']
import torch

def f(x0, x1, x2):
    v1 = torch.cat([x0], 1)
    v2 = v1.unsqueeze(0)
    v3 = v1[1:]
    v4 = v2.reshape(1, -1).view(1, 2, 1, 4, 6).reshape(1, -1)
    v5 = torch.movedim(x0, 1, 2)
    v6 = torch.concat([v4], 1)
    return (v3, v4, v5, v6,)

def make_inputs():
    g = torch.Generator().manual_seed(246480425)
    x0 = torch.randn((2, 1, 4, 6), generator=g).to(torch.float16)
    x1 = torch.randn((4, 1, 4, 3), generator=g).to(torch.float16).requires_grad_()
    x2 = torch.randn((8,), generator=g).to(torch.float16).requires_grad_()
    return [x0, x1, x2], [x1, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=False, pattern_options=None))
