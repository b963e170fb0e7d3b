"""apex.amp.scaler.LossScaler: dynamic (2**16 start, x2 every 2000 clean steps, /2 on overflow, max 2**24) or static."""
import torch


class LossScaler(object):
    """apex's loss scaler; a static scale never reports overflow (so apex never skipped those steps)."""

    def __init__(self, loss_scale, init_scale=2. ** 16, scale_factor=2., scale_window=2000,
                 min_loss_scale=None, max_loss_scale=2. ** 24):
        if loss_scale == "dynamic":
            self.dynamic = True
            self._loss_scale = min(max_loss_scale, init_scale)
        else:
            self.dynamic = False
            self._loss_scale = loss_scale
        self._max_loss_scale = max_loss_scale
        self._min_loss_scale = min_loss_scale
        self._scale_seq_len = scale_window
        self._scale_factor = scale_factor
        self._unskipped = 0
        self._has_overflow = False

    def loss_scale(self):
        return self._loss_scale

    def clear_overflow_state(self):
        self._has_overflow = False

    def check_overflow(self, tensors):
        """Record overflow when any tensor holds inf/NaN (dynamic scaling only, as apex)."""
        if self.dynamic and not self._has_overflow:
            for t in tensors:
                if t is not None and not bool(torch.isfinite(t).all()):
                    self._has_overflow = True
                    break

    def update_scale(self):
        """apex's update rule; returns True when the step must be skipped."""
        if self._has_overflow and self.dynamic:
            should_skip = True
            if self._min_loss_scale:
                self._loss_scale = max(self._min_loss_scale, self._loss_scale / 2.)
            else:
                self._loss_scale = self._loss_scale / 2.
            self._unskipped = 0
        else:
            should_skip = False
            self._unskipped += 1
        if self._unskipped == self._scale_seq_len and self.dynamic:
            self._loss_scale = min(self._max_loss_scale, self._loss_scale * 2.)
            self._unskipped = 0
        return should_skip
