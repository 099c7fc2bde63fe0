"""Distributed graphs through the backend, on CPU with gloo and two processes: DDP (Dynamo's DDPOptimizer
splits the graph at bucket boundaries and calls the backend once per piece) and FSDP2 (``fully_shard``).
Gradients after one step equal the uncompiled DDP/FSDP model's on every rank; nothing falls back."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FIELDS, DIM = 6, 256  # 256 x 256 weights (256 KiB): with 1 MiB buckets DDP cuts the graph in pieces


class Fields(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lins = torch.nn.ModuleList([torch.nn.Linear(DIM, DIM) for _ in range(FIELDS)])
        self.head = torch.nn.Linear(FIELDS * DIM, 1)

    def forward(self, x):
        outs = []  # a loop, not a comprehension: FSDP2's hooks break the graph, and Dynamo resumes after a
        for v, lin in zip(torch.split(x, DIM, 1), self.lins):  # break in a loop but not in a comprehension
            outs.append(lin(v).tanh())
        return self.head(torch.cat(outs, 1))


def _wrap(kind: str, model: torch.nn.Module, mesh):
    if kind == "ddp":
        return torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1)
    from torch.distributed.fsdp import fully_shard

    return fully_shard(model, mesh=mesh)


def _grads(model):
    out = []
    for p in model.parameters():
        g = p.grad
        out.append(g.full_tensor() if hasattr(g, "full_tensor") else g)
    return out


def _worker(rank: int, world: int, port: int, kind: str, strategy: str, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        import optimus_eq
        from torch.distributed.device_mesh import init_device_mesh

        mesh = init_device_mesh("cpu", (world,)) if kind == "fsdp" else None
        torch.manual_seed(rank)
        x = torch.randn(4, FIELDS * DIM)
        ref, ours = _wrap(kind, Fields(), mesh), _wrap(kind, Fields(), mesh)
        backend = optimus_eq.backend(strategy=strategy, compile=False)
        if kind == "fsdp":  # FSDP2's hooks stay eager (Dynamo gives up on a whole top-level module call that
            # runs them); the forward between them, on the unsharded parameters, is compiled
            ours.forward = torch.compile(ours.forward, backend=backend)
            compiled = ours
        else:
            compiled = torch.compile(ours, backend=backend)
        ref(x).sum().backward()
        compiled(x).sum().backward()
        errors = [float((a - b).abs().max()) for a, b in zip(_grads(ours), _grads(ref))]
        reports = [(r.fallback, r.nodes_before, r.nodes_after, dict(r.rule_matches)) for r in optimus_eq.last_reports]
        queue.put((rank, errors, reports, None))
    except Exception as exc:  # noqa: BLE001 -- reported to the test process
        queue.put((rank, None, None, repr(exc)))
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(), reason="needs torch.distributed with gloo")
@pytest.mark.parametrize("kind", ["ddp", "fsdp"])
def test_distributed_gradients_equal_eager(kind):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, kind, "greedy", queue)) for r in range(2)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=540) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    for rank, errors, reports, failure in results:
        assert failure is None, f"rank {rank}: {failure}"
        assert reports and all(fallback is None for fallback, *_ in reports), reports
        if kind == "ddp":
            assert len(reports) >= 2, "DDPOptimizer should have split the graph at a bucket boundary"
        else:  # one graph: six linears batched (the default min_fuse_set_size is 5)
            assert len(reports) == 1 and reports[0][3].get("batch_linear", 0) >= 1, reports
        # one step of the same ops on the same data; the batched linear changes no reduction order here
        assert max(errors) <= 1e-5, (rank, errors)
