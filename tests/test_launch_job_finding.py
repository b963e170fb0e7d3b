"""The init_process_group line the launch_job finding (A2A406) tells the user to write: env:// keeps the
backend and a timeout, drops what torchrun's environment stands for."""
import pytest

from codemods.launch_job import env_init


@pytest.mark.parametrize("init,joined", [
    ("torch.distributed.init_process_group(backend=backend, init_method=init_method, world_size=world_size, rank=rank)",
     "torch.distributed.init_process_group(backend=backend)"),
    ("dist.init_process_group(args.dist_backend, args.dist_url, world_size=args.world_size, rank=args.rank)",
     "dist.init_process_group(backend=args.dist_backend)"),
    ("dist.init_process_group('nccl', 'env://', timedelta(minutes=30), 4, 0)",
     "dist.init_process_group(backend='nccl', timeout=timedelta(minutes=30))"),
    ("dist.init_process_group(backend='gloo', store=store, rank=r, world_size=n)",
     "dist.init_process_group(backend='gloo')"),
])
def test_env_init_keeps_what_torchrun_does_not_set(init, joined):
    assert env_init(init) == joined


@pytest.mark.parametrize("init", ["dist.init_process_group(backend=b, init_method=f'tcp://{h}:{p}', world_si...",
                                  "dist.init_process_group(*a, **k)", "world_size"])
def test_env_init_gives_up_on_text_it_cannot_read(init):
    assert env_init(init) is None
