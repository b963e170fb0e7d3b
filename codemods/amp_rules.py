"""Rule codes of the apex.amp migration (A2A1xx), with the text `apex2amp explain` prints.

The rules live by topic, each module beside the others of its concern; this module gathers them so
that the planning steps read one namespace (`from . import amp_rules as R; R.INITIALIZE`):

- amp_rules_initialize: `amp.initialize`, `amp.scale_loss`, the autocast region, opt levels, several losses
- amp_rules_steps: the optimizer step, unscaling and clipping, apex's scale and cast helpers
- amp_rules_threading: the scaler threaded through calls, closures, objects, subclasses, modules
- amp_rules_state: amp's state in checkpoints and restores
- amp_rules_apex: apex's imports, branches and uses left behind, a local `apex` shadowing it
"""
from __future__ import annotations

from .amp_rules_initialize import (  # noqa: F401
    INITIALIZE, SCALE_LOSS, AUTOCAST, OPT_LEVEL, STATIC_SCALE, NO_REGION, UNSUPPORTED, OPTIONS, PER_LOSS_SCALERS,
    PER_LOSS_UNSUPPORTED, LOSS_IDS_ONE_SCALER, REGION_OUTSIDE_FORWARD, BF16_SWITCH_NOT_REACHED,
)
from .amp_rules_steps import (  # noqa: F401
    STEP, UNSCALE, GET_SCALE, DISABLE_CASTS, REGISTER, INTERNALS, CLIP_ELSEWHERE, STEP_MISSING, CLIP_AT_BOUNDARY,
    CLIP_SCALED,
)
from .amp_rules_threading import (  # noqa: F401
    THREADED, SIGNATURE_KEPT, SCALER_CLOSURE, SCALER_ON_OBJECT, SCALER_VIA_CONSTRUCTOR, ENGINE_OVERRIDE, BACKWARD_HELPER,
    INIT_HELPER,
)
from .amp_rules_state import (  # noqa: F401
    STATE_DICT, OLD_CHECKPOINT, REINITIALIZE, SCALER_STATE_UNDER_APEX_FLAG,
)
from .amp_rules_apex import (  # noqa: F401
    APEX_IMPORT, APEX_BRANCH, LEFTOVER, STAR_IMPORT, APEX_SHADOWED, APEX_MAYBE_SHADOWED, UNSELECTABLE_APEX_MODE,
    INSTALL_CHECK_KEPT, APEX_EXTENSION_KEPT,
)
