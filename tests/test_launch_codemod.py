"""The launch codemod beyond the golden pairs: launch notes, suppression, name resolution."""
import os

from migrate.engine import rewrite_source

FIX = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "fixtures", "launch")


def _src(name):
    with open(os.path.join(FIX, name), encoding="utf-8") as fh:
        return fh.read()


def test_imagenet_launch_note_uses_argparse_defaults():
    r = rewrite_source(_src("imagenet_spawn.before.py"), path="main.py")
    assert r.launch_notes == [{
        "path": "main.py",
        "command": "torchrun --standalone --nproc_per_node=gpu main.py --multiprocessing-distributed ...",
        "multi_node": "torchrun --nnodes=<NNODES> --node_rank=<NODE_RANK> --master_addr=224.66.41.62 "
                      "--master_port=23456 --nproc_per_node=gpu main.py --multiprocessing-distributed ...",
    }]


def test_literal_nprocs_and_suppression():
    src = ("import torch.distributed as dist\nimport torch.multiprocessing as mp\n\n\n"
           "def w(i):\n    dist.init_process_group('gloo')\n\n\n"
           "mp.spawn(w, nprocs=4)\n")
    r = rewrite_source(src, path="t.py")
    assert 'w(int(os.environ["LOCAL_RANK"]))' in r.new_text and "import os" in r.new_text
    assert r.launch_notes[0]["command"].startswith("torchrun --standalone --nproc_per_node=4 t.py")
    ignored = src.replace("mp.spawn(w, nprocs=4)", "mp.spawn(w, nprocs=4)  # apex2amp: ignore[A2A401]")
    assert rewrite_source(ignored).new_text == ignored


def test_spawn_named_like_mp_but_not_torch_is_left_alone():
    src = ("import multiprocessing as mp\n\n\ndef w(i):\n    init_process_group('gloo')\n\n\n"
           "mp.spawn(w, nprocs=2)\n")
    r = rewrite_source(src)
    assert r.new_text == src and not r.findings


def test_pre_spawn_download_is_reported():
    r = rewrite_source(_src("nr_gpus_spawn.before.py"))
    f = [f for f in r.findings if f.code == "A2A405"]
    assert f and f[0].line == 17 and not f[0].fixed


def test_torch_ddp_named_ddp_is_not_rewritten():
    src = ("from torch.nn.parallel import DistributedDataParallel as DDP\nimport apex\n\n"
           "model = DDP(model)\nother = apex.parallel.DistributedDataParallel(model)\n")
    r = rewrite_source(src)
    assert "model = DDP(model)\n" in r.new_text
    assert "other = torch.nn.parallel.DistributedDataParallel(model, broadcast_buffers=False)" in r.new_text
