# wrong under: eqsat, greedy
# --- eqsat ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 106644, level post_grad, dynamic=True, features ['dynamic', 'symbolic', 'view_outputs']
# --- greedy ---
# wrong: aliasing_lost (class 5)
# aliasing_lost: eager's outputs are views of inputs or overlap where ours do not: [('out', 2, 3)]
# optimus-eq fuzz program: seed 106644, level post_grad, dynamic=True, features ['dynamic', 'symbolic', 'view_outputs']
import torch

def f(x0, x1, x2):
    v1 = x1.view(x1.shape[0], x1.shape[1], x1.shape[2])
    v2 = torch.concat([x2], 0)
    v3 = v2[(slice(None),) * 1 + (slice(3, 3),)]
    v4 = torch.concat([v3], 0)
    v5 = torch.relu(x2)
    v6 = torch.relu(v2)
    v7 = torch.split(v2, [4], 2)
    v8 = v7[0]
    v9 = v8[:v8.shape[0] // 2]
    v10 = torch.split(v5, [1], 0)
    v11 = v10[0]
    v12 = v8.unsqueeze(0)
    v13 = v8.view(-1)
    return (v9, v11, v12, v13,)

def make_inputs():
    g = torch.Generator().manual_seed(1822783611)
    x0 = torch.randn((2, 4, 1, 4), generator=g).to(torch.float32).permute((3, 2, 1, 0)).requires_grad_()
    x1 = torch.randn((2, 6, 1), generator=g).to(torch.float32).requires_grad_()
    x2 = torch.randn((1, 4, 4), generator=g).to(torch.float32).requires_grad_()
    return [x0, x1, x2], [x0, x1, x2]

if __name__ == '__main__':
    from fuzzing import run_program
    print(run_program(f, make_inputs, ['greedy', 'eqsat'], level='post_grad', dynamic=True, pattern_options=None))
