# SPDX-License-Identifier: Apache-2.0
"""SyncBatchNorm, as horovod.torch.SyncBatchNorm: batch normalization whose training-mode
statistics cover the whole global batch (every rank's samples), not just the local one.

Per forward pass two small differentiable allreduces (Sum): the per-channel sums with the
sample count give the global mean, then the sums of squared deviations from that mean give the
biased variance (two passes, as torch's own batch norm: E[x^2] - mean^2 in one pass loses all
precision when the mean is large against the spread). Autograd's gradient through them (the same
Sum allreduces of the gradients) makes the backward pass match a single process that saw the
global batch. Statistics are accumulated in float32 for half-precision inputs. In eval mode with
running statistics, or in a job of one rank, it is plain batch norm; in eval mode without them
(track_running_stats=False) the batch statistics are global too, as in Horovod.
"""

import torch
from torch.nn.modules.batchnorm import _BatchNorm

from kolo.basics import size
from kolo.common import Sum
from kolo.process_sets import global_process_set
from kolo.torch.mpi_ops import allreduce


class SyncBatchNorm(_BatchNorm):
    """Batch normalization whose statistics cover the whole batch of every rank.

    A drop-in for torch.nn.BatchNorm1d, 2d and 3d in data-parallel training: any input of 2
    or more dimensions with the channels in dimension 1.

    Args:
        num_features (int): the number of channels.
        eps (float): added to the variance, for numerical stability.
        momentum (float): the factor of the running statistics; None uses a cumulative
            average.
        affine (bool): whether to learn a weight and a bias per channel.
        track_running_stats (bool): whether to keep running mean and variance for eval mode.
        process_set (ProcessSet): the ranks whose batches are combined (default: every rank).
    """

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_set=global_process_set):
        super().__init__(num_features, eps, momentum, affine, track_running_stats)
        self.process_set = process_set

    def _check_input_dim(self, input):
        if input.dim() < 2:
            raise ValueError("expected at least 2D input (got {}D input)".format(input.dim()))

    def forward(self, input):
        """Normalizes `input` with the mean and variance over every rank's batch.

        In training mode, it sums the per-channel sums, counts and squared deviations over the
        process set with allreduce, and updates the running statistics. With one rank, or in
        eval mode with running statistics, it is plain BatchNorm.

        Args:
            input (torch.Tensor): a tensor of shape (N, C, ...).

        Returns:
            output (torch.Tensor): the normalized tensor, in the dtype of `input`.

        Raises:
            ValueError: `input` has fewer than 2 dimensions.
        """
        self._check_input_dim(input)
        if size() == 1 or (not self.training and self.track_running_stats):
            return super().forward(input)
        factor = 0.0
        if self.track_running_stats:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
            else:
                factor = self.momentum
        channels = input.size(1)
        work = input.float() if input.dtype in (torch.float16, torch.bfloat16) else input
        dims = [0] + list(range(2, input.dim()))
        count = torch.tensor([float(input.numel() // max(1, channels))], dtype=work.dtype,
                             device=work.device)
        shape = [1, channels] + [1] * (input.dim() - 2)
        total = allreduce(torch.cat([work.sum(dims), count]), op=Sum,
                          process_set=self.process_set)
        n = total[channels]
        mean = total[:channels] / n
        centered = work - mean.view(shape)
        var = allreduce((centered * centered).sum(dims), op=Sum, process_set=self.process_set) / n
        if self.track_running_stats:
            with torch.no_grad():
                unbiased = var * (n / (n - 1)) if n.item() > 1 else var
                self.running_mean.mul_(1 - factor).add_(mean.detach().to(self.running_mean.dtype),
                                                        alpha=factor)
                self.running_var.mul_(1 - factor).add_(unbiased.to(self.running_var.dtype),
                                                       alpha=factor)
        out = centered * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape).to(out.dtype) + self.bias.view(shape).to(out.dtype)
        return out.to(input.dtype)
