"""Global amp state (apex.amp._amp_state): opt properties, loss scalers, and master_params()."""


class AmpState(object):
    """Holds what amp.initialize decided; `loss_scalers` is read by real code (e.g. `loss_scalers[0].loss_scale()`)."""

    def __init__(self):
        self.hard_override = False
        self.allow_incoming_model_not_fp32 = False
        self.verbosity = 1
        self.enabled = False
        self.opt_properties = None
        self.loss_scalers = []
        self.optimizers = []
        self.autocast = None


_amp_state = AmpState()


def master_params(optimizer):
    """Generator over the params the optimizer updates (the fp32 masters under O2)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            yield p
