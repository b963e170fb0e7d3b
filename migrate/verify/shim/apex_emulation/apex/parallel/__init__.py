"""Emulated apex.parallel: DistributedDataParallel (torch DDP without buffer broadcast), SyncBatchNorm."""
import torch
import torch.distributed as dist


class DistributedDataParallel(torch.nn.parallel.DistributedDataParallel):
    """apex DDP by torch DDP: grads averaged across ranks, params broadcast at start, buffers never broadcast."""

    def __init__(self, module, message_size=10000000, delay_allreduce=False, shared_param=None,
                 allreduce_trigger_params=None, retain_allreduce_buffers=False, allreduce_always_fp32=False,
                 num_allreduce_streams=1, allreduce_communicators=None, gradient_average=True,
                 gradient_predivide_factor=1.0, gradient_average_split_factor=None, prof=False):
        super().__init__(module, broadcast_buffers=False, find_unused_parameters=bool(delay_allreduce))


class SyncBatchNorm(torch.nn.SyncBatchNorm):
    """apex SyncBatchNorm by torch's (channel_last and fuse_relu are not emulated)."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 process_group=None, channel_last=False, fuse_relu=False):
        super().__init__(num_features, eps=eps, momentum=momentum, affine=affine,
                         track_running_stats=track_running_stats, process_group=process_group)


def convert_syncbn_model(module, process_group=None, channel_last=False):
    """Replace BatchNorm layers by SyncBatchNorm (torch's conversion)."""
    return torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group)


def create_syncbn_process_group(group_size):
    """Split the world into groups of `group_size` ranks; returns this rank's group (None for group_size 0)."""
    if group_size == 0:
        return None
    world_size = dist.get_world_size()
    rank = dist.get_rank()
    group = None
    for start in range(0, world_size, group_size):
        g = dist.new_group(list(range(start, start + group_size)))
        if start <= rank < start + group_size:
            group = g
    return group


Reducer = None
